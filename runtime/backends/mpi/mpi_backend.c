/* mpi_backend.c: the MPI backend as the core's tables: the job backend
 * (backend.h) and the control plane (comm.h; the collectives' table is
 * mpi_collectives.c's).  Each entry is the backend_mpi.h function of the
 * same name, with the job's ddph_mpi as its state. */
#include "build-config.h"

#include <stdlib.h>

#include "backends/backend.h"
#include "backends/mpi/mpi_internal.h"
#include "backends/mpi/shared_buckets.h"

/* ---- the control plane -------------------------------------------------- */

static struct ddph_group *mpi_world(void *self)
{
    return &((ddph_mpi *)self)->world.head;
}

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

static int mpi_peer_closed(void *self, int rank, int64_t *after)
{
    return ddph__mpi_peer_closed(self, rank, after);
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
    .peer_closed = mpi_peer_closed,
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
