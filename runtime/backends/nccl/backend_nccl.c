/* backend_nccl.c: the collectives on GPU memory over NCCL, as comm.h's
 * table (ddph__nccl_comm_ops): enqueued on the communication stream,
 * waited for against timeout_s.  A new collective is a function here and
 * its line in the table.  Starting and ending the communicators is
 * nccl_init.c's. */
#include "build-config.h"

#include "backends/nccl/nccl_internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/nccl/cuda_ops.h"


ddph_status ddph__cuda_fail(ddph_err *err, int e, const char *what)
{
    return ddph__fail(err, DDPH_ERR_BACKEND, "%s failed: %s", what,
                      cudaGetErrorString((cudaError_t)e));
}

ddph_status ddph__nccl_fail(ddph_err *err, ncclResult_t r, const char *what)
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

ddph_status ddph__nccl_settle(ddph_nccl *n, ncclComm_t *comm, ncclResult_t r,
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
    return ddph__nccl_fail(err, r, what);
}

/* An enqueue on group g's communicator: settled against timeout_s. */
static ddph_status enqueued(ddph_nccl *n, ddph_nccl_group *g, ncclResult_t r,
                            const char *what, ddph_err *err)
{
    if (r == ncclSuccess)
        return DDPH_OK;
    ncclComm_t c = (ncclComm_t)g->nccl;
    ddph_status st = ddph__nccl_settle(n, &c, r, what, ddph__now() + n->timeout_s, err);
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

ddph_nccl_group *ddph__nccl_next_group(ddph_nccl *n, ddph_nccl_group *g)
{
    return g == &n->world ? n->groups : g->next;
}

/* The first communicator of n (the world, then the splits) whose
 * asynchronous error is set, or NULL: every communicator shares the one
 * stream, so a failure on any of them stops all the work queued behind
 * it, whichever group a wait names.  *result is that error. */
static ddph_nccl_group *failed_comm(ddph_nccl *n, ncclResult_t *result)
{
    for (ddph_nccl_group *g = &n->world; g; g = ddph__nccl_next_group(n, g)) {
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
                return ddph__nccl_fail(err, async, what);
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

ddph_status ddph__nccl_need_comm(ddph_nccl_group *g, ddph_err *err)
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
    ddph_status st = ddph__nccl_need_comm(g, err);
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
    ddph_status st = ddph__nccl_need_comm(g, err);
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
        return ddph__nccl_fail(err, last, what);
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
    ddph_status st = ddph__nccl_need_comm(g, err);
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
    ddph_status st = ddph__nccl_need_comm(g, err);
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

static ddph_status comm_allreduce(void *self, struct ddph_group *group,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  ddph_redop op, ddph_err *err)
{
    ddph_nccl *n = self;
    ddph_nccl_group *g = G(group);
    ddph_status st =
        ddph__nccl_start_allreduce(n, g, buf, count, dtype, op, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "allreduce", err);
}

static ddph_status comm_allgather(void *self, struct ddph_group *group,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_err *err)
{
    ddph_nccl *n = self;
    ddph_nccl_group *g = G(group);
    ddph_status st =
        ddph__nccl_start_allgather(n, g, send, recv, count, dtype, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "allgather", err);
}

static ddph_status comm_allgatherv(void *self, struct ddph_group *group,
                                   const void *send, void *recv,
                                   const size_t *counts, ddph_dtype dtype,
                                   ddph_err *err)
{
    ddph_nccl *n = self;
    ddph_nccl_group *g = G(group);
    ddph_status st =
        ddph__nccl_start_allgatherv(n, g, send, recv, counts, dtype, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "allgatherv", err);
}

static ddph_status comm_alltoall(void *self, struct ddph_group *group,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    ddph_nccl *n = self;
    ddph_nccl_group *g = G(group);
    ddph_status st =
        ddph__nccl_start_alltoall(n, g, send, recv, count, dtype, err);
    return st != DDPH_OK ? st : wait_stream(n, g, "alltoall", err);
}

static ddph_status comm_broadcast(void *self, struct ddph_group *group,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  int root, ddph_err *err)
{
    ddph_nccl *n = self;
    ddph_nccl_group *g = G(group);
    ddph_status st = ddph__nccl_need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    ncclResult_t r = ncclBroadcast(buf, buf, count, nccl_type(dtype), root,
                                   (ncclComm_t)g->nccl, STREAM(n));
    st = enqueued(n, g, r, "ncclBroadcast", err);
    return st != DDPH_OK ? st : wait_stream(n, g, "broadcast", err);
}

static ddph_status comm_reduce_scatter(void *self, struct ddph_group *group,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_redop op, ddph_err *err)
{
    ddph_nccl *n = self;
    ddph_nccl_group *g = G(group);
    ddph_status st = ddph__nccl_need_comm(g, err);
    if (st != DDPH_OK)
        return st;
    ncclResult_t r = ncclReduceScatter(send, recv, count, nccl_type(dtype),
                                       nccl_op(op), (ncclComm_t)g->nccl,
                                       STREAM(n));
    st = enqueued(n, g, r, "ncclReduceScatter", err);
    return st != DDPH_OK ? st : wait_stream(n, g, "reduce_scatter", err);
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
