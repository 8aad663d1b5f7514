/* nccl_probe.c: what the real CUDA and NCCL do where tests/fake_nccl
 * stands in for them (tests/gpu/oneshot.sh runs it on a GPU machine and
 * keeps its lines in the report).  One rank, one GPU; every fact is a
 * line "probe: WHAT: VALUE"; it exits 1 only when a call it relies on
 * fails outright, 77 without a CUDA device.
 *
 *   - the last error after cudaStreamQuery on a busy stream;
 *   - ncclCommSplit: NCCL_SPLIT_NOCOLOR, an invalid config, and a
 *     nonblocking split (when *newcomm is written);
 *   - nonblocking init (blocking = 0): its return, then how long and how
 *     many ncclCommGetAsyncError polls until it settles;
 *   - how long ncclCommAbort takes;
 *   - a 4-byte allreduce group's latency on a blocking and a
 *     nonblocking 1-rank communicator;
 *   - what a lone (implicit-group) enqueue answers on a nonblocking
 *     1-rank communicator (the fake: ncclSuccess, no group thread);
 *   - with 2 GPUs, 2 ranks as threads: what a lone nonblocking enqueue
 *     answers (NCCL >= 2.23: ncclInProgress, group.cc starts a thread per
 *     group) and the median 4-byte allreduce latency, enqueue to stream's
 *     end, blocking against nonblocking: the per-collective price of the
 *     nonblocking communicators the backend keeps. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define FACT(...) (printf("probe: " __VA_ARGS__), putchar('\n'), fflush(stdout))
#define NEED(call)                                                           \
    do {                                                                     \
        ncclResult_t r_ = (call);                                            \
        if (r_ != ncclSuccess && r_ != ncclInProgress) {                     \
            FACT("FAILED: %s: %s", #call, ncclGetErrorString(r_));           \
            return 1;                                                        \
        }                                                                    \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls until `comm` settles; the polls made, its result in *result. */
static long settle(ncclComm_t comm, ncclResult_t *result)
{
    long polls = 0;
    double give_up = now() + 30;
    do {
        polls++;
        if (ncclCommGetAsyncError(comm, result) != ncclSuccess)
            *result = ncclSystemError;
    } while (*result == ncclInProgress && now() < give_up);
    return polls;
}

static void CUDART_CB sleep_200ms(void *unused)
{
    (void)unused;
    struct timespec t = {0, 200000000};
    nanosleep(&t, NULL);
}

static int stream_query(void)
{
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return FACT("FAILED: cudaStreamCreate"), 1;
    cudaGetLastError();
    cudaLaunchHostFunc(s, sleep_200ms, NULL);
    cudaError_t q = cudaStreamQuery(s);
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t last = cudaGetLastError();
    FACT("cudaStreamQuery on a busy stream: %s; then cudaPeekAtLastError: %s, "
         "cudaGetLastError: %s", cudaGetErrorName(q), cudaGetErrorName(peek),
         cudaGetErrorName(last));
    cudaStreamSynchronize(s);
    FACT("cudaStreamQuery once idle: %s",
         cudaGetErrorName(cudaStreamQuery(s)));
    cudaStreamDestroy(s);
    return 0;
}

