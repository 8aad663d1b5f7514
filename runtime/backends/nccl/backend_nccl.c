/* backend_nccl.c: see backend_nccl.h. */
#include "build-config.h"

#include "backends/nccl/backend_nccl.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/nccl/cuda_ops.h"

#define STREAM(n) ((cudaStream_t)(n)->stream)

ddph_status ddph__cuda_fail(ddph_err *err, int e, const char *what)
{
    return ddph__fail(err, DDPH_ERR_BACKEND, "%s failed: %s", what,
                      cudaGetErrorString((cudaError_t)e));
}

static ddph_status nccl_fail(ddph_err *err, ncclResult_t r, const char *what)
{
    return ddph__fail(err, DDPH_ERR_BACKEND, "%s failed: %s", what,
                      ncclGetErrorString(r));
}

static ncclDataType_t nccl_type(ddph_dtype t)
{
    switch (t) {
    case DDPH_F32:
        return ncclFloat32;
    case DDPH_F64:
        return ncclFloat64;
    case DDPH_F16:
        return ncclFloat16;
    case DDPH_I32:
        return ncclInt32;
    case DDPH_I64:
        return ncclInt64;
    case DDPH_U8:
        return ncclUint8;
    case DDPH_I8:
        return ncclInt8;
    case DDPH_BF16:
    case DDPH_DTYPE_COUNT:
        break;
    }
    return ncclBfloat16;
}

static ncclRedOp_t nccl_op(ddph_redop op)
{
    return op == DDPH_MAX ? ncclMax : op == DDPH_MIN ? ncclMin : ncclSum;
}

/* A poll loop's pause: spin briefly (a collective often ends within
 * microseconds), then yield, then sleep, so that a long wait does not
 * hold a core that the trainer's own threads need. */
