/* mpi_backend.c: the MPI backend as the core's tables: the job backend
 * (backend.h), the collectives and the control plane (comm.h).  Each
 * entry is the backend_mpi.h function of the same name, with the job's
 * ddph_mpi as its state. */
#include "build-config.h"

#include <stdlib.h>

#include "backends/backend.h"
#include "backends/mpi/backend_mpi.h"
#include "backends/mpi/shared_buckets.h"

/* A group the tables handed out is the head of one of this backend's. */
static ddph_mpi_group *G(struct ddph_group *g)
{
    return (ddph_mpi_group *)g;
}

/* This backend's state of a nonblocking collective, kept in the op. */
_Static_assert(sizeof(ddph_mpi_op) <= DDPH__COMM_OP_STATE,
               "ddph_mpi_op must fit in ddph_comm_op.state");

static ddph_mpi_op *OP(ddph_comm_op *op)
{
    return (ddph_mpi_op *)(void *)op->state;
}

/* A group this backend made (st: how the making went), handed out as its
 * head.  Called after the making, as a statement of its own: as an
 * argument beside the call, g could be read before the call sets it. */
static ddph_status handed(ddph_status st, ddph_mpi_group *g,
                          struct ddph_group **out)
{
    *out = st == DDPH_OK ? &g->head : NULL;
    return st;
}

static struct ddph_group *mpi_world(void *self)
{
    return &((ddph_mpi *)self)->world.head;
}

static ddph_status mpi_split(void *self, struct ddph_group *parent, int color,
                             int key, struct ddph_group **out, ddph_err *err)
{
    ddph_mpi_group *g = NULL;
    ddph_status st = ddph__mpi_split(self, G(parent), color, key, &g, err);
    return handed(st, g, out);
}

static ddph_status mpi_intra_node(void *self, struct ddph_group **out,
                                  ddph_err *err)
{
    ddph_mpi_group *g = NULL;
    ddph_status st = ddph__mpi_intra_node(self, &g, err);
    return handed(st, g, out);
}

static ddph_status mpi_allreduce(void *self, struct ddph_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, ddph_redop op,
                                 ddph_err *err)
{
    return ddph__mpi_allreduce(self, G(g), buf, count, dtype, op, err);
}

static ddph_status mpi_allgather(void *self, struct ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    return ddph__mpi_allgather(self, G(g), send, recv, count, dtype,
                               "allgather", err);
}

static ddph_status mpi_allgatherv(void *self, struct ddph_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype,
                                  ddph_err *err)
{
    return ddph__mpi_allgatherv(self, G(g), send, recv, counts, dtype, err);
}

static ddph_status mpi_broadcast(void *self, struct ddph_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, int root,
                                 ddph_err *err)
{
    return ddph__mpi_broadcast(self, G(g), buf, count, dtype, root, err);
}

static ddph_status mpi_reduce_scatter(void *self, struct ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op, ddph_err *err)
{
    return ddph__mpi_reduce_scatter(self, G(g), send, recv, count, dtype, op,
                                    err);
}

static ddph_status mpi_alltoall(void *self, struct ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, ddph_err *err)
{
    return ddph__mpi_alltoall(self, G(g), send, recv, count, dtype, err);
}

static ddph_status mpi_start_allreduce(void *self, struct ddph_group *g,
                                       void *buf, size_t count,
                                       ddph_dtype dtype, ddph_redop op,
                                       ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_allreduce(self, G(g), buf, count, dtype, op,
                                     OP(out), err);
}

static ddph_status mpi_start_allgather(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_allgather(self, G(g), send, recv, count, dtype,
                                     OP(out), err);
}

static ddph_status mpi_start_allgatherv(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        const size_t *counts, ddph_dtype dtype,
                                        ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_allgatherv(self, G(g), send, recv, counts, dtype,
                                      OP(out), err);
}

static ddph_status mpi_start_alltoall(void *self, struct ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_alltoall(self, G(g), send, recv, count, dtype,
                                    OP(out), err);
}

static ddph_status mpi_wait(void *self, ddph_comm_op *op, ddph_err *err)
{
    return ddph__mpi_op_wait(self, OP(op), err);
}

static ddph_status mpi_test(void *self, ddph_comm_op *op, int *done,
                            ddph_err *err)
{
    ddph_status st = ddph__mpi_op_test(self, OP(op), done, err);
    if (st != DDPH_OK)
        *done = 1;
    return st;
}

static ddph_status mpi_progress(void *self, ddph_comm_op *op, ddph_err *err)
{
    return ddph__mpi_op_progress(self, OP(op), err);
}

