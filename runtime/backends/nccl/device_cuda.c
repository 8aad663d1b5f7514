/* device_cuda.c: device_ops.h's table on the GPU (the arithmetic is
 * nccl_math.c's; memory, copies, events and check_finite's search are
 * here), part of the GPU backend module. */
#include "build-config.h"

#include "backends/nccl/device_cuda.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "backends/nccl/backend_nccl.h"
#include "backends/nccl/cuda_ops.h"

#define CUDA_OR_FAIL(call, what)                                             \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess)                                               \
            return ddph__cuda_fail(err, e_, what);                          \
    } while (0)

/* The rank's GPU (ddph__nccl_init's choice; -1 before). */
static _Atomic int home_device = -1;

void ddph__cuda_set_home(int device)
{
    atomic_store(&home_device, device);
}

/* An operation may come from any thread of the trainer's, whose current
 * device is its own: allocations, pools and events belong to the current
 * device, and a launch or record on the communication stream fails from
 * another.  So each operation below makes the rank's GPU current, and
 * puts the caller's back after; when it is current already, the cost is
 * one cudaGetDevice (a thread-local read in the CUDA runtime). */
static cudaError_t enter_home(int *saved)
{
    int home = atomic_load(&home_device), current = -1;
    *saved = -1;
    if (home < 0)
        return cudaSuccess;
    cudaError_t e = cudaGetDevice(&current);
    if (e != cudaSuccess || current == home)
        return e;
    e = cudaSetDevice(home);
    if (e == cudaSuccess)
        *saved = current;
    return e;
}

static void leave_home(int saved)
{
    if (saved >= 0)
        cudaSetDevice(saved);
}

/* `return expr;` with the rank's GPU current while expr runs. */
#define ON_HOME(expr)                                                        \
    do {                                                                     \
        int saved_;                                                          \
        cudaError_t e_ = enter_home(&saved_);                                \
        if (e_ != cudaSuccess)                                               \
            return ddph__cuda_fail(err, e_, "cudaSetDevice (this rank's GPU)"); \
        ddph_status st_ = (expr);                                            \
        leave_home(saved_);                                                  \
        return st_;                                                          \
    } while (0)

static ddph_status mem_alloc_here(size_t bytes, void **out, ddph_err *err)
{
    bytes = ddph__dev_alloc_size(bytes);
    void *p;
    CUDA_OR_FAIL(cudaMalloc(&p, bytes), "cudaMalloc");
    /* cudaMemset runs on the legacy default stream, which the runtime's
     * non-blocking communication stream does not wait for: finish it here
     * so that later work on any stream sees the zeros, not the reverse. */
    cudaError_t e = cudaMemset(p, 0, bytes);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        cudaFree(p);
        return ddph__cuda_fail(err, e, "cudaMemset");
    }
    *out = p;
    return DDPH_OK;
}

static ddph_status mem_alloc(size_t bytes, void **out, ddph_err *err)
{
    ON_HOME(mem_alloc_here(bytes, out, err));
}

static void mem_free(void *p)
{
    cudaFree(p);
}

/* The hooks' own memory pool, one per device: it keeps what is freed
 * (no release threshold), so that a hook's per-step scratch memory is
 * reused instead of going back to the driver at every synchronisation,
 * and it is private, so that the trainer's pools (the device's default
 * one included) keep their own settings. */
#define MAX_DEVICES 64
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaMemPool_t pools[MAX_DEVICES];

ddph_status ddph__cuda_pool(void **out, ddph_err *err)
{
    int dev = atomic_load(&home_device);
    if (dev < 0)
        CUDA_OR_FAIL(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= MAX_DEVICES)
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "GPU %d: at most %d GPUs are supported", dev,
                          MAX_DEVICES);
    pthread_mutex_lock(&pools_lock);
    cudaError_t e = cudaSuccess;
    if (!pools[dev]) {
        struct cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        cudaMemPool_t pool;
        e = cudaMemPoolCreate(&pool, &props);
        if (e == cudaSuccess) {
            uint64_t keep_all = UINT64_MAX;
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                    &keep_all);
            pools[dev] = pool;
        }
    }
    *out = pools[dev];
    pthread_mutex_unlock(&pools_lock);
    return e == cudaSuccess ? DDPH_OK
                            : ddph__cuda_fail(err, e, "cudaMemPoolCreate");
}

