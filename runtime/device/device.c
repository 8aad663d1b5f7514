/* device.c: see device.h. */
#include "build-config.h"

#include "device/device.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(const ddph_dev_cuda_ops *) cuda_ops;

void ddph__dev_use_cuda(const ddph_dev_cuda_ops *ops)
{
    atomic_store(&cuda_ops, ops);
}

/* The CUDA operations, or NULL with err set. */
static const ddph_dev_cuda_ops *cuda(ddph_err *err)
{
    const ddph_dev_cuda_ops *ops = atomic_load(&cuda_ops);
    if (!ops)
        ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                   "CUDA memory needs the GPU backend ([runtime] backend = "
                   "nccl), which this process has not loaded");
    return ops;
}

ddph_status ddph__dev_alloc(ddph_device d, size_t bytes, void **out,
                            ddph_err *err)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    if (!rounded)
        rounded = 64;
    if (d == DDPH_CPU) {
        void *p;
        if (posix_memalign(&p, 64, rounded) != 0)
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory (%zu bytes)",
                              bytes);
        memset(p, 0, rounded);
        *out = p;
        return DDPH_OK;
    }
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->alloc(rounded, out, err) : DDPH_ERR_UNSUPPORTED;
}

void ddph__dev_free(ddph_device d, void *p)
{
    if (!p)
        return;
    if (d == DDPH_CPU) {
        free(p);
        return;
    }
    const ddph_dev_cuda_ops *c = atomic_load(&cuda_ops);
    if (c)
        c->free(p);
}

ddph_status ddph__dev_alloc_on(ddph_device d, size_t bytes, void *stream,
                               void **out, ddph_err *err)
{
    if (d == DDPH_CPU)
        return ddph__dev_alloc(d, bytes, out, err);
    const ddph_dev_cuda_ops *c = atomic_load(&cuda_ops);
    if (!c)
        return ddph__dev_alloc(d, bytes, out, err); /* says why */
    return c->alloc_on(bytes ? bytes : 64, stream, out, err);
}

void ddph__dev_free_on(ddph_device d, void *p, void *stream)
{
    if (!p)
        return;
    const ddph_dev_cuda_ops *c = atomic_load(&cuda_ops);
    if (d == DDPH_CPU || !c)
        ddph__dev_free(d, p);
    else
        c->free_on(p, stream);
}

ddph_status ddph__dev_copy(ddph_device d, void *dst, const void *src,
                           size_t bytes, void *stream, ddph_err *err)
{
    if (d == DDPH_CPU) {
        memcpy(dst, src, bytes);
        return DDPH_OK;
    }
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->copy(dst, src, bytes, stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_event_create(void **event, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->event_create(event, err) : DDPH_ERR_UNSUPPORTED;
}

void ddph__dev_event_destroy(void *event)
{
    const ddph_dev_cuda_ops *c = atomic_load(&cuda_ops);
    if (event && c)
        c->event_destroy(event);
}

ddph_status ddph__dev_event_record(void *event, void *stream, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->event_record(event, stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_event_wait(void *stream, void *event, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->event_wait(stream, event, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_sync(void *stream, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->sync(stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_stream_after(void *waiter, void *stream, void *event,
                                   ddph_err *err)
{
    ddph_status st = ddph__dev_event_record(event, stream, err);
    return st != DDPH_OK ? st : ddph__dev_event_wait(waiter, event, err);
}

ddph_status ddph__dev_copy_batch(ddph_device d, void *const *dst,
                                 const void *const *src, const size_t *bytes,
                                 size_t n, void *stream, ddph_err *err)
{
    if (d == DDPH_CPU) {
        for (size_t i = 0; i < n; i++)
            memcpy(dst[i], src[i], bytes[i]);
        return DDPH_OK;
    }
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->copy_batch(dst, src, bytes, n, stream, err)
             : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_check_on(const void *p, int device, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->check_on(p, device, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_bind(int device, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->bind(device, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_nonfinite_reset(uint64_t *first, size_t n, void *stream,
                                      ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->nonfinite_reset(first, n, stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_nonfinite_find(const void *buf, ddph_dtype dtype,
                                     size_t n, uint64_t *first, void *stream,
                                     ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->nonfinite_find(buf, dtype, n, first, stream, err)
             : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_nonfinite_fetch(uint64_t *out, const uint64_t *first,
                                      size_t n, void *stream, ddph_err *err)
{
    const ddph_dev_cuda_ops *c = cuda(err);
    return c ? c->nonfinite_fetch(out, first, n, stream, err)
             : DDPH_ERR_UNSUPPORTED;
}
