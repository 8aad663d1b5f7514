/* fake_cuda.c: the CUDA runtime, cuBLAS and cuSOLVER side of the fake
 * (see fake_nccl.h).  A thread has a current device (cudaSetDevice); a
 * stream and an event belong to the device current when they were made,
 * and a kernel launch on a stream of another device, or an event record
 * on a stream of another device than the event's, fails with "invalid
 * resource handle", as CUDA does.  Work on a stream (copies, memsets,
 * kernels, collectives) runs on the host only when the stream is
 * synchronised or queried, or when another stream that waits for an
 * event recorded after it is: a missing event wait reads stale data. */
#include "build-config.h"

#include "fake_internal.h"

#include <cublas_v2.h>
#include <cusolverDn.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ddphook/plugin.h>

#include "backends/nccl/cuda_ops.h"
#include "device/quant_element.h"

pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t fake_cv = PTHREAD_COND_INITIALIZER;
_Thread_local int fake_my_rank;
_Thread_local cudaError_t fake_last_error;
_Thread_local int fake_stream_left;
static _Thread_local int current_device;

#define MAX_STREAMS 256
#define QUEUE 512
#define MAX_EVENTS 256
#define MAX_ALLOCS 1024

struct fake_stream {
    int device;
    long head, tail;
    int draining; /* a drain of it is under way (a cycle stops there) */
    fake_item items[QUEUE];
};

struct fake_event {
    int device;
    struct fake_stream *s; /* of the last record; NULL: none */
    long pos;
};

struct fake_alloc {
    char *p;
    size_t bytes;
    int device;
};

struct fake_pool {
    int device;
};

static struct fake_stream streams[MAX_STREAMS];
static int nstreams;
static struct fake_event events[MAX_EVENTS];
static int nevents;
static struct fake_alloc allocs[MAX_ALLOCS];
static struct fake_pool pools[MAX_STREAMS];
static int npools;
static int blas_token, solver_token;

_Noreturn void fake_die(const char *why)
{
    fprintf(stderr, "fake NCCL: %s\n", why);
    abort();
}

void fake_cuda_reset(void)
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        free(allocs[i].p);
    memset(streams, 0, sizeof streams);
    memset(events, 0, sizeof events);
    memset(allocs, 0, sizeof allocs);
    nstreams = nevents = npools = 0;
}

void fake_cuda_set_rank(void)
{
    fake_stream_left = 0;
    fake_last_error = cudaSuccess;
    current_device = 0;
}

static fake_record *seen(void) { return &fake_seen[fake_my_rank]; }

struct fake_stream *fake_as_stream(cudaStream_t s)
{
    struct fake_stream *f = (struct fake_stream *)(void *)s;
    if (f < streams || f >= streams + MAX_STREAMS)
        fake_die("not a stream of the fake");
    return f;
}

long fake_push(struct fake_stream *s, const fake_item *it)
{
    if (s->tail - s->head == QUEUE)
        fake_die("too much work queued on one stream");
    s->items[s->tail % QUEUE] = *it;
    pthread_cond_broadcast(&fake_cv); /* a synchronise may wait for it */
    return s->tail++;
}

int fake_drain_to(struct fake_stream *s, long upto)
{
    if (upto > s->tail)
        upto = s->tail;
    if (s->draining)
        return s->head >= upto;
    s->draining = 1;
    while (s->head < upto && s->items[s->head % QUEUE].run(
                                 &s->items[s->head % QUEUE]))
        s->head++;
    s->draining = 0;
    pthread_cond_broadcast(&fake_cv);
    return s->head >= upto;
}

int fake_stream_busy(struct fake_stream *s) { return s->head < s->tail; }

/* ---- devices ------------------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "some CUDA error";
    }
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = fake_last_error;
    fake_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = fake.device_count;
    return fake.device_count ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= fake.device_count)
        return cudaErrorInvalidDevice;
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = current_device;
    return cudaSuccess;
}

/* A GPU's UUID: its index, and the rank unless every rank shares them. */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device < 0 || device >= fake.device_count)
        return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "fake GPU %d", device);
    prop->uuid.bytes[0] = (char)device;
    prop->uuid.bytes[1] = (char)(fake.one_host ? 0 : fake_my_rank + 1);
    return cudaSuccess;
}

