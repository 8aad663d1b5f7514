/* services_device.c: the services a hook calls for arithmetic and memory
 * on its bucket's device (casts, divides, GEMM, orthogonalisation, top-k,
 * int8, signs and chunks, copies, scratch memory): the CPU operations, or the GPU module's
 * with backend = nccl.  The collectives are in services.c. */
#include "build-config.h"

#include "plugin/services.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "device/cpu_ops.h"
#include "device/device.h"
#include "device/sign_ops.h"
#include "device/sparse_ops.h"
#include "plugin/services_common.h"

/* ---- top-k and int8 (ABI minor 2) ------------------------------------------ */

static ddph_status svc_topk(const ddph_services *s, const float *x, size_t n,
                            size_t k, float *values, int32_t *indices)
{
    ddph_err e;
    ddph_status bad = ddph__topk_check(n, k, &e); /* for both devices */
    if (bad != DDPH_OK)
        return keep(host(s), bad, &e);
    if (ON_GPU(host(s)))
        return keep(
            host(s),
            GPU(host(s))->topk(host(s)->gpu, x, n, k, values, indices, &e), &e);
    return keep(host(s), ddph__cpu_topk(x, n, k, values, indices, &e), &e);
}

static ddph_status svc_gather(const ddph_services *s, const float *x,
                              const int32_t *idx, size_t k, float *out)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->gather(host(s)->gpu, x, idx, k, out, &e), &e);
    ddph__cpu_gather(x, idx, k, out);
    return DDPH_OK;
}

static ddph_status svc_scatter_add(const ddph_services *s, float *y,
                                   const int32_t *idx, const float *v,
                                   size_t k, float alpha)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(
            host(s),
            GPU(host(s))->scatter_add(host(s)->gpu, y, idx, v, k, alpha, &e),
            &e);
    ddph__cpu_scatter_add(y, idx, v, k, alpha);
    return DDPH_OK;
}

static ddph_status svc_absmax(const ddph_services *s, const float *x,
                              size_t n, float *out)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s), GPU(host(s))->absmax(host(s)->gpu, x, n, out, &e),
                    &e);
    *out = ddph__cpu_absmax(x, n);
    return DDPH_OK;
}

static ddph_status need_scale(const ddph_services *s, const char *what,
                              float scale)
{
    if (scale > 0 && scale <= FLT_MAX)
        return DDPH_OK;
    snprintf(host(s)->message, sizeof host(s)->message,
             "%s: scale %g must be positive and finite", what, (double)scale);
    return DDPH_ERR_INVALID;
}

static ddph_status svc_quantize_int8(const ddph_services *s, const float *x,
                                     size_t n, float scale, int8_t *q)
{
    ddph_status bad = need_scale(s, "quantize_int8", scale);
    if (bad != DDPH_OK)
        return bad;
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(
            host(s),
            GPU(host(s))->quantize_int8(host(s)->gpu, x, n, scale, q, &e), &e);
    ddph__cpu_quantize_int8(x, n, scale, q);
    return DDPH_OK;
}

static ddph_status svc_dequantize_int8(const ddph_services *s, const int8_t *q,
                                       size_t n, float scale, float beta,
                                       float *y)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->dequantize_int8(host(s)->gpu, q, n, scale,
                                                  beta, y, &e),
                    &e);
    ddph__cpu_dequantize_int8(q, n, scale, beta, y);
    return DDPH_OK;
}

/* ---- signs and chunks (ABI minor 4) ---------------------------------------- */

static ddph_status need_chunk(const ddph_services *s, const char *what,
                              size_t chunk)
{
    if (chunk >= 1)
        return DDPH_OK;
    snprintf(host(s)->message, sizeof host(s)->message,
             "%s: chunk must be at least 1 element", what);
    return DDPH_ERR_INVALID;
}

static ddph_status svc_pack_signs(const ddph_services *s, const float *x,
                                  size_t n, uint8_t *bits)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->pack_signs(host(s)->gpu, x, n, bits, &e), &e);
    ddph__cpu_pack_signs(x, n, bits);
    return DDPH_OK;
}

static ddph_status svc_unpack_signs(const ddph_services *s, const uint8_t *bits,
                                    size_t n, size_t chunk, const float *scales,
                                    float beta, float *y)
{
    ddph_status bad = need_chunk(s, "unpack_signs", chunk);
    if (bad != DDPH_OK)
        return bad;
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->unpack_signs(host(s)->gpu, bits, n, chunk,
                                               scales, beta, y, &e),
                    &e);
    ddph__cpu_unpack_signs(bits, n, chunk, scales, beta, y);
    return DDPH_OK;
}

static ddph_status chunk_abs(const ddph_services *s, const float *x, size_t n,
                             size_t chunk, int want_max, float *out)
{
    ddph_status bad = need_chunk(s, want_max ? "chunk_abs_max" : "chunk_abs_sum",
                                 chunk);
    if (bad != DDPH_OK)
        return bad;
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->chunk_abs(host(s)->gpu, x, n, chunk, want_max,
                                            out, &e),
                    &e);
    if (want_max)
        ddph__cpu_chunk_abs_max(x, n, chunk, out);
    else
        ddph__cpu_chunk_abs_sum(x, n, chunk, out);
    return DDPH_OK;
}

static ddph_status svc_chunk_abs_sum(const ddph_services *s, const float *x,
                                     size_t n, size_t chunk, float *out)
{
    return chunk_abs(s, x, n, chunk, 0, out);
}

static ddph_status svc_chunk_abs_max(const ddph_services *s, const float *x,
                                     size_t n, size_t chunk, float *out)
{
    return chunk_abs(s, x, n, chunk, 1, out);
}

