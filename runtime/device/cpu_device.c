/* cpu_device.c: device_ops.h's table for host memory: the kernels of
 * cpu_ops.h, sparse_ops.h and sign_ops.h, posix_memalign and memcpy.
 * Every operation is done when it returns, so the stream and the GPU
 * state are not used. */
#include "build-config.h"

#include "device/device_ops.h"

#include <stdlib.h>
#include <string.h>

#include "device/cpu_ops.h"
#include "device/quant_ops.h"
#include "device/sign_ops.h"
#include "device/sparse_ops.h"

static ddph_status cpu_cast(struct ddph_gpu *g, const void *src,
                            ddph_dtype sdt, void *dst, ddph_dtype ddt,
                            size_t count, double scale, ddph_err *err)
{
    return ddph__cpu_cast(src, sdt, dst, ddt, count, scale, err);
}

static ddph_status cpu_divide(struct ddph_gpu *g, void *buf, ddph_dtype dtype,
                              size_t count, double divisor, ddph_err *err)
{
    return ddph__cpu_divide(buf, dtype, count, divisor, err);
}

static ddph_status cpu_gemm(struct ddph_gpu *g, int ta, int tb, size_t m,
                            size_t n, size_t k, float alpha, const float *a,
                            size_t lda, const float *b, size_t ldb, float beta,
                            float *c, size_t ldc, ddph_err *err)
{
    return ddph__cpu_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                          err);
}

static ddph_status cpu_orthogonalize(struct ddph_gpu *g, float *x, size_t rows,
                                     size_t cols, double eps, ddph_err *err)
{
    return ddph__cpu_orthogonalize(x, rows, cols, eps, err);
}

static ddph_status cpu_axpy(struct ddph_gpu *g, size_t count, float alpha,
                            const float *x, float *y, ddph_err *err)
{
    ddph__cpu_axpy(count, alpha, x, y);
    return DDPH_OK;
}

/* Host memory: every kind of copy is a memcpy. */
static ddph_status cpu_copy(struct ddph_gpu *g, void *dst, const void *src,
                            size_t bytes, ddph_copy_kind kind, ddph_err *err)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return DDPH_OK;
}

static ddph_status cpu_zero(struct ddph_gpu *g, void *buf, size_t bytes,
                            ddph_err *err)
{
    if (bytes)
        memset(buf, 0, bytes);
    return DDPH_OK;
}

static ddph_status cpu_topk(struct ddph_gpu *g, const float *x, size_t count,
                            size_t k, float *values, int32_t *indices,
                            ddph_err *err)
{
    return ddph__cpu_topk(x, count, k, values, indices, err);
}

static ddph_status cpu_absmax(struct ddph_gpu *g, const float *x, size_t count,
                              float *out, ddph_err *err)
{
    *out = ddph__cpu_absmax(x, count);
    return DDPH_OK;
}

static ddph_status cpu_gather(struct ddph_gpu *g, const float *x,
                              const int32_t *idx, size_t k, float *out,
                              ddph_err *err)
{
    ddph__cpu_gather(x, idx, k, out);
    return DDPH_OK;
}

static ddph_status cpu_scatter_add(struct ddph_gpu *g, float *y,
                                   const int32_t *idx, const float *v,
                                   size_t k, float alpha, ddph_err *err)
{
    ddph__cpu_scatter_add(y, idx, v, k, alpha);
    return DDPH_OK;
}

static ddph_status cpu_quantize_int8(struct ddph_gpu *g, const float *x,
                                     size_t count, float scale, int8_t *q,
                                     ddph_err *err)
{
    ddph__cpu_quantize_int8(x, count, scale, q);
    return DDPH_OK;
}

static ddph_status cpu_dequantize_int8(struct ddph_gpu *g, const int8_t *q,
                                       size_t count, float scale, float beta,
                                       float *y, ddph_err *err)
{
    ddph__cpu_dequantize_int8(q, count, scale, beta, y);
    return DDPH_OK;
}

static ddph_status cpu_pack_signs(struct ddph_gpu *g, const float *x,
                                  size_t count, uint8_t *bits, ddph_err *err)
{
    ddph__cpu_pack_signs(x, count, bits);
    return DDPH_OK;
}

