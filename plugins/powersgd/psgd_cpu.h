/* psgd_cpu.h: PowerSGD's last pass fused into one sweep on the CPU.
 *
 * The result out = P Q^T of a matrix, written and subtracted from M in
 * the same sweep: what OpenBLAS did, 256 KiB of rows at a time, as a GEMM
 * that zeroes its output and packs an operand first (the zeroing and
 * packing alone were 21% of rank 0's samples in a profile of GPT-2's
 * shapes at rank 4) and an axpy that read the result back. */
#ifndef PSGD_CPU_H
#define PSGD_CPU_H

#include <stddef.h>

/* The largest rank the sweep is used for.  Measured on GPT-2's 50257 x
 * 768 embedding, one process: 17.5 / 18.9 ms against OpenBLAS's 23.0 /
 * 23.8 ms at ranks 2 / 4, but 48 / 60 ms against 29 / 35 ms at 8 / 16,
 * where the products, not the memory, take the time and OpenBLAS's
 * register blocking wins.  (OpenBLAS ran these blocks on one thread
 * also when allowed two.) */
#define PSGD_CPU_MAX_RANK 4

/* For each of h rows i and each column j < m:
 *   out[i*m + j] = sum over k < r, in order, of p[i*r + k] * qt[k*m + j]
 * and, when err is not NULL, err[i*m + j] -= out[i*m + j].
 * qt is Q transposed (r x m).  The same sums in the same order on every
 * path, so the result does not depend on the CPU's vector width. */
void psgd_cpu_reconstruct(size_t h, size_t m, size_t r, const float *p,
                          const float *qt, float *out, float *err);

#endif