static ddph_status mem_alloc_on_here(size_t bytes, void *stream, void **out,
                                ddph_err *err)
{
    void *pool = NULL;
    ddph_status st = ddph__cuda_pool(&pool, err);
    if (st != DDPH_OK)
        return st;
    if (!bytes)
        bytes = 64; /* a pointer of its own */
    void *p;
    cudaStream_t s = (cudaStream_t)stream;
    CUDA_OR_FAIL(cudaMallocFromPoolAsync(&p, bytes, (cudaMemPool_t)pool, s),
                 "cudaMallocFromPoolAsync");
    /* The services promise 64-byte alignment (pools give at least 256). */
    if ((uintptr_t)p % 64 != 0) {
        cudaFreeAsync(p, s);
        return ddph__fail(err, DDPH_ERR_NOMEM,
                          "cudaMallocFromPoolAsync returned %p, not aligned "
                          "to 64 bytes", p);
    }
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, s);
    if (e != cudaSuccess) {
        cudaFreeAsync(p, s);
        return ddph__cuda_fail(err, e, "cudaMemsetAsync");
    }
    *out = p;
    return DDPH_OK;
}

static ddph_status mem_alloc_on(size_t bytes, void *stream, void **out, ddph_err *err)
{
    ON_HOME(mem_alloc_on_here(bytes, stream, out, err));
}

static void mem_free_on(void *p, void *stream)
{
    cudaFreeAsync(p, (cudaStream_t)stream);
}

static ddph_status mem_copy_here(void *dst, const void *src, size_t bytes,
                            void *stream, ddph_err *err)
{
    CUDA_OR_FAIL(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                 (cudaStream_t)stream),
                 "cudaMemcpyAsync");
    return DDPH_OK;
}

static ddph_status mem_copy(void *dst, const void *src, size_t bytes, void *stream, ddph_err *err)
{
    ON_HOME(mem_copy_here(dst, src, bytes, stream, err));
}

static ddph_status event_create_here(void **event, ddph_err *err)
{
    cudaEvent_t e;
    CUDA_OR_FAIL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                 "cudaEventCreate");
    *event = e;
    return DDPH_OK;
}

static ddph_status event_create(void **event, ddph_err *err)
{
    ON_HOME(event_create_here(event, err));
}

static void event_destroy(void *event)
{
    cudaEventDestroy((cudaEvent_t)event);
}

static ddph_status event_record_here(void *event, void *stream, ddph_err *err)
{
    CUDA_OR_FAIL(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
                 "cudaEventRecord");
    return DDPH_OK;
}

static ddph_status event_record(void *event, void *stream, ddph_err *err)
{
    ON_HOME(event_record_here(event, stream, err));
}

static ddph_status event_wait(void *stream, void *event, ddph_err *err)
{
    CUDA_OR_FAIL(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0),
                 "cudaStreamWaitEvent");
    return DDPH_OK;
}

static ddph_status sync_stream(void *stream, ddph_err *err)
{
    CUDA_OR_FAIL(cudaStreamSynchronize((cudaStream_t)stream),
                 "cudaStreamSynchronize");
    return DDPH_OK;
}

static ddph_status bind(int device, ddph_err *err)
{
    CUDA_OR_FAIL(cudaSetDevice(device), "cudaSetDevice");
    return DDPH_OK;
}

static ddph_status nonfinite_reset_here(uint64_t *first, size_t n, void *stream,
                                   ddph_err *err)
{
    CUDA_OR_FAIL(cudaMemsetAsync(first, 0xff, n * sizeof *first,
                                 (cudaStream_t)stream),
                 "cudaMemsetAsync");
    return DDPH_OK;
}

static ddph_status nonfinite_reset(uint64_t *first, size_t n, void *stream, ddph_err *err)
{
    ON_HOME(nonfinite_reset_here(first, n, stream, err));
}

static ddph_status nonfinite_find_here(const void *buf, ddph_dtype dtype, size_t n,
                                  uint64_t *first, void *stream, ddph_err *err)
{
    CUDA_OR_FAIL((cudaError_t)ddph__cuda_first_nonfinite(
                     buf, (int)dtype, n, (unsigned long long *)first, stream),
                 "check_finite kernel");
    return DDPH_OK;
}