static ddph_status mpi_fingerprint(void *self, struct ddph_group *g,
                                   const char *what, ddph_dtype dtype,
                                   size_t count, const size_t *counts, int op,
                                   int root, int64_t model, int64_t iteration,
                                   int64_t bucket, int64_t offset,
                                   ddph_err *err)
{
    return ddph__mpi_fingerprint(self, G(g), what, dtype, count, counts, op,
                                 root, model, iteration, bucket, offset, err);
}

static ddph_status mpi_fingerprint_settle(void *self, ddph_err *err)
{
    return ddph__mpi_fingerprint_settle(self, err);
}

const ddph_comm_ops ddph__mpi_comm_ops = {
    .name = "mpi",
    .world = mpi_world,
    .split = mpi_split,
    .intra_node = mpi_intra_node,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .allgatherv = mpi_allgatherv,
    .broadcast = mpi_broadcast,
    .reduce_scatter = mpi_reduce_scatter,
    .alltoall = mpi_alltoall,
    .start_allreduce = mpi_start_allreduce,
    .start_allgather = mpi_start_allgather,
    .start_allgatherv = mpi_start_allgatherv,
    .start_alltoall = mpi_start_alltoall,
    .wait = mpi_wait,
    .test = mpi_test,
    .progress = mpi_progress,
    .fingerprint = mpi_fingerprint,
    .fingerprint_settle = mpi_fingerprint_settle,
};

/* ---- the control plane -------------------------------------------------- */

static ddph_status mpi_fault(void *self, ddph_err *err)
{
    return ddph__mpi_fault(self, err);
}

static int mpi_broken(void *self)
{
    return atomic_load(&((ddph_mpi *)self)->broken);
}

static void mpi_fail(void *self, ddph_status st, const char *msg)
{
    ddph__mpi_fail_job(self, st, msg);
}

static ddph_status mpi_agree(void *self, ddph_status local,
                             const char *local_msg, ddph_err *err)
{
    return ddph__mpi_agree(self, local, local_msg, err);
}

static ddph_status mpi_lane_groups(void *self, int n, struct ddph_group **out,
                                   ddph_err *err)
{
    ddph_mpi_group *lanes[DDPH__MAX_LANES] = {0};
    if (n < 1 || n > DDPH__MAX_LANES)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "rank %d: %d lanes asked (1 to %d)",
                          ((ddph_mpi *)self)->world.rank, n, DDPH__MAX_LANES);
    ddph_status st = ddph__mpi_lane_groups(self, n, lanes, err);
    for (int i = 0; i < n; i++)
        out[i] = st == DDPH_OK ? &lanes[i]->head : NULL;
    return st;
}

static ddph_status mpi_allreduce_i64(void *self, int64_t *v, size_t n,
                                     ddph_redop op, ddph_err *err)
{
    return ddph__mpi_allreduce_i64(self, v, n, op, err);
}

static ddph_status mpi_bcast_bytes(void *self, void *buf, size_t n, int root,
                                   ddph_err *err)
{
    return ddph__mpi_bcast_bytes(self, buf, n, root, err);
}

static ddph_status mpi_step_agree(void *self, struct ddph_group *const *groups,
                                  int n, const ddph_step_summary *s,
                                  ddph_err *err)
{
    ddph_mpi_group *lanes[DDPH__MAX_LANES];
    if (n < 0 || n > DDPH__MAX_LANES)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "rank %d: %d lanes to agree on (at most %d)",
                          ((ddph_mpi *)self)->world.rank, n, DDPH__MAX_LANES);
    for (int i = 0; i < n; i++)
        lanes[i] = G(groups[i]);
    return ddph__mpi_step_agree(self, lanes, n, s, err);
}

static int mpi_in_sync_step(void *self, int on)
{
    return atomic_exchange(&((ddph_mpi *)self)->in_sync_step, on);
}

static void mpi_step_synced(void *self)
{
    ddph_mpi *m = self;
    atomic_fetch_add(&m->syncs_done, 1);
    atomic_store(&m->in_sync_step, 0);
}

static int64_t mpi_syncs_done(void *self)
{
    return (int64_t)atomic_load(&((ddph_mpi *)self)->syncs_done);
}

static int64_t mpi_trainer_calls(void *self)
{
    return (int64_t)atomic_load(&((ddph_mpi *)self)->trainer_calls);
}

static void mpi_depart(void *self, int kind, const char *what)
{
    ddph__mpi_depart(self, kind, what);
}

static void mpi_closing(void *self)
{
    ddph__mpi_closing(self);
}

static void mpi_model_named(void *self, int64_t id, const char *name)
{
    ddph__mpi_model_named(self, id, name);
}