/* ---- streams and events ----------------------------------------------- */

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags,
                                         int priority)
{
    pthread_mutex_lock(&fake_mu);
    if (nstreams == MAX_STREAMS)
        fake_die("too many streams");
    struct fake_stream *f = &streams[nstreams++];
    f->device = current_device;
    *s = (cudaStream_t)(void *)f;
    pthread_mutex_unlock(&fake_mu);
    seen()->stream_priority = priority;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithPriority(s, 0, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t s) { return cudaSuccess; }

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    seen()->stream_polls++;
    pthread_mutex_lock(&fake_mu);
    struct fake_stream *f = fake_as_stream(s);
    fake_drain_to(f, LONG_MAX);
    int busy = fake_stream_busy(f);
    pthread_mutex_unlock(&fake_mu);
    if (fake_stream_left != 0 || busy) {
        if (fake_stream_left > 0)
            fake_stream_left--;
        fake_last_error = cudaErrorNotReady; /* CUDA keeps it */
        return cudaErrorNotReady;
    }
    if (fake.stream_ends != cudaSuccess)
        fake_last_error = fake.stream_ends;
    return fake.stream_ends;
}

/* The legacy stream (0) runs its work at once in the fake; any other
 * waits until its work has run (peers' threads enqueue what it waits
 * for), for at most 5 s. */
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (!s)
        return cudaSuccess;
    pthread_mutex_lock(&fake_mu);
    struct fake_stream *f = fake_as_stream(s);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (!fake_drain_to(f, LONG_MAX) &&
           pthread_cond_timedwait(&fake_cv, &fake_mu, &until) == 0) {
    }
    int busy = fake_stream_busy(f);
    pthread_mutex_unlock(&fake_mu);
    return busy ? cudaErrorLaunchTimeout : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    pthread_mutex_lock(&fake_mu);
    if (nevents == MAX_EVENTS)
        fake_die("too many events");
    struct fake_event *f = &events[nevents++];
    f->device = current_device;
    *e = (cudaEvent_t)(void *)f;
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) { return cudaSuccess; }

static struct fake_event *as_event(cudaEvent_t e)
{
    struct fake_event *f = (struct fake_event *)(void *)e;
    if (f < events || f >= events + MAX_EVENTS)
        fake_die("not an event of the fake");
    return f;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    pthread_mutex_lock(&fake_mu);
    struct fake_event *ev = as_event(e);
    struct fake_stream *f = s ? fake_as_stream(s) : NULL;
    cudaError_t r = cudaSuccess;
    if (f && f->device != ev->device)
        r = cudaErrorInvalidResourceHandle; /* CUDA: one device for both */
    else {
        ev->s = f;
        ev->pos = f ? f->tail : 0;
    }
    pthread_mutex_unlock(&fake_mu);
    return r;
}

static int wait_item(fake_item *it)
{
    return fake_drain_to(it->a, (long)it->n);
}