#define SPIN_POLLS 64
static void backoff(unsigned polls)
{
    if (polls < SPIN_POLLS)
        return;
    if (polls < 1024) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* Whether a poll loop looks at the job's failure notices and its
 * deadline on this poll: not while it spins (its first SPIN_POLLS polls,
 * microseconds), and on every poll once it yields or sleeps, where one
 * poll may take a time slice of another thread (192 yields took over
 * 0.3 s beside a busy build). */
static int time_to_look(unsigned polls)
{
    return polls >= SPIN_POLLS;
}

/* Every communicator is nonblocking (config.blocking = 0): an NCCL call
 * may return ncclInProgress, and the communicator then works in the
 * background until ncclCommGetAsyncError says ncclSuccess (or an error);
 * no other call may be made on it before.  This waits for that, against
 * `deadline`, watching the job's failure notices; at the deadline, or on
 * a peer's failure, the communicator is aborted (ncclCommAbort does not
 * wait for peers).  *comm is set to NULL when it was aborted. */
static ddph_status settle(ddph_nccl *n, ncclComm_t *comm, ncclResult_t r,
                          const char *what, double deadline, ddph_err *err)
{
    for (unsigned polls = 0; r == ncclInProgress; polls++) {
        n->job.activity_touch(); /* a bounded wait, not a stuck hook */
        if (ncclCommGetAsyncError(*comm, &r) != ncclSuccess)
            break; /* the communicator is gone: report r as it stands */
        if (r != ncclInProgress)
            break;
        int look = time_to_look(polls);
        ddph_status broken =
            look ? ddph__ctl_fault(n->job.control, err) : DDPH_OK;
        if (broken != DDPH_OK || (look && ddph__now() > deadline)) {
            ncclCommAbort(*comm);
            *comm = NULL;
            return broken != DDPH_OK
                       ? broken
                       : ddph__fail(err, DDPH_ERR_TIMEOUT,
                                    "%s did not complete within timeout_s = "
                                    "%g s (the NCCL communicator was aborted)",
                                    what, n->timeout_s);
        }
        backoff(polls);
    }
    if (r == ncclSuccess)
        return DDPH_OK;
    if (*comm) {
        ncclCommAbort(*comm);
        *comm = NULL;
    }
    return nccl_fail(err, r, what);
}

/* An enqueue on group g's communicator: settled against timeout_s. */
static ddph_status enqueued(ddph_nccl *n, ddph_nccl_group *g, ncclResult_t r,
                            const char *what, ddph_err *err)
{
    if (r == ncclSuccess)
        return DDPH_OK;
    ncclComm_t c = (ncclComm_t)g->nccl;
    ddph_status st = settle(n, &c, r, what, ddph__now() + n->timeout_s, err);
    g->nccl = c;
    return st;
}

/* Every communicator of n aborted: a wait that names no group (a copy, a
 * top-k) cannot tell which collective before it is stuck. */
static void abort_all(ddph_nccl *n)
{
    for (ddph_nccl_group *g = n->groups; g; g = g->next)
        if (g->nccl) {
            ncclCommAbort((ncclComm_t)g->nccl);
            g->nccl = NULL;
        }
    if (n->world.nccl) {
        ncclCommAbort((ncclComm_t)n->world.nccl);
        n->world.nccl = NULL;
    }
}

/* Every group of n with a communicator: the world, then the splits. */
static ddph_nccl_group *next_group(ddph_nccl *n, ddph_nccl_group *g)
{
    return g == &n->world ? n->groups : g->next;
}

/* The first communicator of n (the world, then the splits) whose
 * asynchronous error is set, or NULL: every communicator shares the one
 * stream, so a failure on any of them stops all the work queued behind
 * it, whichever group a wait names.  *result is that error. */
static ddph_nccl_group *failed_comm(ddph_nccl *n, ncclResult_t *result)
{
    for (ddph_nccl_group *g = &n->world; g; g = next_group(n, g)) {
        ncclResult_t async = ncclSuccess;
        if (g->nccl &&
            ncclCommGetAsyncError((ncclComm_t)g->nccl, &async) ==
                ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
            *result = async;
            return g;
        }
    }
    return NULL;
}

/* The stream has drained: the last QR's info word is there to read
 * (orthogonalize copies it without waiting, into pinned memory). */
static ddph_status qr_checked(ddph_nccl *n, ddph_err *err)
{
    if (!n->qr_info || *n->qr_info == 0)
        return DDPH_OK;
    int info = *n->qr_info;
    *n->qr_info = 0;
    return ddph__fail(err, DDPH_ERR_BACKEND,
                      "orthogonalize: cuSOLVER QR failed (info %d)", info);
}

/* Waits for the communication stream, against timeout_s; a failed or
 * stuck communicator is aborted and reported (every one of them when the
 * wait names no group). */
static ddph_status wait_stream(ddph_nccl *n, ddph_nccl_group *g,
                               const char *what, ddph_err *err)
{
    double deadline = ddph__now() + n->timeout_s;
    for (unsigned polls = 0;; polls++) {
        n->job.activity_touch(); /* a bounded wait, not a stuck hook */
        cudaError_t e = cudaStreamQuery(STREAM(n));
        if (e == cudaSuccess)
            return qr_checked(n, err);
        if (e != cudaErrorNotReady)
            return ddph__cuda_fail(err, e, what);
        /* "Not ready" is left as the thread's last error: cleared, or the
         * next launch wrapper (which returns cudaGetLastError) would
         * report it as its own failure (PyTorch clears it the same way). */
        (void)cudaGetLastError();
        ncclResult_t async = ncclSuccess;
        ddph_nccl_group *bad = failed_comm(n, &async);
        if (bad) {
            ncclCommAbort((ncclComm_t)bad->nccl);
            bad->nccl = NULL;
            if (bad == g || (!g && bad == &n->world))
                return nccl_fail(err, async, what);
            return ddph__fail(err, DDPH_ERR_BACKEND,
                              "%s failed: %s (on the communicator of a %d-rank "
                              "group, whose work the stream runs before it)",
                              what, ncclGetErrorString(async), bad->size);
        }
        /* A peer's failure notice, or a failure on another thread. */
        int look = time_to_look(polls);
        ddph_status broken =
            look ? ddph__ctl_fault(n->job.control, err) : DDPH_OK;
        int late = look && ddph__now() > deadline;
        if (broken != DDPH_OK || late) {
            if (!g)
                abort_all(n);
            else if (g->nccl) {
                ncclCommAbort((ncclComm_t)g->nccl);
                g->nccl = NULL;
            }
        }
        if (broken != DDPH_OK)
            return broken;
        if (late) {
            return ddph__fail(err, DDPH_ERR_TIMEOUT,
                              "%s did not complete within timeout_s = %g s "
                              "(the NCCL communicator was aborted)",
                              what, n->timeout_s);
        }
        backoff(polls);
    }
}

ddph_status ddph__nccl_probe(ddph_err *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "no CUDA device on this machine (%s)",
                          e == cudaSuccess ? "0 devices"
                                           : cudaGetErrorString(e));
    return DDPH_OK;
}