/* The arithmetic services take floating dtypes only. */
static ddph_status need_float(const ddph_services *s, const char *what,
                              ddph_dtype dtype)
{
    if (ddph__dtype_is_float(dtype))
        return DDPH_OK;
    snprintf(host(s)->message, sizeof host(s)->message,
             "%s: %s is not a floating dtype (f32, f64, f16, bf16)", what,
             ddph__dtype_name(dtype));
    return DDPH_ERR_INVALID;
}

static ddph_status svc_cast(const ddph_services *s, const void *src,
                            ddph_dtype src_dtype, void *dst,
                            ddph_dtype dst_dtype, size_t n, double scale)
{
    ddph_err e;
    ddph_status bad = need_float(s, "cast", src_dtype);
    if (bad == DDPH_OK)
        bad = need_float(s, "cast", dst_dtype);
    if (bad != DDPH_OK)
        return bad;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->cast(host(s)->gpu, src, src_dtype, dst,
                                       dst_dtype, n, scale, &e),
                    &e);
    return keep(host(s),
                ddph__cpu_cast(src, src_dtype, dst, dst_dtype, n, scale, &e),
                &e);
}

static ddph_status svc_divide(const ddph_services *s, void *buf,
                              ddph_dtype dtype, size_t n, double divisor)
{
    ddph_err e;
    ddph_status bad = need_float(s, "divide", dtype);
    if (bad != DDPH_OK)
        return bad;
    if (ON_GPU(host(s)))
        return keep(
            host(s),
            GPU(host(s))->divide(host(s)->gpu, buf, dtype, n, divisor, &e), &e);
    return keep(host(s), ddph__cpu_divide(buf, dtype, n, divisor, &e), &e);
}

static ddph_status svc_gemm(const ddph_services *s, int trans_a, int trans_b,
                            size_t m, size_t n, size_t k, float alpha,
                            const float *a, size_t lda, const float *b,
                            size_t ldb, float beta, float *c, size_t ldc)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->gemm(host(s)->gpu, trans_a, trans_b, m, n, k,
                                       alpha, a, lda, b, ldb, beta, c, ldc, &e),
                    &e);
    return keep(host(s),
                ddph__cpu_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                               beta, c, ldc, &e),
                &e);
}

static ddph_status svc_orthogonalize(const ddph_services *s, float *x,
                                     size_t rows, size_t cols, double eps)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(
            host(s),
            GPU(host(s))->orthogonalize(host(s)->gpu, x, rows, cols, eps, &e),
            &e);
    return keep(host(s), ddph__cpu_orthogonalize(x, rows, cols, eps, &e), &e);
}

static ddph_status svc_axpy(const ddph_services *s, size_t n, float alpha,
                            const float *x, float *y)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->axpy(host(s)->gpu, n, alpha, x, y, &e), &e);
    ddph__cpu_axpy(n, alpha, x, y);
    return DDPH_OK;
}

static ddph_status svc_copy(const ddph_services *s, void *dst, const void *src,
                            size_t bytes, ddph_copy_kind kind)
{
    if (kind != DDPH_COPY_DEVICE && kind != DDPH_COPY_TO_HOST &&
        kind != DDPH_COPY_FROM_HOST) {
        snprintf(host(s)->message, sizeof host(s)->message,
                 "copy: unknown ddph_copy_kind %d", (int)kind);
        return DDPH_ERR_INVALID;
    }
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    GPU(host(s))->copy(host(s)->gpu, dst, src, bytes, kind, &e),
                    &e);
    if (bytes)
        memcpy(dst, src, bytes);
    return DDPH_OK;
}

static ddph_status svc_zero(const ddph_services *s, void *buf, size_t bytes)
{
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s), GPU(host(s))->zero(host(s)->gpu, buf, bytes, &e),
                    &e);
    if (bytes)
        memset(buf, 0, bytes);
    return DDPH_OK;
}

/* On the GPU, ordered on the hook's stream from a pool that keeps freed
 * memory: a hook that allocates and frees every step (PowerSGD without
 * warm start) neither synchronises the device nor goes to the driver. */
static void *svc_alloc(const ddph_services *s, size_t bytes)
{
    void *p = NULL;
    ddph_err e;
    if (ddph__dev_alloc_on(ON_GPU(host(s)) ? DDPH_CUDA : DDPH_CPU, bytes,
                           s->native_stream, &p, &e) != DDPH_OK)
        return NULL;
    return p;
}

static void svc_free(const ddph_services *s, void *p)
{
    ddph__dev_free_on(ON_GPU(host(s)) ? DDPH_CUDA : DDPH_CPU, p,
                      s->native_stream);
}

void ddph__services_device_init(ddph_services *s)
{
    s->axpy = svc_axpy;
    s->copy = svc_copy;
    s->zero = svc_zero;
    s->topk = svc_topk;
    s->gather = svc_gather;
    s->scatter_add = svc_scatter_add;
    s->absmax = svc_absmax;
    s->quantize_int8 = svc_quantize_int8;
    s->dequantize_int8 = svc_dequantize_int8;
    s->pack_signs = svc_pack_signs;
    s->unpack_signs = svc_unpack_signs;
    s->chunk_abs_sum = svc_chunk_abs_sum;
    s->chunk_abs_max = svc_chunk_abs_max;
    s->cast = svc_cast;
    s->divide = svc_divide;
    s->gemm = svc_gemm;
    s->orthogonalize = svc_orthogonalize;
    s->alloc = svc_alloc;
    s->free = svc_free;
}
