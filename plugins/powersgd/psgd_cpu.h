/* psgd_cpu.h: PowerSGD's last pass, the result P Q^T, on the CPU.
 *
 * Every rank computes it from the same allreduced P and Q and keeps it,
 * so it must give the same bits on every rank: OpenBLAS's GEMM does not
 * (its kernels, and how it splits a product between threads, depend on
 * the CPU and the thread count).  This sweep is plain C in one fixed
 * order for every rank r, and writes the result and subtracts it from M
 * (the new error) in the same pass: what OpenBLAS did as a GEMM that
 * zeroes its output and packs an operand first (21% of rank 0's samples
 * in a profile of GPT-2's shapes at rank 4) and an axpy that read the
 * result back. */
#ifndef PSGD_CPU_H
#define PSGD_CPU_H

#include <stddef.h>

/* packed (m * r floats) = the m x r row-major Q in the layout
 * psgd_cpu_reconstruct reads. */
void psgd_cpu_pack(size_t m, size_t r, const float *q, float *packed);

/* For each of h rows i and each column j < m:
 *   out[i*m + j] = sum over k < r, in order, of p[i*r + k] * q[j*r + k]
 * and, when err is not NULL, err[i*m + j] -= out[i*m + j], with Q packed
 * by psgd_cpu_pack.  The same sums in the same order on every path, so
 * the result depends on neither the CPU's vector width nor its blocking;
 * each product is rounded before it is added (no FMA). */
void psgd_cpu_reconstruct(size_t h, size_t m, size_t r, const float *p,
                          const float *packed, float *out, float *err);

#endif