/* A 63-bit digest of a GPU's UUID (0: unknown). */
static int64_t uuid_digest(const cudaUUID_t *u)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof u->bytes; i++) {
        h ^= (unsigned char)u->bytes[i];
        h *= 1099511628211ull;
    }
    return (int64_t)(h >> 1) | 1;
}

/* The GPU: this rank's index among the ranks of its host, modulo the
 * GPUs it sees (each rank may see only its own, CUDA_VISIBLE_DEVICES).
 * Collective: every rank's GPU UUID is gathered, and two ranks on one
 * GPU (more ranks on a host than GPUs) are an error on both, named here
 * rather than by NCCL's "Duplicate GPU detected" later. */
static ddph_status choose_device(ddph_nccl *n, int count, ddph_err *err)
{
    const ddph_gpu_job *job = &n->job;
    int size = ddph__ctl_world(job->control)->size;
    int rank = ddph__ctl_world(job->control)->rank;
    n->device = job->node_rank % count;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, n->device);
    int64_t *ids = calloc((size_t)size, sizeof *ids);
    if (!ids)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ids[rank] = e == cudaSuccess ? uuid_digest(&prop.uuid) : 0;
    /* An allgather as a sum: every rank fills only its own slot. */
    ddph_status st = ddph__ctl_allreduce_i64(job->control, ids, (size_t)size,
                                             DDPH_SUM, err);
    int other = -1;
    for (int r = 0; st == DDPH_OK && r < size && other < 0; r++)
        if (r != rank && ids[rank] != 0 && ids[r] == ids[rank])
            other = r;
    free(ids);
    if (st != DDPH_OK)
        return st;
    if (e != cudaSuccess)
        return ddph__cuda_fail(err, e, "cudaGetDeviceProperties");
    if (other >= 0)
        return ddph__fail(err, DDPH_ERR_BACKEND,
                          "rank %d and rank %d would share GPU %d of their "
                          "host (%d ranks there, %d GPUs visible to this "
                          "rank): NCCL needs a GPU of its own per rank; "
                          "start at most one rank per GPU, or give each "
                          "rank its own through CUDA_VISIBLE_DEVICES",
                          rank, other, n->device, job->node_size, count);
    return DDPH_OK;
}

/* The communication stream: non-blocking (no implicit waits on the legacy
 * stream) and of the highest priority, so that its collectives are
 * scheduled ahead of the trainer's backward kernels that overlap them. */
static cudaError_t comm_stream(cudaStream_t *s)
{
    int least = 0, greatest = 0;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess)
        greatest = 0;
    return cudaStreamCreateWithPriority(s, cudaStreamNonBlocking, greatest);
}

