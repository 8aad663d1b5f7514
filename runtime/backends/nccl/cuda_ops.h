/* cuda_ops.h: the device operations of the nccl backend, CUDA kernels
 * (cuda_ops.cu): casts between f32/f64 and f16/bf16 with a scale, division
 * in a dtype, Gram-Schmidt, check_finite's search, and the sparse, sign
 * and quantizing compressors' operations, enqueued on a stream.  Return
 * a cudaError_t as int (0 = success).  Only built with HAVE_NCCL. */
#ifndef DDPH_CUDA_OPS_H
#define DDPH_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes are ddph_dtype's. */
int ddph__cuda_cast(const void *src, int src_dtype, void *dst, int dst_dtype,
                    size_t n, double scale, void *stream);
int ddph__cuda_divide(void *buf, int dtype, size_t n, double divisor,
                      void *stream);

/* n device-to-device copies (dst[i] <- src[i], bytes[i]) in one launch a
 * batch of 64: the copy-back of a bucket into its parameters. */
int ddph__cuda_copy_batch(void *const *dst, const void *const *src,
                          const size_t *bytes, size_t n, void *stream);

/* PyTorch's _orthogonalize_gram_schmidt on the row-major rows x cols
 * matrix x, in place, as the CPU path computes it (double sums, float
 * norms, eps added to each norm when it is not 0). */
int ddph__cuda_gram_schmidt(float *x, size_t rows, size_t cols, double eps,
                            void *stream);
/* *first = min(*first, index of every NaN or Inf in buf[0..n)); *first is
 * left alone when all are finite (callers start it at all ones). */
int ddph__cuda_first_nonfinite(const void *buf, int dtype, size_t n,
                               unsigned long long *first, void *stream);

/* sparse_ops.h's operations, with the same definitions.  absmax waits
 * for the stream (its result is host memory, by the services'
 * definition); the others, top-k's radix select and stable compaction
 * (CUB) included, are enqueued.  top-k's and absmax's scratch is
 * stream-ordered, from `pool` (a cudaMemPool_t: the module's own). */
int ddph__cuda_topk(const float *x, size_t n, size_t k, float *values,
                    int *indices, void *pool, void *stream);
int ddph__cuda_gather(const float *x, const int *idx, size_t k, float *out,
                      void *stream);
int ddph__cuda_scatter_add(float *y, const int *idx, const float *v, size_t k,
                           float alpha, void *stream);
int ddph__cuda_absmax(const float *x, size_t n, float *out, void *pool,
                      void *stream);
int ddph__cuda_quantize_int8(const float *x, size_t n, float scale,
                             signed char *q, void *stream);
int ddph__cuda_dequantize_int8(const signed char *q, size_t n, float scale,
                               float beta, float *y, void *stream);
/* sign_ops.h's operations, enqueued, with the same definitions (a
 * chunk's sum in double, in another order: within 1 ulp of the CPU's). */
int ddph__cuda_pack_signs(const float *x, size_t n, unsigned char *bits,
                          void *stream);
int ddph__cuda_unpack_signs(const unsigned char *bits, size_t n, size_t chunk,
                            const float *scales, float beta, float *y,
                            void *stream);
int ddph__cuda_chunk_abs(const float *x, size_t n, size_t chunk, int want_max,
                         float *out, void *stream);

/* quant_ops.h's operations (ABI minor 6), enqueued, bit for bit the CPU's
 * (the same hash of seed and index, each float operation rounded alone):
 * codes go between ranks, CPU and GPU ones alike.  bits is 2 or 4. */
int ddph__cuda_round_stochastic(const float *x, size_t n, size_t chunk,
                                const float *scales, int levels,
                                uint64_t seed, signed char *q, void *stream);
int ddph__cuda_pack_bits(const signed char *q, size_t n, int bits,
                         unsigned char *packed, void *stream);
int ddph__cuda_unpack_bits(const unsigned char *packed, size_t n, int bits,
                           size_t chunk, const float *scales, int nmsg,
                           size_t stride, float beta, float *y, void *stream);

#ifdef __cplusplus
}
#endif
#endif