static ddph_status cpu_unpack_signs(struct ddph_gpu *g, const uint8_t *bits,
                                    size_t count, size_t chunk,
                                    const float *scales, float beta, float *y,
                                    ddph_err *err)
{
    ddph__cpu_unpack_signs(bits, count, chunk, scales, beta, y);
    return DDPH_OK;
}

static ddph_status cpu_round_stochastic(struct ddph_gpu *g, const float *x,
                                        size_t count, size_t chunk,
                                        const float *scales, int levels,
                                        uint64_t seed, int8_t *q,
                                        ddph_err *err)
{
    ddph__cpu_round_stochastic(ddph__simd_best(), x, count, chunk, scales,
                               levels, seed, q);
    return DDPH_OK;
}

static ddph_status cpu_pack_bits(struct ddph_gpu *g, const int8_t *q,
                                 size_t count, int bits, uint8_t *packed,
                                 ddph_err *err)
{
    ddph__cpu_pack_bits(q, count, bits, packed);
    return DDPH_OK;
}

static ddph_status cpu_unpack_bits(struct ddph_gpu *g, const uint8_t *packed,
                                   size_t count, int bits, size_t chunk,
                                   const float *scales, int nmsg,
                                   size_t stride, float beta, float *y,
                                   ddph_err *err)
{
    ddph__cpu_unpack_bits(ddph__simd_best(), packed, count, bits, chunk,
                          scales, nmsg, stride, beta, y);
    return DDPH_OK;
}

static ddph_status cpu_chunk_abs(struct ddph_gpu *g, const float *x,
                                 size_t count, size_t chunk, int want_max,
                                 float *out, ddph_err *err)
{
    if (want_max)
        ddph__cpu_chunk_abs_max(x, count, chunk, out);
    else
        ddph__cpu_chunk_abs_sum(x, count, chunk, out);
    return DDPH_OK;
}

static ddph_status cpu_alloc(size_t bytes, void **out, ddph_err *err)
{
    size_t size = ddph__dev_alloc_size(bytes);
    void *p;
    if (posix_memalign(&p, 64, size) != 0)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory (%zu bytes)",
                          bytes);
    memset(p, 0, size);
    *out = p;
    return DDPH_OK;
}

static void cpu_free(void *p)
{
    free(p);
}

static ddph_status cpu_alloc_on(size_t bytes, void *stream, void **out,
                                ddph_err *err)
{
    return cpu_alloc(bytes, out, err);
}

static void cpu_free_on(void *p, void *stream)
{
    free(p);
}

static ddph_status cpu_copy_on(void *dst, const void *src, size_t bytes,
                               void *stream, ddph_err *err)
{
    memcpy(dst, src, bytes);
    return DDPH_OK;
}

static ddph_status cpu_copy_batch(void *const *dst, const void *const *src,
                                  const size_t *bytes, size_t n, void *stream,
                                  ddph_err *err)
{
    for (size_t i = 0; i < n; i++)
        memcpy(dst[i], src[i], bytes[i]);
    return DDPH_OK;
}

const ddph_dev_ops ddph__dev_cpu_ops = {
    .device = DDPH_CPU,
    .cast = cpu_cast,
    .divide = cpu_divide,
    .gemm = cpu_gemm,
    .orthogonalize = cpu_orthogonalize,
    .axpy = cpu_axpy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .topk = cpu_topk,
    .absmax = cpu_absmax,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .quantize_int8 = cpu_quantize_int8,
    .dequantize_int8 = cpu_dequantize_int8,
    .pack_signs = cpu_pack_signs,
    .unpack_signs = cpu_unpack_signs,
    .chunk_abs = cpu_chunk_abs,
    .round_stochastic = cpu_round_stochastic,
    .pack_bits = cpu_pack_bits,
    .unpack_bits = cpu_unpack_bits,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_on = cpu_alloc_on,
    .free_on = cpu_free_on,
    .copy_on = cpu_copy_on,
    .copy_batch = cpu_copy_batch,
};