ddph_status ddph__nccl_init(const ddph_gpu_job *job, ddph_nccl **out,
                            ddph_err *err)
{
    ddph_nccl *n = calloc(1, sizeof *n);
    if (!n)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    n->job = *job;
    n->timeout_s = job->timeout_s;
    ddph_control control = job->control;
    const struct ddph_group *world = ddph__ctl_world(control);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    /* Every rank learns whether every rank has a GPU: no one waits alone. */
    int64_t have = e == cudaSuccess && count > 0;
    ddph_status st = ddph__ctl_allreduce_i64(control, &have, 1, DDPH_MIN, err);
    if (st == DDPH_OK && !have)
        st = ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                        "no CUDA device on %s rank (%s)",
                        e == cudaSuccess && count > 0 ? "another" : "this",
                        e == cudaSuccess ? "0 devices"
                                         : cudaGetErrorString(e));
    if (st != DDPH_OK) {
        free(n);
        return st;
    }
    /* Local set-up: a failure here is agreed on below, with rank 0's
     * ncclGetUniqueId, so that no rank waits in the broadcast alone.  The
     * caller's current device is its own (the trainer's): set back at the
     * end; the communication thread binds to n->device itself. */
    int caller_device = -1;
    if (cudaGetDevice(&caller_device) != cudaSuccess)
        caller_device = -1;
    st = choose_device(n, count, err);
    /* NCCL_COMM_BLOCKING=1 overrides config.blocking = 0: every call
     * would then block in NCCL, out of timeout_s's reach. */
    const char *blocking = getenv("NCCL_COMM_BLOCKING");
    if (st == DDPH_OK && blocking && atoi(blocking) != 0)
        st = ddph__fail(err, DDPH_ERR_INVALID,
                        "NCCL_COMM_BLOCKING=%s is set: it makes NCCL's "
                        "communicators blocking, which timeout_s cannot "
                        "bound; unset it (the nccl backend needs them "
                        "nonblocking)",
                        blocking);
    cudaStream_t s = NULL;
    cublasHandle_t h = NULL;
    cusolverDnHandle_t solver = NULL;
    if (st != DDPH_OK)
        ; /* agreed on below */
    else if ((e = cudaSetDevice(n->device)) != cudaSuccess)
        st = ddph__cuda_fail(err, e, "cudaSetDevice");
    else if ((e = comm_stream(&s)) != cudaSuccess)
        st = ddph__cuda_fail(err, e, "cudaStreamCreateWithPriority");
    n->stream = s;
    if (st == DDPH_OK && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cublasCreate failed");
    n->blas = h;
    /* Unset, cuBLAS would run on the legacy stream, out of the hooks'
     * order. */
    if (st == DDPH_OK && cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cublasSetStream failed");
    if (st == DDPH_OK && cusolverDnCreate(&solver) != CUSOLVER_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cusolverDnCreate failed");
    n->solver = solver;
    if (st == DDPH_OK &&
        cusolverDnSetStream(solver, s) != CUSOLVER_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cusolverDnSetStream failed");
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (st == DDPH_OK && world->rank == 0 &&
        (r = ncclGetUniqueId(&id)) != ncclSuccess)
        st = nccl_fail(err, r, "ncclGetUniqueId");
    int64_t ok = st == DDPH_OK;
    ddph_status agreed = ddph__ctl_allreduce_i64(control, &ok, 1, DDPH_MIN,
                                                 err);
    if (st == DDPH_OK && agreed != DDPH_OK)
        st = agreed;
    if (st == DDPH_OK && !ok)
        st = ddph__fail(err, DDPH_ERR_BACKEND,
                        "another rank failed to set up its GPU");
    if (st == DDPH_OK)
        st = ddph__ctl_bcast_bytes(control, &id, sizeof id, 0, err);
    ncclComm_t comm = NULL;
    if (st == DDPH_OK) {
        /* Nonblocking, so that a peer that never comes cannot hold this
         * rank in NCCL's bootstrap beyond timeout_s. */
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        r = ncclCommInitRankConfig(&comm, world->size, id, world->rank,
                                   &config);
        /* Even ncclSuccess may leave it connecting: asked until done. */
        st = settle(n, &comm, r == ncclSuccess ? ncclInProgress : r,
                    "ncclCommInitRank", ddph__now() + n->timeout_s, err);
    }
    if (caller_device >= 0 && caller_device != n->device)
        cudaSetDevice(caller_device);
    if (st != DDPH_OK) {
        ddph__nccl_finalize(n, 1);
        return st;
    }
    n->world.rank = world->rank;
    n->world.size = world->size;
    n->world.host = job->host.ops->world(job->host.self);
    n->world.nccl = comm;
    *out = n;
    return DDPH_OK;
}

/* Ends every communicator of n.  Not aborting: ncclCommFinalize on each
 * (nonblocking: it flushes their work), polled against timeout_s, then
 * ncclCommDestroy, which has nothing left to wait for; a communicator
 * that does not finalize in time (a peer gone mid-collective) is aborted
 * instead, so that teardown cannot block for ever. */
static void end_comms(ddph_nccl *n, int abort)
{
    double deadline = ddph__now() + n->timeout_s;
    /* Finalize all first: their peers finalize in whatever order. */
    for (ddph_nccl_group *g = &n->world; g; g = next_group(n, g)) {
        if (!g->nccl || abort)
            continue;
        ncclResult_t r = ncclCommFinalize((ncclComm_t)g->nccl);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclCommAbort((ncclComm_t)g->nccl);
            g->nccl = NULL;
        }
    }
    for (ddph_nccl_group *g = &n->world; g; g = next_group(n, g)) {
        if (!g->nccl)
            continue;
        ncclComm_t c = (ncclComm_t)g->nccl;
        ddph_err ignored;
        if (abort || settle(n, &c, ncclInProgress, "ncclCommFinalize",
                            deadline, &ignored) != DDPH_OK) {
            if (c)
                ncclCommAbort(c);
        } else {
            ncclCommDestroy(c);
        }
        g->nccl = NULL;
    }
}

void ddph__nccl_finalize(ddph_nccl *n, int abort)
{
    end_comms(n, abort);
    for (ddph_nccl_group *g = n->groups, *next; g; g = next) {
        next = g->next;
        free(g);
    }
    if (n->blas)
        cublasDestroy((cublasHandle_t)n->blas);
    if (n->solver)
        cusolverDnDestroy((cusolverDnHandle_t)n->solver);
    /* In stream order: cudaFree would synchronise the device. */
    if (n->qr_scratch)
        cudaFreeAsync(n->qr_scratch, STREAM(n));
    if (n->qr_info)
        cudaFreeHost(n->qr_info);
    if (n->stream)
        cudaStreamDestroy(STREAM(n));
    free(n);
}

static ddph_status need_comm(ddph_nccl_group *g, ddph_err *err)
{
    return g->nccl ? DDPH_OK
                   : ddph__fail(err, DDPH_ERR_BACKEND,
                                "the NCCL communicator was aborted after an "
                                "earlier failure");
}

ddph_status ddph__nccl_start_allreduce(ddph_nccl *n, ddph_nccl_group *g,
                                       void *buf, size_t count,
                                       ddph_dtype dtype, ddph_redop op,
                                       ddph_err *err)
{
    ddph_status st = need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    ncclResult_t r = ncclAllReduce(buf, buf, count, nccl_type(dtype),
                                   nccl_op(op), (ncclComm_t)g->nccl, STREAM(n));
    return enqueued(n, g, r, "ncclAllReduce", err);
}

ddph_status ddph__nccl_start_allgather(ddph_nccl *n, ddph_nccl_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_err *err)
{
    ddph_status st = need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    ncclResult_t r = ncclAllGather(send, recv, count, nccl_type(dtype),
                                   (ncclComm_t)g->nccl, STREAM(n));
    return enqueued(n, g, r, "ncclAllGather", err);
}

/* A call inside ncclGroupStart/End on a nonblocking communicator may
 * answer ncclInProgress: the group goes on (stopping there would leave
 * the peers waiting for the calls never made). */
static int in_group_ok(ncclResult_t r)
{
    return r == ncclSuccess || r == ncclInProgress;
}

/* After ncclGroupEnd: `last` is the last call's answer inside the group,
 * `end` the group's.  Either in progress: the communicator is settled
 * against timeout_s (no call may be made on it before).  An error inside
 * the group: the calls after it were not made, and the peers would wait
 * for them, so the communicator is aborted. */
static ddph_status group_ended(ddph_nccl *n, ddph_nccl_group *g,
                               ncclResult_t last, ncclResult_t end,
                               const char *what, ddph_err *err)
{
    if (!in_group_ok(last)) {
        ncclCommAbort((ncclComm_t)g->nccl);
        g->nccl = NULL;
        return nccl_fail(err, last, what);
    }
    if (end == ncclSuccess && last == ncclInProgress)
        end = ncclInProgress;
    return enqueued(n, g, end, what, err);
}

/* NCCL has no allgatherv: one broadcast per rank into its slice, fused
 * into one launch by a group. */
ddph_status ddph__nccl_start_allgatherv(ddph_nccl *n, ddph_nccl_group *g,
                                        const void *send, void *recv,
                                        const size_t *counts, ddph_dtype dtype,
                                        ddph_err *err)
{
    ddph_status st = need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    size_t es = ddph__dtype_size(dtype), at = 0;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < g->size && in_group_ok(r); i++) {
        char *slice = (char *)recv + at * es;
        r = ncclBroadcast(i == g->rank ? send : slice, slice, counts[i],
                          nccl_type(dtype), i, (ncclComm_t)g->nccl, STREAM(n));
        at += counts[i];
    }
    return group_ended(n, g, r, ncclGroupEnd(), "ncclBroadcast (allgatherv)",
                       err);
}

/* Point-to-point pairs in one group, as NCCL's documentation builds
 * all-to-all. */
ddph_status ddph__nccl_start_alltoall(ddph_nccl *n, ddph_nccl_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_err *err)
{
    ddph_status st = need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    size_t block = count * ddph__dtype_size(dtype);
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < g->size && in_group_ok(r); i++) {
        r = ncclSend((const char *)send + (size_t)i * block, count,
                     nccl_type(dtype), i, (ncclComm_t)g->nccl, STREAM(n));
        if (in_group_ok(r))
            r = ncclRecv((char *)recv + (size_t)i * block, count,
                         nccl_type(dtype), i, (ncclComm_t)g->nccl, STREAM(n));
    }
    return group_ended(n, g, r, ncclGroupEnd(), "ncclSend/ncclRecv (alltoall)",
                       err);
}