/* A 1-rank communicator, blocking or not; settled before it returns. */
static int open_comm(int blocking, ncclComm_t *comm, int report)
{
    ncclUniqueId id;
    NEED(ncclGetUniqueId(&id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking;
    double t0 = now();
    ncclResult_t r = ncclCommInitRankConfig(comm, 1, id, 0, &config);
    NEED(r);
    ncclResult_t settled = ncclSuccess;
    long polls = settle(*comm, &settled);
    if (report)
        FACT("ncclCommInitRankConfig blocking=%d: returned %s, settled to %s "
             "after %ld polls in %.1f ms", blocking, ncclGetErrorString(r),
             ncclGetErrorString(settled), polls, (now() - t0) * 1e3);
    return settled == ncclSuccess ? 0 : (FACT("FAILED: init did not settle"), 1);
}

/* What ncclCommSplit left in *newcomm, which held `sentinel`. */
static const char *newcomm_is(ncclComm_t c, ncclComm_t sentinel)
{
    return c == NULL ? "NULL" : c == sentinel ? "untouched" : "a communicator";
}

static int splits(ncclComm_t parent)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t sentinel = (ncclComm_t)(uintptr_t)0x5e17, child = sentinel;
    ncclResult_t r = ncclCommSplit(parent, NCCL_SPLIT_NOCOLOR, 0, &child, &config);
    ncclResult_t settled = ncclSuccess;
    settle(parent, &settled);
    FACT("ncclCommSplit NCCL_SPLIT_NOCOLOR (nonblocking): returned %s, "
         "parent settled to %s, *newcomm %s", ncclGetErrorString(r),
         ncclGetErrorString(settled),
         newcomm_is(child, sentinel));
    child = sentinel;
    r = ncclCommSplit(parent, 0, 0, &child, &config);
    const char *right_after = newcomm_is(child, sentinel);
    long polls = settle(parent, &settled);
    FACT("ncclCommSplit colour 0 (nonblocking): returned %s, *newcomm right "
         "after: %s; parent settled to %s after %ld polls, *newcomm then %s",
         ncclGetErrorString(r), right_after, ncclGetErrorString(settled), polls,
         newcomm_is(child, sentinel));
    if (child != NULL && child != sentinel) {
        ncclResult_t child_state = ncclSuccess;
        polls = settle(child, &child_state);
        FACT("the split's child settled to %s after %ld polls",
             ncclGetErrorString(child_state), polls);
        ncclCommDestroy(child);
    }
    /* A config NCCL_CONFIG_INITIALIZER did not fill (its magic is 0). */
    ncclConfig_t bad;
    memset(&bad, 0, sizeof bad);
    child = sentinel;
    r = ncclCommSplit(parent, 0, 0, &child, &bad);
    settle(parent, &settled);
    FACT("ncclCommSplit with a zeroed config: returned %s, parent then %s, "
         "*newcomm %s", ncclGetErrorString(r), ncclGetErrorString(settled),
         newcomm_is(child, sentinel));
    if (child != NULL && child != sentinel)
        ncclCommDestroy(child);
    return 0;
}

/* Median over 201 runs of a 4-byte allreduce in a group, from the call to
 * the stream's end (a nonblocking communicator polled until it settles). */
static int group_latency(ncclComm_t comm, int blocking, cudaStream_t s,
                         float *buf)
{
    enum { RUNS = 201 };
    double t[RUNS];
    for (int i = 0; i < RUNS; i++) {
        double t0 = now();
        NEED(ncclGroupStart());
        NEED(ncclAllReduce(buf, buf + 1, 1, ncclFloat32, ncclSum, comm, s));
        ncclResult_t r = ncclGroupEnd();
        NEED(r);
        ncclResult_t settled = ncclSuccess;
        if (!blocking)
            settle(comm, &settled);
        if (settled != ncclSuccess || cudaStreamSynchronize(s) != cudaSuccess)
            return FACT("FAILED: the group did not complete"), 1;
        t[i] = now() - t0;
    }
    for (int i = 1; i < RUNS; i++) /* insertion sort */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    FACT("4-byte allreduce group, 1 rank, blocking=%d: median %.1f us "
         "(min %.1f, max %.1f)", blocking, t[RUNS / 2] * 1e6, t[0] * 1e6,
         t[RUNS - 1] * 1e6);
    return 0;
}

/* A lone ncclAllReduce on a settled nonblocking communicator: its answer
 * and the polls until it settles. */
static void lone_enqueue(ncclComm_t comm, cudaStream_t s, float *buf,
                         const char *label)
{
    ncclResult_t r =
        ncclAllReduce(buf, buf + 1, 1, ncclFloat32, ncclSum, comm, s);
    ncclResult_t settled = ncclSuccess;
    long polls = settle(comm, &settled);
    FACT("lone ncclAllReduce, nonblocking, %s: returned %s, settled to %s "
         "after %ld polls", label, ncclGetErrorString(r),
         ncclGetErrorString(settled), polls);
    cudaStreamSynchronize(s);
}

/* Two ranks as threads, each on its own GPU. */
struct pair_rank {
    int rank, blocking;
    ncclUniqueId id;
    double median_us;
    ncclResult_t lone;
    int failed;
};

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *pair_main(void *arg)
{
    struct pair_rank *p = arg;
    enum { RUNS = 201 };
    double t[RUNS];
    ncclComm_t comm = NULL;
    cudaStream_t s = NULL;
    float *buf = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = p->blocking;
    ncclResult_t settled = ncclSuccess;
    p->failed = cudaSetDevice(p->rank) != cudaSuccess ||
                cudaStreamCreate(&s) != cudaSuccess ||
                cudaMalloc((void **)&buf, 2 * sizeof *buf) != cudaSuccess;
    if (p->failed)
        return NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, 2, p->id, p->rank, &config);
    settle(comm, &settled);
    if ((r != ncclSuccess && r != ncclInProgress) || settled != ncclSuccess) {
        p->failed = 1;
        return NULL;
    }
    for (int i = 0; i < RUNS && !p->failed; i++) {
        double t0 = now();
        r = ncclAllReduce(buf, buf + 1, 1, ncclFloat32, ncclSum, comm, s);
        if (i == 0)
            p->lone = r;
        settle(comm, &settled);
        p->failed = (r != ncclSuccess && r != ncclInProgress) ||
                    settled != ncclSuccess ||
                    cudaStreamSynchronize(s) != cudaSuccess;
        t[i] = now() - t0;
    }
    qsort(t, RUNS, sizeof *t, by_value);
    p->median_us = t[RUNS / 2] * 1e6;
    ncclCommDestroy(comm);
    cudaFree(buf);
    cudaStreamDestroy(s);
    return NULL;
}

