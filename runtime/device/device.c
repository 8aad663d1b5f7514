/* device.c: see device.h. */
#include "build-config.h"

#include "device/device.h"

#include <stdlib.h>
#include <string.h>

#ifdef HAVE_NCCL
#include <cuda_runtime.h>

#include "comm/nccl/cuda_ops.h"

static ddph_status cuda_fail(ddph_err *err, cudaError_t e, const char *what)
{
    return ddph__fail(err, DDPH_ERR_BACKEND, "%s failed: %s", what,
                      cudaGetErrorString(e));
}
#define CUDA_OR_FAIL(call, what)                                             \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess)                                               \
            return cuda_fail(err, e_, what);                                 \
    } while (0)
#else
static ddph_status no_cuda(ddph_err *err)
{
    return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                      "this build of ddphook has no CUDA support");
}
#endif

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
#ifdef HAVE_NCCL
    void *p;
    CUDA_OR_FAIL(cudaMalloc(&p, rounded), "cudaMalloc");
    /* cudaMemset runs on the legacy default stream, which the runtime's
     * non-blocking communication stream does not wait for: finish it here
     * so that later work on any stream sees the zeros, not the reverse. */
    cudaError_t e = cudaMemset(p, 0, rounded);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cuda_fail(err, e, "cudaMemset");
    }
    *out = p;
    return DDPH_OK;
#else
    return no_cuda(err);
#endif
}

void ddph__dev_free(ddph_device d, void *p)
{
    if (!p)
        return;
    if (d == DDPH_CPU) {
        free(p);
        return;
    }
#ifdef HAVE_NCCL
    cudaFree(p);
#endif
}

ddph_status ddph__dev_copy(ddph_device d, void *dst, const void *src,
                           size_t bytes, void *stream, ddph_err *err)
{
    if (d == DDPH_CPU) {
        memcpy(dst, src, bytes);
        return DDPH_OK;
    }
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                 (cudaStream_t)stream),
                 "cudaMemcpyAsync");
    return DDPH_OK;
#else
    (void)stream;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_event_create(void **event, ddph_err *err)
{
#ifdef HAVE_NCCL
    cudaEvent_t e;
    CUDA_OR_FAIL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                 "cudaEventCreate");
    *event = e;
    return DDPH_OK;
#else
    (void)event;
    return no_cuda(err);
#endif
}

void ddph__dev_event_destroy(void *event)
{
#ifdef HAVE_NCCL
    if (event)
        cudaEventDestroy((cudaEvent_t)event);
#else
    (void)event;
#endif
}

ddph_status ddph__dev_event_record(void *event, void *stream, ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
                 "cudaEventRecord");
    return DDPH_OK;
#else
    (void)event;
    (void)stream;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_event_wait(void *stream, void *event, ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0),
                 "cudaStreamWaitEvent");
    return DDPH_OK;
#else
    (void)event;
    (void)stream;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_sync(void *stream, ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaStreamSynchronize((cudaStream_t)stream),
                 "cudaStreamSynchronize");
    return DDPH_OK;
#else
    (void)stream;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_stream_after(void *waiter, void *stream, void *event,
                                   ddph_err *err)
{
    ddph_status st = ddph__dev_event_record(event, stream, err);
    return st != DDPH_OK ? st : ddph__dev_event_wait(waiter, event, err);
}

ddph_status ddph__dev_bind(int device, ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaSetDevice(device), "cudaSetDevice");
    return DDPH_OK;
#else
    (void)device;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_nonfinite_reset(uint64_t *first, size_t n, void *stream,
                                      ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaMemsetAsync(first, 0xff, n * sizeof *first,
                                 (cudaStream_t)stream),
                 "cudaMemsetAsync");
    return DDPH_OK;
#else
    (void)first;
    (void)n;
    (void)stream;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_nonfinite_find(const void *buf, ddph_dtype dtype,
                                     size_t n, uint64_t *first, void *stream,
                                     ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL((cudaError_t)ddph__cuda_first_nonfinite(
                     buf, (int)dtype, n, (unsigned long long *)first, stream),
                 "check_finite kernel");
    return DDPH_OK;
#else
    (void)buf;
    (void)dtype;
    (void)n;
    (void)first;
    (void)stream;
    return no_cuda(err);
#endif
}

ddph_status ddph__dev_nonfinite_fetch(uint64_t *out, const uint64_t *first,
                                      size_t n, void *stream, ddph_err *err)
{
#ifdef HAVE_NCCL
    CUDA_OR_FAIL(cudaMemcpyAsync(out, first, n * sizeof *out,
                                 cudaMemcpyDeviceToHost, (cudaStream_t)stream),
                 "cudaMemcpyAsync");
    CUDA_OR_FAIL(cudaStreamSynchronize((cudaStream_t)stream),
                 "cudaStreamSynchronize");
    return DDPH_OK;
#else
    (void)out;
    (void)first;
    (void)n;
    (void)stream;
    return no_cuda(err);
#endif
}