ddph_status ddph__nccl_wait(ddph_nccl *n, ddph_nccl_group *g, const char *what,
                            ddph_err *err)
{
    return wait_stream(n, g, what, err);
}

int ddph__nccl_idle(ddph_nccl *n)
{
    cudaError_t e = cudaStreamQuery(STREAM(n));
    if (e == cudaSuccess)
        return 1;
    if (e != cudaErrorNotReady)
        return -1; /* the wait names CUDA's error */
    (void)cudaGetLastError(); /* not a failure: see wait_stream */
    /* A communicator's asynchronous error: the stream will never drain,
     * and a hook's test must not learn of it only at timeout_s. */
    ncclResult_t async;
    return failed_comm(n, &async) ? -1 : 0;
}

ddph_status ddph__nccl_allreduce(ddph_nccl *n, ddph_nccl_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, ddph_redop op,
                                 ddph_err *err)
{
    ddph_status st =
        ddph__nccl_start_allreduce(n, g, buf, count, dtype, op, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "allreduce", err);
}

ddph_status ddph__nccl_allgather(ddph_nccl *n, ddph_nccl_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    ddph_status st =
        ddph__nccl_start_allgather(n, g, send, recv, count, dtype, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "allgather", err);
}

ddph_status ddph__nccl_allgatherv(ddph_nccl *n, ddph_nccl_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype,
                                  ddph_err *err)
{
    ddph_status st =
        ddph__nccl_start_allgatherv(n, g, send, recv, counts, dtype, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "allgatherv", err);
}

