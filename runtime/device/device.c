/* device.c: see device.h.  The one place the runtime's own buffers pick
 * their device's table. */
#include "build-config.h"

#include "device/device.h"

#include <stdatomic.h>

static _Atomic(const ddph_dev_ops *) cuda_ops;

void ddph__dev_use_cuda(const ddph_dev_ops *ops)
{
    atomic_store(&cuda_ops, ops);
}

/* The table of d's memory; NULL for CUDA before the module is loaded. */
static const ddph_dev_ops *table_of(ddph_device d)
{
    return d == DDPH_CPU ? &ddph__dev_cpu_ops : atomic_load(&cuda_ops);
}

/* The same, or NULL with err set. */
static const ddph_dev_ops *table(ddph_device d, ddph_err *err)
{
    const ddph_dev_ops *ops = table_of(d);
    if (!ops)
        ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                   "CUDA memory needs the GPU backend ([runtime] backend = "
                   "nccl), which this process has not loaded");
    return ops;
}

/* Events, streams and check_finite's search exist on CUDA only. */
static const ddph_dev_ops *cuda(ddph_err *err)
{
    return table(DDPH_CUDA, err);
}

ddph_status ddph__dev_alloc(ddph_device d, size_t bytes, void **out,
                            ddph_err *err)
{
    const ddph_dev_ops *t = table(d, err);
    return t ? t->alloc(bytes, out, err) : DDPH_ERR_UNSUPPORTED;
}

void ddph__dev_free(ddph_device d, void *p)
{
    const ddph_dev_ops *t = table_of(d);
    if (p && t)
        t->free(p);
}

ddph_status ddph__dev_copy(ddph_device d, void *dst, const void *src,
                           size_t bytes, void *stream, ddph_err *err)
{
    const ddph_dev_ops *t = table(d, err);
    return t ? t->copy_on(dst, src, bytes, stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_copy_batch(ddph_device d, void *const *dst,
                                 const void *const *src, const size_t *bytes,
                                 size_t n, void *stream, ddph_err *err)
{
    const ddph_dev_ops *t = table(d, err);
    return t ? t->copy_batch(dst, src, bytes, n, stream, err)
             : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_event_create(void **event, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->event_create(event, err) : DDPH_ERR_UNSUPPORTED;
}

void ddph__dev_event_destroy(void *event)
{
    const ddph_dev_ops *c = table_of(DDPH_CUDA);
    if (event && c)
        c->event_destroy(event);
}

ddph_status ddph__dev_event_record(void *event, void *stream, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->event_record(event, stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_event_wait(void *stream, void *event, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->event_wait(stream, event, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_sync(void *stream, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->sync(stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_stream_after(void *waiter, void *stream, void *event,
                                   ddph_err *err)
{
    ddph_status st = ddph__dev_event_record(event, stream, err);
    return st != DDPH_OK ? st : ddph__dev_event_wait(waiter, event, err);
}

ddph_status ddph__dev_check_on(const void *p, int device, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->check_on(p, device, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_bind(int device, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->bind(device, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_nonfinite_reset(uint64_t *first, size_t n, void *stream,
                                      ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->nonfinite_reset(first, n, stream, err) : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_nonfinite_find(const void *buf, ddph_dtype dtype,
                                     size_t n, uint64_t *first, void *stream,
                                     ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->nonfinite_find(buf, dtype, n, first, stream, err)
             : DDPH_ERR_UNSUPPORTED;
}

ddph_status ddph__dev_nonfinite_fetch(uint64_t *out, const uint64_t *first,
                                      size_t n, void *stream, ddph_err *err)
{
    const ddph_dev_ops *c = cuda(err);
    return c ? c->nonfinite_fetch(out, first, n, stream, err)
             : DDPH_ERR_UNSUPPORTED;
}