const ddph_control_ops ddph__mpi_control_ops = {
    .world = mpi_world,
    .fault = mpi_fault,
    .broken = mpi_broken,
    .fail = mpi_fail,
    .agree = mpi_agree,
    .lane_groups = mpi_lane_groups,
    .allreduce_i64 = mpi_allreduce_i64,
    .bcast_bytes = mpi_bcast_bytes,
    .step_agree = mpi_step_agree,
    .in_sync_step = mpi_in_sync_step,
    .step_synced = mpi_step_synced,
    .syncs_done = mpi_syncs_done,
    .trainer_calls = mpi_trainer_calls,
    .depart = mpi_depart,
    .closing = mpi_closing,
    .model_named = mpi_model_named,
};

/* ---- the job backend ---------------------------------------------------- */

static ddph_status mpi_open(const ddph_backend_args *a, void **state,
                            ddph_err *err)
{
    /* Never freed once MPI is up on a broken job: collectives abandoned
     * on the failure may still write into its requests (mpi_close). */
    ddph_mpi *m = calloc(1, sizeof *m);
    *state = m;
    if (!m)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st = ddph__mpi_init(m, a->argc, a->argv, a->timeout_s, err);
    m->check_collectives = a->check_collectives;
    return st;
}

static ddph_status mpi_find_host(void *self, int *host_rank, int *host_size,
                                 ddph_err *err)
{
    ddph_mpi *m = self;
    ddph_status st = ddph__mpi_find_node(m, err);
    *host_rank = m->node_rank;
    *host_size = m->node_size;
    return st;
}

static ddph_comm mpi_comm_of(void *self)
{
    return ddph__mpi_comm(self);
}

static ddph_control mpi_control_of(void *self)
{
    return ddph__mpi_control(self);
}

static struct ddph_group *mpi_trainer_group(void *self)
{
    return &((ddph_mpi *)self)->trainer.head;
}

static ddph_status mpi_trainer_call(void *self, const char *what,
                                    ddph_dtype dtype, size_t count, int op,
                                    int root, ddph_err *err)
{
    return ddph__mpi_trainer_call(self, what, dtype, count, op, root, err);
}

static ddph_status mpi_barrier(void *self, struct ddph_group *g,
                               const char *what, ddph_err *err)
{
    return ddph__mpi_barrier(self, G(g), what, err);
}

static ddph_status mpi_gather_bytes(void *self, const void *buf, size_t n,
                                    char **out, size_t *total, ddph_err *err)
{
    return ddph__mpi_gather_bytes(self, buf, n, out, total, err);
}

static ddph_status mpi_shared_open(void *self, size_t bytes, int wanted,
                                   ddph_shared_memory *out, char *why,
                                   size_t why_cap, int *failed, ddph_err *err)
{
    ddph_shared_segment *s = NULL;
    ddph_status st = ddph__shared_open(self, bytes, wanted, &s, why, why_cap,
                                       failed, err);
    out->handle = s;
    out->part = s ? ddph__shared_part(s) : NULL;
    return st;
}

static void mpi_shared_close(void *self, void *handle)
{
    ddph__shared_close(self, handle);
}

static int mpi_close_hazard(void *self, char *msg, size_t n)
{
    return ddph__mpi_finalize_hazard(self, msg, n);
}

static ddph_status mpi_leave(void *self, ddph_status local, ddph_status *job,
                             int *job_rank, ddph_err *err)
{
    return ddph__mpi_leave(self, local, job, job_rank, err);
}

static ddph_status mpi_close(void *self, ddph_err *err)
{
    ddph_mpi *m = self;
    if (!m)
        return DDPH_OK;
    int broken = atomic_load(&m->broken);
    ddph_status st = ddph__mpi_finalize(m, err);
    /* A broken job left requests pending into m (see mpi_open). */
    if (st == DDPH_OK && !broken)
        free(m);
    return st;
}

static void mpi_linger(void *self, double seconds)
{
    ddph__mpi_linger(self, seconds);
}

const ddph_backend_ops ddph__mpi_backend = {
    .version = DDPH__BACKEND_VERSION,
    .struct_size = sizeof(ddph_backend_ops),
    .name = "mpi",
    .open = mpi_open,
    .find_host = mpi_find_host,
    .comm = mpi_comm_of,
    .control = mpi_control_of,
    .trainer_group = mpi_trainer_group,
    .trainer_call = mpi_trainer_call,
    .barrier = mpi_barrier,
    .gather_bytes = mpi_gather_bytes,
    .shared_open = mpi_shared_open,
    .shared_close = mpi_shared_close,
    .close_hazard = mpi_close_hazard,
    .leave = mpi_leave,
    .close = mpi_close,
    .linger = mpi_linger,
};
