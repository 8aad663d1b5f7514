/* services_device.c: the services a hook calls for arithmetic and memory
 * on its bucket's device (casts, divides, GEMM, orthogonalisation, top-k,
 * int8, signs and chunks, copies, scratch memory): they check what the
 * services promise to check and call the hook's device table
 * (device/device_ops.h), the CPU's or, with backend = nccl, the GPU
 * module's, chosen once in ddph__services_device_init.  The collectives
 * are in services.c. */
#include "build-config.h"

#include "plugin/services.h"

#include <float.h>
#include <stdio.h>

#include "device/device_ops.h"
#include "device/sparse_ops.h"
#include "plugin/services_common.h"

/* The hook's device table; its calls take h->gpu (NULL on the CPU). */
#define DEV(h) ((h)->dev_ops)

/* ---- top-k and int8 (ABI minor 2) ------------------------------------------ */

static ddph_status svc_topk(const ddph_services *s, const float *x, size_t n,
                            size_t k, float *values, int32_t *indices)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status st = ddph__topk_check(n, k, &e); /* for both devices */
    if (st == DDPH_OK)
        st = DEV(h)->topk(h->gpu, x, n, k, values, indices, &e);
    return keep(h, st, &e);
}

static ddph_status svc_gather(const ddph_services *s, const float *x,
                              const int32_t *idx, size_t k, float *out)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->gather(h->gpu, x, idx, k, out, &e), &e);
}

static ddph_status svc_scatter_add(const ddph_services *s, float *y,
                                   const int32_t *idx, const float *v,
                                   size_t k, float alpha)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->scatter_add(h->gpu, y, idx, v, k, alpha, &e), &e);
}

static ddph_status svc_absmax(const ddph_services *s, const float *x,
                              size_t n, float *out)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->absmax(h->gpu, x, n, out, &e), &e);
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
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->quantize_int8(h->gpu, x, n, scale, q, &e), &e);
}

static ddph_status svc_dequantize_int8(const ddph_services *s, const int8_t *q,
                                       size_t n, float scale, float beta,
                                       float *y)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->dequantize_int8(h->gpu, q, n, scale, beta, y, &e),
                &e);
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
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->pack_signs(h->gpu, x, n, bits, &e), &e);
}

static ddph_status svc_unpack_signs(const ddph_services *s, const uint8_t *bits,
                                    size_t n, size_t chunk, const float *scales,
                                    float beta, float *y)
{
    ddph_status bad = need_chunk(s, "unpack_signs", chunk);
    if (bad != DDPH_OK)
        return bad;
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h,
                DEV(h)->unpack_signs(h->gpu, bits, n, chunk, scales, beta, y,
                                     &e),
                &e);
}

static ddph_status chunk_abs(const ddph_services *s, const float *x, size_t n,
                             size_t chunk, int want_max, float *out)
{
    ddph_status bad = need_chunk(s, want_max ? "chunk_abs_max" : "chunk_abs_sum",
                                 chunk);
    if (bad != DDPH_OK)
        return bad;
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->chunk_abs(h->gpu, x, n, chunk, want_max, out, &e),
                &e);
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

/* ---- stochastic rounding and 2/4-bit codes (ABI minor 6) ------------------ */

/* DDPH_OK when the device table has the operation; a hook on a device
 * without it is told which call and where, and can fall back. */
static ddph_status need_op(const ddph_services *s, const char *what,
                           int have)
{
    if (have)
        return DDPH_OK;
    snprintf(host(s)->message, sizeof host(s)->message,
             "%s: not available on %s buckets in this build (ABI minor 6 "
             "services are CPU only)",
             what, s->device == DDPH_CUDA ? "CUDA" : "these");
    return DDPH_ERR_UNSUPPORTED;
}

static ddph_status need_bits(const ddph_services *s, const char *what,
                             int bits)
{
    if (bits == 2 || bits == 4)
        return DDPH_OK;
    snprintf(host(s)->message, sizeof host(s)->message,
             "%s: bits = %d, must be 2 or 4", what, bits);
    return DDPH_ERR_INVALID;
}

static ddph_status svc_round_stochastic(const ddph_services *s, const float *x,
                                        size_t n, size_t chunk,
                                        const float *scales, int levels,
                                        uint64_t seed, int8_t *q)
{
    ddph_hook *h = host(s);
    ddph_status bad = need_chunk(s, "round_stochastic", chunk);
    if (bad == DDPH_OK && (levels < 1 || levels > 127)) {
        snprintf(h->message, sizeof h->message,
                 "round_stochastic: levels = %d, must be 1 to 127", levels);
        bad = DDPH_ERR_INVALID;
    }
    if (bad == DDPH_OK && n > UINT32_MAX) {
        snprintf(h->message, sizeof h->message,
                 "round_stochastic: %zu elements, at most 2^32 - 1 in one "
                 "call",
                 n);
        bad = DDPH_ERR_INVALID;
    }
    if (bad == DDPH_OK)
        bad = need_op(s, "round_stochastic", DEV(h)->round_stochastic != NULL);
    if (bad != DDPH_OK)
        return bad;
    ddph_err e;
    return keep(h,
                DEV(h)->round_stochastic(h->gpu, x, n, chunk, scales, levels,
                                         seed, q, &e),
                &e);
}