ddph_status ddph__nccl_alltoall(ddph_nccl *n, ddph_nccl_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, ddph_err *err)
{
    ddph_status st =
        ddph__nccl_start_alltoall(n, g, send, recv, count, dtype, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "alltoall", err);
}

ddph_status ddph__nccl_broadcast(ddph_nccl *n, ddph_nccl_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, int root,
                                 ddph_err *err)
{
    ddph_status st = need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    ncclResult_t r = ncclBroadcast(buf, buf, count, nccl_type(dtype), root,
                                   (ncclComm_t)g->nccl, STREAM(n));
    st = enqueued(n, g, r, "ncclBroadcast", err);
    return st != DDPH_OK ? st : wait_stream(n, g, "broadcast", err);
}

ddph_status ddph__nccl_reduce_scatter(ddph_nccl *n, ddph_nccl_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op, ddph_err *err)
{
    ddph_status st = need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    ncclResult_t r = ncclReduceScatter(send, recv, count, nccl_type(dtype),
                                       nccl_op(op), (ncclComm_t)g->nccl,
                                       STREAM(n));
    st = enqueued(n, g, r, "ncclReduceScatter", err);
    return st != DDPH_OK ? st : wait_stream(n, g, "reduce_scatter", err);
}

ddph_status ddph__nccl_split(ddph_nccl *n, ddph_nccl_group *parent, int color,
                             int key, ddph_nccl_group **out, ddph_err *err)
{
    const ddph_comm *host = &n->job.host;
    struct ddph_group *hg = NULL;
    ddph_status st =
        host->ops->split(host->self, parent->host, color, key, &hg, err);
    /* A negative colour leaves this rank without a group, but
     * ncclCommSplit is collective over the parent: it must still be
     * joined (with NCCL_SPLIT_NOCOLOR), or the other ranks wait in it for
     * ever.  Any other failure happened on every rank alike. */
    if (st != DDPH_OK && color >= 0)
        return st;
    ddph_err nerr;
    ddph_status nst = need_comm(parent, &nerr);
    ncclComm_t c = NULL;
    ddph_status split_st = DDPH_OK;
    if (nst == DDPH_OK) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t r = ncclCommSplit((ncclComm_t)parent->nccl,
                                       color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                                       key, &c, &config);
        /* NCCL runs the child's init as a job of the parent (init.cc's
         * ncclCommInitChildComm, group.cc): the parent answers
         * ncclInProgress until the child has connected, and a failure of
         * the child is set on the parent for good, so that NCCL refuses
         * the parent's later calls.  A split that fails or stalls thus
         * costs the parent too: settle() aborts it (which stops the
         * child's init), and the half-made child NCCL wrote into c is
         * aborted as well, freeing it. */
        double deadline = ddph__now() + n->timeout_s;
        ncclComm_t pc = (ncclComm_t)parent->nccl;
        split_st = settle(n, &pc, r == ncclSuccess ? ncclInProgress : r,
                          "ncclCommSplit", deadline, &nerr);
        parent->nccl = pc;
        if (split_st != DDPH_OK && c) {
            ncclCommAbort(c);
            c = NULL;
        }
        if (split_st != DDPH_OK && !pc) {
            ddph_err why = nerr; /* not formatted into itself */
            ddph__fail(&nerr, split_st,
                       "%s; NCCL ties a split to its parent, so the "
                       "parent's communicator (a %d-rank group) was "
                       "aborted too, and collectives on it now fail",
                       why.msg, parent->size);
        }
        if (split_st == DDPH_OK && color >= 0 && !c)
            split_st = ddph__fail(&nerr, DDPH_ERR_BACKEND,
                                  "ncclCommSplit settled without giving "
                                  "this rank its communicator (colour %d)",
                                  color);
        /* Settled parent: the child is ready; asked once more all the
         * same, and only the child is aborted should it fail. */
        if (split_st == DDPH_OK && c)
            split_st = settle(n, &c, ncclInProgress,
                              "ncclCommSplit (the new communicator)",
                              deadline, &nerr);
    }
    if (color < 0) {
        if (c)
            ncclCommAbort(c); /* NCCL gives none; never used */
        return st; /* the MPI side's "no group" error */
    }
    if (nst != DDPH_OK)
        return ddph__fail(err, nst, "%s", nerr.msg);
    if (split_st != DDPH_OK)
        return ddph__fail(err, split_st, "%s", nerr.msg);
    ddph_nccl_group *g = calloc(1, sizeof *g);
    if (!g) {
        ncclCommAbort(c);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    g->rank = hg->rank;
    g->size = hg->size;
    g->host = hg; /* stays owned by the host backend's list */
    g->nccl = c;
    g->next = n->groups;
    n->groups = g;
    *out = g;
    return DDPH_OK;
}