/* The stream goes on once the work before the event's last record has
 * run (that record as it stands now, as CUDA takes it). */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e,
                                unsigned int flags)
{
    pthread_mutex_lock(&fake_mu);
    struct fake_event *ev = as_event(e);
    struct fake_stream *f = fake_as_stream(s);
    if (ev->s && ev->s != f) {
        fake_item it = {.run = wait_item, .a = ev->s, .n = (size_t)ev->pos};
        fake_push(f, &it);
    }
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

/* ---- memory ----------------------------------------------------------- */

static void *device_alloc(size_t bytes, int device)
{
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (!allocs[i].p) {
            size_t rounded = (bytes + 255) / 256 * 256;
            allocs[i].p = aligned_alloc(256, rounded ? rounded : 256);
            if (!allocs[i].p)
                fake_die("out of memory");
            allocs[i].bytes = bytes;
            allocs[i].device = device;
            return allocs[i].p;
        }
    fake_die("too many allocations");
}

static void device_free(void *p)
{
    for (int i = 0; i < MAX_ALLOCS && p; i++)
        if (allocs[i].p == p) {
            free(p);
            allocs[i].p = NULL;
            return;
        }
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    pthread_mutex_lock(&fake_mu);
    *p = device_alloc(bytes, current_device);
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

/* CUDA's cudaFree waits for the device: every stream drained first. */
cudaError_t cudaFree(void *p)
{
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < nstreams; i++)
        fake_drain_to(&streams[i], LONG_MAX);
    device_free(p);
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = calloc(1, bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
                                     const void *p)
{
    memset(a, 0, sizeof *a);
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].p && (const char *)p >= allocs[i].p &&
            (const char *)p < allocs[i].p + allocs[i].bytes) {
            a->type = cudaMemoryTypeDevice;
            a->device = allocs[i].device;
        }
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool,
                              const struct cudaMemPoolProps *props)
{
    pthread_mutex_lock(&fake_mu);
    if (npools == MAX_STREAMS)
        fake_die("too many memory pools");
    struct fake_pool *f = &pools[npools++];
    f->device = props->location.id;
    *pool = (cudaMemPool_t)(void *)f;
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool,
                                    enum cudaMemPoolAttr attr, void *value)
{
    return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void **p, size_t bytes,
                                    cudaMemPool_t pool, cudaStream_t s)
{
    pthread_mutex_lock(&fake_mu);
    *p = device_alloc(bytes, ((struct fake_pool *)(void *)pool)->device);
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

static int free_item(fake_item *it)
{
    device_free(it->a);
    return 1;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&fake_mu);
    fake_item it = {.run = free_item, .a = p};
    fake_push(fake_as_stream(s), &it);
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

static int copy_item(fake_item *it)
{
    memmove(it->a, it->b, it->n);
    return 1;
}

static int set_item(fake_item *it)
{
    memset(it->a, (int)it->m, it->n);
    return 1;
}

static cudaError_t push_on(cudaStream_t s, fake_item it)
{
    pthread_mutex_lock(&fake_mu);
    fake_push(fake_as_stream(s), &it);
    pthread_mutex_unlock(&fake_mu);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            enum cudaMemcpyKind kind, cudaStream_t s)
{
    return push_on(s, (fake_item){.run = copy_item, .a = dst,
                                  .b = (void *)src, .n = bytes});
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    return push_on(s, (fake_item){.run = set_item, .a = p, .n = bytes,
                                  .m = (size_t)(unsigned char)value});
}

/* ---- kernels (cuda_ops.h): launched on the stream's device only -------- */

static int launch_refused(cudaStream_t s)
{
    pthread_mutex_lock(&fake_mu);
    int other = fake_as_stream(s)->device != current_device;
    pthread_mutex_unlock(&fake_mu);
    return other;
}

/* The pointer arrays travel with the launch (kernel arguments). */
static int batch_item(fake_item *it)
{
    void **dst = it->a;
    const void **src = (const void **)(dst + it->n);
    const size_t *bytes = (const size_t *)(src + it->n);
    for (size_t i = 0; i < it->n; i++)
        memmove(dst[i], src[i], bytes[i]);
    free(it->a);
    return 1;
}

int ddph__cuda_copy_batch(void *const *dst, const void *const *src,
                          const size_t *bytes, size_t n, void *stream)
{
    if (launch_refused(stream))
        return cudaErrorInvalidResourceHandle;
    void **args = malloc(n * (2 * sizeof(void *) + sizeof(size_t)) + 1);
    if (!args)
        fake_die("out of memory");
    memcpy(args, dst, n * sizeof *dst);
    memcpy(args + n, src, n * sizeof *src);
    memcpy(args + 2 * n, bytes, n * sizeof *bytes);
    return push_on(stream, (fake_item){.run = batch_item, .a = args, .n = n});
}

static int nonfinite_item(fake_item *it)
{
    unsigned long long *first = it->b;
    for (size_t i = 0; i < it->n; i++) {
        double v = it->rank == DDPH_F64 ? ((const double *)it->a)[i]
                                         : ((const float *)it->a)[i];
        if (!isfinite(v)) {
            if (i < *first)
                *first = i;
            break;
        }
    }
    return 1;
}

int ddph__cuda_first_nonfinite(const void *buf, int dtype, size_t n,
                               unsigned long long *first, void *stream)
{
    if (dtype != DDPH_F32 && dtype != DDPH_F64)
        fake_die("check_finite: f32 and f64 only in the fake");
    if (launch_refused(stream))
        return cudaErrorInvalidResourceHandle;
    return push_on(stream, (fake_item){.run = nonfinite_item,
                                       .a = (void *)buf, .b = first, .n = n,
                                       .rank = dtype});
}

/* What the fake does not model stops the test, named. */
#define UNMODELLED(name) fake_die(name ": not modelled by the fake")

int ddph__cuda_cast(const void *src, int src_dtype, void *dst, int dst_dtype,
                    size_t n, double scale, void *stream)
{
    UNMODELLED("ddph__cuda_cast");
}
int ddph__cuda_divide(void *buf, int dtype, size_t n, double divisor,
                      void *stream)
{
    UNMODELLED("ddph__cuda_divide");
}
int ddph__cuda_gram_schmidt(float *x, size_t rows, size_t cols, double eps,
                            void *stream)
{
    UNMODELLED("ddph__cuda_gram_schmidt");
}
int ddph__cuda_topk(const float *x, size_t n, size_t k, float *values,
                    int *indices, void *pool, void *stream)
{
    UNMODELLED("ddph__cuda_topk");
}
int ddph__cuda_gather(const float *x, const int *idx, size_t k, float *out,
                      void *stream)
{
    UNMODELLED("ddph__cuda_gather");
}
int ddph__cuda_scatter_add(float *y, const int *idx, const float *v, size_t k,
                           float alpha, void *stream)
{
    UNMODELLED("ddph__cuda_scatter_add");
}
int ddph__cuda_absmax(const float *x, size_t n, float *out, void *pool,
                      void *stream)
{
    UNMODELLED("ddph__cuda_absmax");
}
int ddph__cuda_quantize_int8(const float *x, size_t n, float scale,
                             signed char *q, void *stream)
{
    UNMODELLED("ddph__cuda_quantize_int8");
}
int ddph__cuda_dequantize_int8(const signed char *q, size_t n, float scale,
                               float beta, float *y, void *stream)
{
    UNMODELLED("ddph__cuda_dequantize_int8");
}
int ddph__cuda_pack_signs(const float *x, size_t n, unsigned char *bits,
                          void *stream)
{
    UNMODELLED("ddph__cuda_pack_signs");
}
int ddph__cuda_unpack_signs(const unsigned char *bits, size_t n, size_t chunk,
                            const float *scales, float beta, float *y,
                            void *stream)
{
    UNMODELLED("ddph__cuda_unpack_signs");
}
int ddph__cuda_chunk_abs(const float *x, size_t n, size_t chunk, int want_max,
                         float *out, void *stream)
{
    UNMODELLED("ddph__cuda_chunk_abs");
}
/* The quantizing kernels: their loops over quant_element.h's functions
 * (as cuda_ops.cu's), run when the stream is drained. */
typedef struct quant_launch {
    enum { ROUND, PACK, UNPACK } op;
    const float *x, *scales;
    const int8_t *q;
    const uint8_t *packed;
    int8_t *q_out;
    uint8_t *packed_out;
    float *y;
    size_t n, chunk, stride;
    unsigned bits;
    int nmsg;
    float top, beta;
    uint64_t seed;
} quant_launch;

static int quant_item(fake_item *it)
{
    const quant_launch *k = it->a;
    size_t per = k->bits ? 8 / k->bits : 1;
    if (k->op == PACK)
        for (size_t j = 0; j < (k->n + per - 1) / per; j++)
            k->packed_out[j] = ddph__quant_pack_byte(k->q, k->n, j, k->bits);
    for (size_t i = 0; k->op != PACK && i < k->n; i++) {
        float s = k->scales[i / k->chunk];
        if (k->op == ROUND) {
            k->q_out[i] = ddph__quant_scale_usable(s)
                              ? ddph__quant_round_one(k->x[i],
                                                      ddph__quant_inverse(s),
                                                      k->top,
                                                      ddph__quant_key(k->seed),
                                                      (uint32_t)i)
                              : 0;
        } else {
            k->y[i] = ddph__quant_sum_one(k->packed, k->scales, k->nmsg,
                                          k->stride, i, i / k->chunk, k->bits,
                                          k->beta,
                                          k->beta == 0.0f ? 0.0f : k->y[i]);
        }
    }
    free(it->a);
    return 1;
}

static int launch_quant(const quant_launch *k, void *stream)
{
    if (launch_refused(stream))
        return cudaErrorInvalidResourceHandle;
    quant_launch *copy = malloc(sizeof *copy);
    if (!copy)
        fake_die("out of memory");
    *copy = *k;
    return push_on(stream, (fake_item){.run = quant_item, .a = copy});
}

int ddph__cuda_round_stochastic(const float *x, size_t n, size_t chunk,
                                const float *scales, int levels,
                                uint64_t seed, signed char *q, void *stream)
{
    return launch_quant(&(quant_launch){.op = ROUND, .x = x, .n = n,
                                        .chunk = chunk, .scales = scales,
                                        .top = (float)levels, .seed = seed,
                                        .q_out = (int8_t *)q},
                        stream);
}
int ddph__cuda_pack_bits(const signed char *q, size_t n, int bits,
                         unsigned char *packed, void *stream)
{
    return launch_quant(&(quant_launch){.op = PACK, .q = (const int8_t *)q,
                                        .n = n, .bits = (unsigned)bits,
                                        .packed_out = packed},
                        stream);
}
int ddph__cuda_unpack_bits(const unsigned char *packed, size_t n, int bits,
                           size_t chunk, const float *scales, int nmsg,
                           size_t stride, float beta, float *y, void *stream)
{
    return launch_quant(&(quant_launch){.op = UNPACK, .packed = packed,
                                        .n = n, .bits = (unsigned)bits,
                                        .chunk = chunk, .scales = scales,
                                        .nmsg = nmsg, .stride = stride,
                                        .beta = beta, .y = y},
                        stream);
}

/* ---- cuBLAS and cuSOLVER: handles only ------------------------------- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = (cublasHandle_t)(void *)&blas_token;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    return CUBLAS_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *h)
{
    *h = (cusolverDnHandle_t)(void *)&solver_token;
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h)
{
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s)
{
    return CUSOLVER_STATUS_SUCCESS;
}

/* nccl_math.c's dense algebra is not modelled: tests/gpu checks it. */
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                              cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *a, int lda,
                              const float *b, int ldb, const float *beta,
                              float *c, int ldc)
{
    UNMODELLED("cublasSgemm");
}
cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n,
                           const float *alpha, const float *a, int lda,
                           const float *beta, const float *b, int ldb,
                           float *c, int ldc)
{
    UNMODELLED("cublasSgeam");
}
cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float *alpha,
                              const float *x, int incx, float *y, int incy)
{
    UNMODELLED("cublasSaxpy");
}
cusolverStatus_t cusolverDnSgeqrf_bufferSize(cusolverDnHandle_t h, int m,
                                             int n, float *a, int lda,
                                             int *lwork)
{
    UNMODELLED("cusolverDnSgeqrf_bufferSize");
}
cusolverStatus_t cusolverDnSgeqrf(cusolverDnHandle_t h, int m, int n,
                                  float *a, int lda, float *tau, float *work,
                                  int lwork, int *info)
{
    UNMODELLED("cusolverDnSgeqrf");
}
cusolverStatus_t cusolverDnSorgqr_bufferSize(cusolverDnHandle_t h, int m,
                                             int n, int k, const float *a,
                                             int lda, const float *tau,
                                             int *lwork)
{
    UNMODELLED("cusolverDnSorgqr_bufferSize");
}
cusolverStatus_t cusolverDnSorgqr(cusolverDnHandle_t h, int m, int n, int k,
                                  float *a, int lda, const float *tau,
                                  float *work, int lwork, int *info)
{
    UNMODELLED("cusolverDnSorgqr");
}
