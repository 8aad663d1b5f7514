/* device_ops.h: one table of the operations on a bucket's device, as
 * the services (plugin/services_device.c) and device.c call them: the
 * arithmetic a hook asks for (casts, divides, GEMM, orthogonalisation,
 * top-k, int8, signs and chunks), memory, copies, and the ordering of
 * work on streams.  Two implementations: the CPU's (cpu_device.c, over
 * cpu_ops.h, sparse_ops.h and sign_ops.h) and CUDA's, in the GPU backend
 * module (comm/nccl/device_cuda.c), handed over in its table (comm/gpu.h).
 * Which one serves a hook is chosen once, when its services are set up;
 * the calls then go through the table without asking again. */
#ifndef DDPH_DEVICE_OPS_H
#define DDPH_DEVICE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

#include "support/util.h"

/* The GPU backend's state for one context (defined by the module): the
 * arithmetic runs on its stream with its cuBLAS and cuSOLVER handles.
 * The CPU table is called with NULL. */
struct ddph_gpu;

typedef struct ddph_dev_ops {
    ddph_device device; /* the memory these operations act on */

    /* ---- arithmetic: services.h's definitions; on CUDA enqueued on g's
     * stream, without waiting (absmax and copies to the host wait) ---- */
    ddph_status (*cast)(struct ddph_gpu *g, const void *src, ddph_dtype sdt,
                        void *dst, ddph_dtype ddt, size_t count, double scale,
                        ddph_err *err);
    ddph_status (*divide)(struct ddph_gpu *g, void *buf, ddph_dtype dtype,
                          size_t count, double divisor, ddph_err *err);
    ddph_status (*gemm)(struct ddph_gpu *g, int ta, int tb, size_t m,
                        size_t n, size_t k, float alpha, const float *a,
                        size_t lda, const float *b, size_t ldb, float beta,
                        float *c, size_t ldc, ddph_err *err);
    ddph_status (*orthogonalize)(struct ddph_gpu *g, float *x, size_t rows,
                                 size_t cols, double eps, ddph_err *err);
    ddph_status (*axpy)(struct ddph_gpu *g, size_t count, float alpha,
                        const float *x, float *y, ddph_err *err);
    /* A hook's copy of `kind` (services.h's copy). */
    ddph_status (*copy)(struct ddph_gpu *g, void *dst, const void *src,
                        size_t bytes, ddph_copy_kind kind, ddph_err *err);
    ddph_status (*zero)(struct ddph_gpu *g, void *buf, size_t bytes,
                        ddph_err *err);
    /* k and n already checked (ddph__topk_check). */
    ddph_status (*topk)(struct ddph_gpu *g, const float *x, size_t count,
                        size_t k, float *values, int32_t *indices,
                        ddph_err *err);
    ddph_status (*absmax)(struct ddph_gpu *g, const float *x, size_t count,
                          float *out, ddph_err *err);
    ddph_status (*gather)(struct ddph_gpu *g, const float *x,
                          const int32_t *idx, size_t k, float *out,
                          ddph_err *err);
    ddph_status (*scatter_add)(struct ddph_gpu *g, float *y,
                               const int32_t *idx, const float *v, size_t k,
                               float alpha, ddph_err *err);
    ddph_status (*quantize_int8)(struct ddph_gpu *g, const float *x,
                                 size_t count, float scale, int8_t *q,
                                 ddph_err *err);
    ddph_status (*dequantize_int8)(struct ddph_gpu *g, const int8_t *q,
                                   size_t count, float scale, float beta,
                                   float *y, ddph_err *err);
    ddph_status (*pack_signs)(struct ddph_gpu *g, const float *x, size_t count,
                              uint8_t *bits, ddph_err *err);
    ddph_status (*unpack_signs)(struct ddph_gpu *g, const uint8_t *bits,
                                size_t count, size_t chunk,
                                const float *scales, float beta, float *y,
                                ddph_err *err);
    /* want_max: the largest |x| per chunk, else the sum. */
    ddph_status (*chunk_abs)(struct ddph_gpu *g, const float *x, size_t count,
                             size_t chunk, int want_max, float *out,
                             ddph_err *err);
    /* Stochastic rounding and 2/4-bit codes (ABI minor 6, quant_ops.h).
     * NULL in a table without them (a GPU module built before them):
     * the services then refuse with DDPH_ERR_UNSUPPORTED, naming the
     * call. */
    ddph_status (*round_stochastic)(struct ddph_gpu *g, const float *x,
                                    size_t count, size_t chunk,
                                    const float *scales, int levels,
                                    uint64_t seed, int8_t *q, ddph_err *err);
    ddph_status (*pack_bits)(struct ddph_gpu *g, const int8_t *q,
                             size_t count, int bits, uint8_t *packed,
                             ddph_err *err);
    /* The sum of nmsg messages, each stride bytes after the one before
     * (quant_ops.h's ddph__cpu_unpack_bits). */
    ddph_status (*unpack_bits)(struct ddph_gpu *g, const uint8_t *packed,
                               size_t count, int bits, size_t chunk,
                               const float *scales, int nmsg, size_t stride,
                               float beta, float *y, ddph_err *err);

    /* ---- memory, zero-filled and 64-byte aligned.  alloc takes
     * ddph__dev_alloc_size(bytes).  The _on forms are ordered on a stream
     * (CUDA: cudaMallocFromPoolAsync from a pool that keeps freed memory,
     * so a hook's per-step scratch synchronises nothing; 0 bytes take 64);
     * on the CPU they are alloc and free. ---- */
    ddph_status (*alloc)(size_t bytes, void **out, ddph_err *err);
    void (*free)(void *p);
    ddph_status (*alloc_on)(size_t bytes, void *stream, void **out,
                            ddph_err *err);
    void (*free_on)(void *p, void *stream);
    /* Within the device's memory (CUDA: asynchronous on stream). */
    ddph_status (*copy_on)(void *dst, const void *src, size_t bytes,
                           void *stream, ddph_err *err);
    /* n such copies (CUDA: one kernel launch for up to 64 of them). */
    ddph_status (*copy_batch)(void *const *dst, const void *const *src,
                              const size_t *bytes, size_t n, void *stream,
                              ddph_err *err);

    /* ---- CUDA only (NULL in the CPU table, whose work is done when a
     * call returns): device.c's functions that take no device call them
     * on the CUDA table. ---- */
    ddph_status (*event_create)(void **event, ddph_err *err);
    void (*event_destroy)(void *event);
    ddph_status (*event_record)(void *event, void *stream, ddph_err *err);
    ddph_status (*event_wait)(void *stream, void *event, ddph_err *err);
    ddph_status (*sync)(void *stream, ddph_err *err);
    ddph_status (*bind)(int device, ddph_err *err);
    ddph_status (*nonfinite_reset)(uint64_t *first, size_t n, void *stream,
                                   ddph_err *err);
    ddph_status (*nonfinite_find)(const void *buf, ddph_dtype dtype, size_t n,
                                  uint64_t *first, void *stream,
                                  ddph_err *err);
    ddph_status (*nonfinite_fetch)(uint64_t *out, const uint64_t *first,
                                   size_t n, void *stream, ddph_err *err);
    /* DDPH_OK when p is GPU memory usable on `device` (its own, or
     * managed); an error saying where it is otherwise. */
    ddph_status (*check_on)(const void *p, int device, ddph_err *err);
} ddph_dev_ops;

/* The CPU's table (cpu_device.c). */
extern const ddph_dev_ops ddph__dev_cpu_ops;

/* What an allocation of `bytes` takes: whole 64-byte lines, at least one
 * (both tables allocate this much, so a vector loop may run to the end of
 * its last line). */
static inline size_t ddph__dev_alloc_size(size_t bytes)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    return rounded ? rounded : 64;
}

#endif
