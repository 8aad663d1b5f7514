/* cuda_ops.h: the device operations of the nccl backend, CUDA kernels
 * (cuda_ops.cu): casts between f32/f64 and f16/bf16 with a scale, division
 * in a dtype, Gram-Schmidt and check_finite's search, enqueued on a
 * stream.  Return a cudaError_t as int (0 = success).  Only built with
 * HAVE_NCCL. */
#ifndef DDPH_CUDA_OPS_H
#define DDPH_CUDA_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes are ddph_dtype's. */
int ddph__cuda_cast(const void *src, int src_dtype, void *dst, int dst_dtype,
                    size_t n, double scale, void *stream);
int ddph__cuda_divide(void *buf, int dtype, size_t n, double divisor,
                      void *stream);

/* PyTorch's _orthogonalize_gram_schmidt on the row-major rows x cols
 * matrix x, in place, as the CPU path computes it (double sums, float
 * norms, eps added to each norm when it is not 0). */
int ddph__cuda_gram_schmidt(float *x, size_t rows, size_t cols, double eps,
                            void *stream);
/* *first = min(*first, index of every NaN or Inf in buf[0..n)); *first is
 * left alone when all are finite (callers start it at all ones). */
int ddph__cuda_first_nonfinite(const void *buf, int dtype, size_t n,
                               unsigned long long *first, void *stream);

#ifdef __cplusplus
}
#endif
#endif