ddph_status ddph__nccl_intra_node(ddph_nccl *n, ddph_nccl_group **out,
                                  ddph_err *err)
{
    const ddph_comm *host = &n->job.host;
    struct ddph_group *node;
    ddph_status st = host->ops->intra_node(host->self, &node, err);
    if (st != DDPH_OK)
        return st;
    /* The node's color: the world rank of its first rank. */
    int64_t leader = n->world.rank;
    st = host->ops->allreduce(host->self, node, &leader, 1, DDPH_I64,
                              DDPH_MIN, err);
    if (st != DDPH_OK)
        return st;
    return ddph__nccl_split(n, &n->world, (int)leader, n->world.rank, out,
                            err);
}

/* ---- comm.h's table: the functions above, with the ddph_nccl as state -- */

static struct ddph_group *comm_world(void *self)
{
    return &((ddph_nccl *)self)->world.head;
}

/* A group the table handed out is the head of one of this backend's. */
static ddph_nccl_group *G(struct ddph_group *g)
{
    return (ddph_nccl_group *)g;
}

/* A group this backend made (st: how the making went), handed out as its
 * head.  Called after the making, as a statement of its own: as an
 * argument beside the call, g could be read before the call sets it. */
static ddph_status handed(ddph_status st, ddph_nccl_group *g,
                          struct ddph_group **out)
{
    *out = st == DDPH_OK ? &g->head : NULL;
    return st;
}

static ddph_status comm_split(void *self, struct ddph_group *parent,
                              int color, int key, struct ddph_group **out,
                              ddph_err *err)
{
    ddph_nccl_group *g = NULL;
    ddph_status st = ddph__nccl_split(self, G(parent), color, key, &g, err);
    return handed(st, g, out);
}

static ddph_status comm_intra_node(void *self, struct ddph_group **out,
                                   ddph_err *err)
{
    ddph_nccl_group *g = NULL;
    ddph_status st = ddph__nccl_intra_node(self, &g, err);
    return handed(st, g, out);
}

static ddph_status comm_allreduce(void *self, struct ddph_group *g, void *buf,
                                  size_t count, ddph_dtype dtype,
                                  ddph_redop op, ddph_err *err)
{
    return ddph__nccl_allreduce(self, G(g), buf, count, dtype, op, err);
}

