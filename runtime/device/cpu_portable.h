/* cpu_portable.h: CPU arithmetic that gives the same bits on every CPU.
 *
 * OpenBLAS picks its kernels for the CPU it runs on (OPENBLAS_CORETYPE
 * overrides), and kernels of different CPU generations round differently.
 * Where every rank computes from the same inputs and keeps the result
 * without averaging it, as PowerSGD does when it orthogonalises the
 * averaged P, ranks on different CPUs would get different bits and their
 * replicas would drift apart.  These
 * kernels are plain C in one fixed order of operations, compiled once, so
 * they give the same bits wherever the library runs. */
#ifndef DDPH_CPU_PORTABLE_H
#define DDPH_CPU_PORTABLE_H

#include <stddef.h>

#include "support/util.h"

/* gemm's inner dimension up to which ddph__cpu_gemm uses the portable
 * kernel: a plugin's product of shared inputs at a small rank.  Longer
 * products (M Q, M^T P) have per-rank inputs that are averaged
 * afterwards, and go to OpenBLAS; PowerSGD's P Q^T, at any rank, is its
 * own fixed-order sweep (plugins/powersgd/psgd_cpu.h). */
#define DDPH__PORTABLE_GEMM_MAX_K 64

/* Row-major C = alpha op(A) op(B) + beta C (beta = 0: C is not read),
 * each element's sum in order of the inner index. */
ddph_status ddph__portable_gemm(int trans_a, int trans_b, size_t m, size_t n,
                                size_t k, float alpha, const float *a,
                                size_t lda, const float *b, size_t ldb,
                                float beta, float *c, size_t ldc,
                                ddph_err *err);

/* The Q of a Householder QR of the row-major rows x cols matrix x, in
 * place, with LAPACK's conventions (sgeqrf's reflectors, sorgqr's Q). */
ddph_status ddph__portable_qr(float *x, size_t rows, size_t cols,
                              ddph_err *err);

#endif