static void two_ranks(int devices)
{
    if (devices < 2) {
        FACT("2-rank enqueue and latency: not measured (%d GPU; NCCL needs "
             "one per rank)", devices);
        return;
    }
    for (int blocking = 1; blocking >= 0; blocking--) {
        struct pair_rank p[2];
        memset(p, 0, sizeof p);
        p[1].rank = 1;
        p[0].blocking = p[1].blocking = blocking;
        pthread_t t[2];
        ncclGetUniqueId(&p[0].id);
        p[1].id = p[0].id;
        for (int r = 0; r < 2; r++)
            pthread_create(&t[r], NULL, pair_main, &p[r]);
        for (int r = 0; r < 2; r++)
            pthread_join(t[r], NULL);
        if (p[0].failed || p[1].failed)
            FACT("2-rank allreduce, blocking=%d: FAILED", blocking);
        else
            FACT("2-rank 4-byte allreduce, blocking=%d: lone enqueue "
                 "returned %s; median %.1f us (rank 0), %.1f us (rank 1), "
                 "enqueue to the stream's end", blocking,
                 ncclGetErrorString(p[0].lone), p[0].median_us,
                 p[1].median_us);
    }
}

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIP: nccl_probe: no CUDA device\n");
        return 77;
    }
    int version = 0, runtime = 0, driver = 0;
    ncclGetVersion(&version);
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    FACT("NCCL %d, CUDA runtime %d, driver API %d", version, runtime, driver);
    if (stream_query())
        return 1;
    /* The splits on a communicator of their own: the invalid one may
     * leave it in error. */
    ncclComm_t blocking = NULL, nonblocking = NULL, splitter = NULL;
    if (open_comm(1, &blocking, 1) || open_comm(0, &nonblocking, 1) ||
        open_comm(0, &splitter, 0) || splits(splitter))
        return 1;
    cudaStream_t s;
    float *buf = NULL;
    if (cudaStreamCreate(&s) != cudaSuccess ||
        cudaMalloc((void **)&buf, 2 * sizeof *buf) != cudaSuccess)
        return FACT("FAILED: cudaStreamCreate or cudaMalloc"), 1;
    if (group_latency(blocking, 1, s, buf) || group_latency(nonblocking, 0, s, buf))
        return 1;
    lone_enqueue(nonblocking, s, buf, "1 rank");
    two_ranks(devices);
    double t0 = now();
    ncclResult_t r = ncclCommAbort(nonblocking);
    FACT("ncclCommAbort (nonblocking, idle): %s in %.1f ms",
         ncclGetErrorString(r), (now() - t0) * 1e3);
    t0 = now();
    r = ncclCommAbort(blocking);
    FACT("ncclCommAbort (blocking, idle): %s in %.1f ms", ncclGetErrorString(r),
         (now() - t0) * 1e3);
    t0 = now();
    r = ncclCommAbort(splitter);
    FACT("ncclCommAbort (after the splits): %s in %.1f ms",
         ncclGetErrorString(r), (now() - t0) * 1e3);
    cudaFree(buf);
    cudaStreamDestroy(s);
    FACT("done");
    return 0;
}