static ddph_status comm_allgather(void *self, struct ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_err *err)
{
    return ddph__nccl_allgather(self, G(g), send, recv, count, dtype, err);
}

static ddph_status comm_allgatherv(void *self, struct ddph_group *g,
                                   const void *send, void *recv,
                                   const size_t *counts, ddph_dtype dtype,
                                   ddph_err *err)
{
    return ddph__nccl_allgatherv(self, G(g), send, recv, counts, dtype, err);
}

static ddph_status comm_broadcast(void *self, struct ddph_group *g, void *buf,
                                  size_t count, ddph_dtype dtype, int root,
                                  ddph_err *err)
{
    return ddph__nccl_broadcast(self, G(g), buf, count, dtype, root, err);
}

static ddph_status comm_reduce_scatter(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_redop op, ddph_err *err)
{
    return ddph__nccl_reduce_scatter(self, G(g), send, recv, count, dtype, op,
                                     err);
}

static ddph_status comm_alltoall(void *self, struct ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    return ddph__nccl_alltoall(self, G(g), send, recv, count, dtype, err);
}

/* The stream orders the nonblocking collectives: a request is its group
 * and name, for the wait's messages. */
static ddph_status comm_start_allreduce(void *self, struct ddph_group *g,
                                        void *buf, size_t count,
                                        ddph_dtype dtype, ddph_redop op,
                                        ddph_comm_op *out, ddph_err *err)
{
    (void)out;
    return ddph__nccl_start_allreduce(self, G(g), buf, count, dtype, op, err);
}

static ddph_status comm_start_allgather(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        size_t count, ddph_dtype dtype,
                                        ddph_comm_op *out, ddph_err *err)
{
    (void)out;
    return ddph__nccl_start_allgather(self, G(g), send, recv, count, dtype,
                                      err);
}

static ddph_status comm_start_allgatherv(void *self, struct ddph_group *g,
                                         const void *send, void *recv,
                                         const size_t *counts,
                                         ddph_dtype dtype, ddph_comm_op *out,
                                         ddph_err *err)
{
    (void)out;
    return ddph__nccl_start_allgatherv(self, G(g), send, recv, counts, dtype,
                                       err);
}

static ddph_status comm_start_alltoall(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_comm_op *out, ddph_err *err)
{
    (void)out;
    return ddph__nccl_start_alltoall(self, G(g), send, recv, count, dtype,
                                     err);
}

static ddph_status comm_wait(void *self, ddph_comm_op *op, ddph_err *err)
{
    return ddph__nccl_wait(self, G(op->group), op->what, err);
}

/* Whether op may still be running: the stream has work left, none of it
 * failed, and op's deadline has not passed.  Otherwise the wait reports
 * (and aborts) what is, at once. */
static int still_running(ddph_nccl *n, const ddph_comm_op *op)
{
    return ddph__nccl_idle(n) == 0 && ddph__now() - op->start <= n->timeout_s;
}

static ddph_status comm_test(void *self, ddph_comm_op *op, int *done,
                             ddph_err *err)
{
    /* The stream is idle: every request on it completed. */
    *done = 0;
    if (still_running(self, op))
        return DDPH_OK;
    *done = 1;
    return comm_wait(self, op, err);
}

static ddph_status comm_progress(void *self, ddph_comm_op *op, ddph_err *err)
{
    /* NCCL moves by itself. */
    if (ddph__nccl_idle(self) > 0 || still_running(self, op))
        return DDPH_OK;
    return comm_wait(self, op, err);
}

const ddph_comm_ops ddph__nccl_comm_ops = {
    .name = "nccl",
    .world = comm_world,
    .split = comm_split,
    .intra_node = comm_intra_node,
    .allreduce = comm_allreduce,
    .allgather = comm_allgather,
    .allgatherv = comm_allgatherv,
    .broadcast = comm_broadcast,
    .reduce_scatter = comm_reduce_scatter,
    .alltoall = comm_alltoall,
    .start_allreduce = comm_start_allreduce,
    .start_allgather = comm_start_allgather,
    .start_allgatherv = comm_start_allgatherv,
    .start_alltoall = comm_start_alltoall,
    .wait = comm_wait,
    .test = comm_test,
    .progress = comm_progress,
    /* The stream orders a rank's collectives; they are not fingerprinted. */
    .fingerprint = NULL,
    .fingerprint_settle = NULL,
};
