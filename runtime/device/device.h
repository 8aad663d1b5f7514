/* device.h: memory and ordering on a bucket's device, for the runtime's
 * own buffers: each call goes to the device's table (device_ops.h).  CPU
 * memory is 64-byte aligned host memory.  CUDA memory (nccl backend) is
 * cudaMalloc'd, copied with cudaMemcpyAsync on a stream and ordered with
 * events by the GPU backend module, which hands its table over with
 * ddph__dev_use_cuda when it is loaded; before that the CUDA side answers
 * DDPH_ERR_UNSUPPORTED. */
#ifndef DDPH_DEVICE_H
#define DDPH_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "device/device_ops.h"
#include "support/util.h"

/* Process-wide, once: the module is never unloaded. */
void ddph__dev_use_cuda(const ddph_dev_ops *ops);

/* n copies (dst[i] <- src[i], bytes[i]): CPU memcpy; CUDA, on stream, in
 * one kernel launch for up to 64 of them (not one cudaMemcpyAsync each). */
ddph_status ddph__dev_copy_batch(ddph_device d, void *const *dst,
                                 const void *const *src, const size_t *bytes,
                                 size_t n, void *stream, ddph_err *err);
/* Whether p is GPU memory of `device` (CUDA: device_ops.h's check_on). */
ddph_status ddph__dev_check_on(const void *p, int device, ddph_err *err);

/* Zero-filled. */
ddph_status ddph__dev_alloc(ddph_device d, size_t bytes, void **out,
                            ddph_err *err);
void ddph__dev_free(ddph_device d, void *p);
/* CPU: memcpy.  CUDA: device-to-device, asynchronous on stream. */
ddph_status ddph__dev_copy(ddph_device d, void *dst, const void *src,
                           size_t bytes, void *stream, ddph_err *err);
/* CUDA events: created once per bucket; record on the producer's stream,
 * make the consumer's stream wait for it. */
ddph_status ddph__dev_event_create(void **event, ddph_err *err);
void ddph__dev_event_destroy(void *event);
ddph_status ddph__dev_event_record(void *event, void *stream, ddph_err *err);
ddph_status ddph__dev_event_wait(void *stream, void *event, ddph_err *err);
ddph_status ddph__dev_sync(void *stream, ddph_err *err);
/* `waiter` waits for everything enqueued on `stream` so far (records
 * `event` on stream; the event may be reused right after). */
ddph_status ddph__dev_stream_after(void *waiter, void *stream, void *event,
                                   ddph_err *err);
/* check_finite on the GPU: `first` is device memory of one uint64_t per
 * parameter.  Reset sets n of them to UINT64_MAX on stream; find lowers
 * first[0] to the index of buf's first NaN/Inf, on stream; fetch copies n
 * of them to host memory `out` once stream has done its work. */
ddph_status ddph__dev_nonfinite_reset(uint64_t *first, size_t n, void *stream,
                                      ddph_err *err);
ddph_status ddph__dev_nonfinite_find(const void *buf, ddph_dtype dtype,
                                     size_t n, uint64_t *first, void *stream,
                                     ddph_err *err);
ddph_status ddph__dev_nonfinite_fetch(uint64_t *out, const uint64_t *first,
                                      size_t n, void *stream, ddph_err *err);
/* Makes `device` the calling thread's current CUDA device (the current
 * device is per thread: the communication thread must set its own). */
ddph_status ddph__dev_bind(int device, ddph_err *err);

#endif