static ddph_status nonfinite_find(const void *buf, ddph_dtype dtype, size_t n, uint64_t *first, void *stream, ddph_err *err)
{
    ON_HOME(nonfinite_find_here(buf, dtype, n, first, stream, err));
}

static ddph_status nonfinite_fetch_here(uint64_t *out, const uint64_t *first,
                                   size_t n, void *stream, ddph_err *err)
{
    CUDA_OR_FAIL(cudaMemcpyAsync(out, first, n * sizeof *out,
                                 cudaMemcpyDeviceToHost, (cudaStream_t)stream),
                 "cudaMemcpyAsync");
    CUDA_OR_FAIL(cudaStreamSynchronize((cudaStream_t)stream),
                 "cudaStreamSynchronize");
    return DDPH_OK;
}

static ddph_status nonfinite_fetch(uint64_t *out, const uint64_t *first, size_t n, void *stream, ddph_err *err)
{
    ON_HOME(nonfinite_fetch_here(out, first, n, stream, err));
}

static ddph_status check_on(const void *p, int device, ddph_err *err)
{
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess)
        return ddph__cuda_fail(err, e, "cudaPointerGetAttributes");
    if (a.type == cudaMemoryTypeManaged ||
        (a.type == cudaMemoryTypeDevice && a.device == device))
        return DDPH_OK;
    if (a.type == cudaMemoryTypeDevice)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "%p is memory of GPU %d, but this rank's GPU is "
                          "%d (the rank's index among its host's ranks, "
                          "modulo the GPUs it sees): allocate the gradients "
                          "there (cudaSetDevice(ddph_cuda_device(ctx)))",
                          p, a.device, device);
    return ddph__fail(err, DDPH_ERR_INVALID,
                      "%p is host memory, not GPU memory (DDPH_CUDA)", p);
}

static ddph_status copy_batch_here(void *const *dst, const void *const *src,
                              const size_t *bytes, size_t n, void *stream,
                              ddph_err *err)
{
    CUDA_OR_FAIL((cudaError_t)ddph__cuda_copy_batch(dst, src, bytes, n, stream),
                 "copy_batch kernel");
    return DDPH_OK;
}

static ddph_status copy_batch(void *const *dst, const void *const *src, const size_t *bytes, size_t n, void *stream, ddph_err *err)
{
    ON_HOME(copy_batch_here(dst, src, bytes, n, stream, err));
}

const ddph_dev_ops ddph__cuda_device_ops = {
    .device = DDPH_CUDA,
    .cast = ddph__nccl_cast,
    .divide = ddph__nccl_divide,
    .gemm = ddph__nccl_gemm,
    .orthogonalize = ddph__nccl_orthogonalize,
    .axpy = ddph__nccl_axpy,
    .copy = ddph__nccl_copy,
    .zero = ddph__nccl_zero,
    .topk = ddph__nccl_topk,
    .absmax = ddph__nccl_absmax,
    .gather = ddph__nccl_gather,
    .scatter_add = ddph__nccl_scatter_add,
    .quantize_int8 = ddph__nccl_quantize_int8,
    .dequantize_int8 = ddph__nccl_dequantize_int8,
    .pack_signs = ddph__nccl_pack_signs,
    .unpack_signs = ddph__nccl_unpack_signs,
    .chunk_abs = ddph__nccl_chunk_abs,
    .round_stochastic = ddph__nccl_round_stochastic,
    .pack_bits = ddph__nccl_pack_bits,
    .unpack_bits = ddph__nccl_unpack_bits,
    .alloc = mem_alloc,
    .free = mem_free,
    .alloc_on = mem_alloc_on,
    .free_on = mem_free_on,
    .copy_on = mem_copy,
    .copy_batch = copy_batch,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_wait = event_wait,
    .sync = sync_stream,
    .bind = bind,
    .nonfinite_reset = nonfinite_reset,
    .nonfinite_find = nonfinite_find,
    .nonfinite_fetch = nonfinite_fetch,
    .check_on = check_on,
};