static ddph_status svc_pack_bits(const ddph_services *s, const int8_t *q,
                                 size_t n, int bits, uint8_t *packed)
{
    ddph_hook *h = host(s);
    ddph_status bad = need_bits(s, "pack_bits", bits);
    if (bad == DDPH_OK)
        bad = need_op(s, "pack_bits", DEV(h)->pack_bits != NULL);
    if (bad != DDPH_OK)
        return bad;
    ddph_err e;
    return keep(h, DEV(h)->pack_bits(h->gpu, q, n, bits, packed, &e), &e);
}

/* unpack_bits's messages: at least one, and every message's scales as
 * aligned as the first's. */
static ddph_status need_messages(const ddph_services *s, int count,
                                 size_t stride)
{
    if (count >= 1 && (count == 1 || stride % sizeof(float) == 0))
        return DDPH_OK;
    if (count < 1)
        snprintf(host(s)->message, sizeof host(s)->message,
                 "unpack_bits: count = %d, must be at least 1", count);
    else
        snprintf(host(s)->message, sizeof host(s)->message,
                 "unpack_bits: stride %zu bytes between %d messages, must be "
                 "a multiple of 4 (their scales are f32)",
                 stride, count);
    return DDPH_ERR_INVALID;
}

static ddph_status svc_unpack_bits(const ddph_services *s,
                                   const uint8_t *packed, size_t n, int bits,
                                   size_t chunk, const float *scales,
                                   int count, size_t stride, float beta,
                                   float *y)
{
    ddph_hook *h = host(s);
    ddph_status bad = need_bits(s, "unpack_bits", bits);
    if (bad == DDPH_OK)
        bad = need_chunk(s, "unpack_bits", chunk);
    if (bad == DDPH_OK)
        bad = need_messages(s, count, stride);
    if (bad == DDPH_OK)
        bad = need_op(s, "unpack_bits", DEV(h)->unpack_bits != NULL);
    if (bad != DDPH_OK)
        return bad;
    ddph_err e;
    return keep(h,
                DEV(h)->unpack_bits(h->gpu, packed, n, bits, chunk, scales,
                                    count, stride, beta, y, &e),
                &e);
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
    ddph_status bad = need_float(s, "cast", src_dtype);
    if (bad == DDPH_OK)
        bad = need_float(s, "cast", dst_dtype);
    if (bad != DDPH_OK)
        return bad;
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h,
                DEV(h)->cast(h->gpu, src, src_dtype, dst, dst_dtype, n, scale,
                             &e),
                &e);
}

static ddph_status svc_divide(const ddph_services *s, void *buf,
                              ddph_dtype dtype, size_t n, double divisor)
{
    ddph_status bad = need_float(s, "divide", dtype);
    if (bad != DDPH_OK)
        return bad;
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->divide(h->gpu, buf, dtype, n, divisor, &e), &e);
}

static ddph_status svc_gemm(const ddph_services *s, int trans_a, int trans_b,
                            size_t m, size_t n, size_t k, float alpha,
                            const float *a, size_t lda, const float *b,
                            size_t ldb, float beta, float *c, size_t ldc)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h,
                DEV(h)->gemm(h->gpu, trans_a, trans_b, m, n, k, alpha, a, lda,
                             b, ldb, beta, c, ldc, &e),
                &e);
}

static ddph_status svc_orthogonalize(const ddph_services *s, float *x,
                                     size_t rows, size_t cols, double eps)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->orthogonalize(h->gpu, x, rows, cols, eps, &e), &e);
}

static ddph_status svc_axpy(const ddph_services *s, size_t n, float alpha,
                            const float *x, float *y)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->axpy(h->gpu, n, alpha, x, y, &e), &e);
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
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->copy(h->gpu, dst, src, bytes, kind, &e), &e);
}

static ddph_status svc_zero(const ddph_services *s, void *buf, size_t bytes)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, DEV(h)->zero(h->gpu, buf, bytes, &e), &e);
}

/* On the GPU, ordered on the hook's stream from a pool that keeps freed
 * memory: a hook that allocates and frees every step (PowerSGD without
 * warm start) neither synchronises the device nor goes to the driver. */
static void *svc_alloc(const ddph_services *s, size_t bytes)
{
    void *p = NULL;
    ddph_err e;
    if (DEV(host(s))->alloc_on(bytes, s->native_stream, &p, &e) != DDPH_OK)
        return NULL;
    return p;
}

static void svc_free(const ddph_services *s, void *p)
{
    if (p)
        DEV(host(s))->free_on(p, s->native_stream);
}

void ddph__services_device_init(ddph_services *s)
{
    /* The one choice of device: every service below goes through it. */
    ddph_hook *h = host(s);
    h->dev_ops = ON_GPU(h) ? GPU(h)->device_ops : &ddph__dev_cpu_ops;
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
    s->round_stochastic = svc_round_stochastic;
    s->pack_bits = svc_pack_bits;
    s->unpack_bits = svc_unpack_bits;
    s->cast = svc_cast;
    s->divide = svc_divide;
    s->gemm = svc_gemm;
    s->orthogonalize = svc_orthogonalize;
    s->alloc = svc_alloc;
    s->free = svc_free;
}
