/* sparse_ops.h: the device operations of sparse and quantized hooks on
 * host memory (ABI minor 2): top-k selection by magnitude, gather and
 * scatter-add by index, the largest magnitude, and int8 quantization with
 * a scale.  cuda_ops.cu computes the same on the GPU, with the same
 * definitions (which elements top-k picks, how ties and rounding go), so
 * one hook source gives the same result on both. */
#ifndef DDPH_SPARSE_OPS_H
#define DDPH_SPARSE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "support/util.h"

/* The k elements of x[0..n) with the largest |x|, ties at the k-th
 * magnitude taken from the lowest index up; their indices, in ascending
 * order, into `indices` and their values into `values` (either may be
 * NULL).  Magnitudes are compared as the bits of |x| (a NaN ranks above
 * +Inf).  k <= n <= INT32_MAX. */
/* The bounds every topk has (k <= n <= 2^31-1: indices are int32), for
 * the CPU and the GPU alike: DDPH_ERR_INVALID with a message otherwise. */
ddph_status ddph__topk_check(size_t n, size_t k, ddph_err *err);
ddph_status ddph__cpu_topk(const float *x, size_t n, size_t k, float *values,
                           int32_t *indices, ddph_err *err);
/* The 32-bit key top-k ranks x by: the bits of |x|, monotonic in |x|. */
static inline uint32_t ddph__magnitude_key(float x)
{
    union {
        float f;
        uint32_t u;
    } v = {x};
    return v.u & 0x7fffffffu;
}
/* out[j] = x[idx[j]]. */
void ddph__cpu_gather(const float *x, const int32_t *idx, size_t k, float *out);
/* y[idx[j]] += alpha * v[j] for j = 0, 1, ... in order. */
void ddph__cpu_scatter_add(float *y, const int32_t *idx, const float *v,
                           size_t k, float alpha);
/* max |x[i]| (0 for n = 0; NaN when any element is NaN). */
float ddph__cpu_absmax(const float *x, size_t n);
/* q[i] = clamp(rint(x[i] * inv), -127, 127) with inv = 1 / scale rounded
 * to f32 (a multiply, not a divide, on both devices), round half to even;
 * a NaN quantizes to 0.  scale > 0. */
void ddph__cpu_quantize_int8(const float *x, size_t n, float scale,
                             int8_t *q);
/* y[i] = beta * y[i] + scale * q[i] (beta = 0: y is only written). */
void ddph__cpu_dequantize_int8(const int8_t *q, size_t n, float scale,
                               float beta, float *y);

#endif
