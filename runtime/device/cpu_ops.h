/* cpu_ops.h: device operations on host memory, behind the services table:
 * f32 <-> f16/bf16 casts, division in a dtype, GEMM and orthogonalisation
 * (OpenBLAS / LAPACKE).  Casts round to nearest even, keep NaN a (quiet)
 * NaN, overflow to Inf and handle subnormals exactly as IEEE and PyTorch. */
#ifndef DDPH_CPU_OPS_H
#define DDPH_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "support/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scalar conversions: the reference every vector path must match. */
uint16_t ddph__f32_to_f16(float f);
float ddph__f16_to_f32(uint16_t h);
uint16_t ddph__f32_to_bf16(float f);
float ddph__bf16_to_f32(uint16_t b);

/* dst[i] = (dst_dtype)(src[i] * scale).  Any pair of f32/f64/f16/bf16. */
ddph_status ddph__cpu_cast(const void *src, ddph_dtype src_dtype, void *dst,
                           ddph_dtype dst_dtype, size_t n, double scale,
                           ddph_err *err);
/* buf[i] /= divisor in the buffer's dtype. */
ddph_status ddph__cpu_divide(void *buf, ddph_dtype dtype, size_t n,
                             double divisor, ddph_err *err);
/* 1 when every element is finite; else 0 and the first bad index. */
int ddph__cpu_all_finite(const void *buf, ddph_dtype dtype, size_t n,
                         size_t *first_bad);
/* Element-wise a[i] += b[i] in dtype (half types rounded after each add). */
void ddph__cpu_add(void *a, const void *b, ddph_dtype dtype, size_t n);
void ddph__cpu_max(void *a, const void *b, ddph_dtype dtype, size_t n);
void ddph__cpu_min(void *a, const void *b, ddph_dtype dtype, size_t n);

/* y[i] += alpha * x[i] (cblas_saxpy). */
void ddph__cpu_axpy(size_t n, float alpha, const float *x, float *y);

ddph_status ddph__cpu_gemm(int trans_a, int trans_b, size_t m, size_t n,
                           size_t k, float alpha, const float *a, size_t lda,
                           const float *b, size_t ldb, float beta, float *c,
                           size_t ldc, ddph_err *err);
/* OpenBLAS threads for this rank: its share of the cores (the cores it may
 * run on divided by the ranks on its host) less one for the communication
 * thread, at least 1, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is
 * set.  OpenBLAS otherwise starts a thread per core in every rank, and
 * its busy-waiting threads take the cores that MPI's progress and the
 * network need (PowerSGD over 1 Gbit/s on ResNet-50 shapes: 0.28-0.77 s a
 * step with 2 threads on 2 cores, 0.084 s with 1).  Returns the count in
 * use. */
int ddph__cpu_blas_threads(int ranks_on_host);

ddph_status ddph__cpu_orthogonalize(float *x, size_t rows, size_t cols,
                                    double eps, ddph_err *err);

#ifdef __cplusplus
}
#endif

#endif
