/* torch_backend.c: the torch job backend's tables (backend.h, comm.h)
 * over gloo groups made from the store of the script's torch.distributed
 * process group (torch_pg.h).  A script launched by torchrun, or any
 * env:// launcher, runs ddphook's hooks without MPI.
 *
 * The runtime's traffic never meets the script's: the world, the control
 * plane's group, the trainer's and each lane's are gloo groups of their
 * own.  Every wait is bounded by timeout_s; a failing rank leaves a notice
 * in the store that its peers read while they wait (within ~20 ms). */
#include "build-config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/torch/torch_pg.h"
#include "support/config.h"

_Static_assert((int)TPG_DATA_END == (int)DDPH__DEPART_DATA_END &&
                   (int)TPG_TRAINER_CALL == (int)DDPH__DEPART_TRAINER_CALL,
               "torch_pg.h's departures are comm.h's");

/* A group as the tables hand it out: comm.h's head first. */
typedef struct torch_group {
    struct ddph_group head;
    tpg_group *pg;
    char name[96];   /* its rendezvous in the store */
    int made;        /* groups made from it so far: names the next */
    struct torch_group *next;
} torch_group;

typedef struct torch_state {
    torch_group world;   /* hooks' collectives (lane 0) */
    torch_group control; /* the runtime's own: agreements, leave */
    torch_group trainer; /* ddph_barrier, replica checks */
    torch_group *groups; /* lanes and splits, freed at close */
    pthread_mutex_t mu;  /* guards groups */
    tpg_job *job;
    double timeout_s;
    int host_index;      /* which host (its first rank), from find_host */
    int up;              /* open made every group */
    int left;            /* leave met every rank */
    atomic_int in_sync_step;
    atomic_llong syncs_done, trainer_calls;
} torch_state;

/* This backend's state of a nonblocking collective, kept in the op. */
typedef struct torch_op {
    tpg_work *work;
} torch_op;
_Static_assert(sizeof(torch_op) <= DDPH__COMM_OP_STATE,
               "torch_op must fit in ddph_comm_op.state");

static torch_op *OP(ddph_comm_op *op)
{
    return (torch_op *)(void *)op->state;
}

static torch_group *G(struct ddph_group *g)
{
    return (torch_group *)g;
}

/* A torch_pg.h call's message into err (which may be NULL). */
#define E(e) (e).msg, sizeof (e).msg
static ddph_status out_err(ddph_status st, const ddph_err *e, ddph_err *err)
{
    return st == DDPH_OK ? st : ddph__fail(err, st, "%s", e->msg);
}

static void publish(torch_state *s)
{
    tpg_set_progress(s->job, atomic_load(&s->in_sync_step),
                     (int64_t)atomic_load(&s->syncs_done),
                     (int64_t)atomic_load(&s->trainer_calls));
}

/* A gloo group of `size` ranks named `name`: made collectively. */
static ddph_status make_group(torch_state *s, torch_group *g, const char *name,
                              int rank, int size, ddph_err *err)
{
    ddph_err e = {{0}};
    snprintf(g->name, sizeof g->name, "%s", name);
    g->head.rank = rank;
    g->head.size = size;
    ddph_status st = tpg_group_new(s->job, name, rank, size, &g->pg, E(e));
    if (st != DDPH_OK)
        tpg_fail(s->job, st, e.msg);
    return out_err(st, &e, err);
}

static ddph_status new_group(torch_state *s, const char *name, int rank,
                             int size, torch_group **out, ddph_err *err)
{
    *out = NULL;
    torch_group *g = calloc(1, sizeof *g);
    if (!g)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st = make_group(s, g, name, rank, size, err);
    if (st != DDPH_OK) {
        free(g);
        return st;
    }
    pthread_mutex_lock(&s->mu);
    g->next = s->groups;
    s->groups = g;
    pthread_mutex_unlock(&s->mu);
    *out = g;
    return DDPH_OK;
}

/* ---- collectives -------------------------------------------------------- */

static ddph_status start(torch_state *s, torch_group *g, const tpg_args *a,
                         tpg_work **w, ddph_err *err)
{
    ddph_err e = {{0}};
    ddph_status st = tpg_start(s->job, g->pg, a, w, E(e));
    if (st != DDPH_OK && !tpg_broken(s->job))
        tpg_fail(s->job, st, e.msg); /* the peers would wait for us */
    return out_err(st, &e, err);
}

/* One collective, to its end within timeout_s. */
static ddph_status run(torch_state *s, torch_group *g, const tpg_args *a,
                       const char *what, ddph_err *err)
{
    tpg_work *w = NULL;
    double t0 = ddph__now();
    ddph_status st = start(s, g, a, &w, err);
    if (st != DDPH_OK)
        return st;
    if (!w)
        return DDPH_OK; /* nothing to move */
    ddph_err e = {{0}};
    st = tpg_wait(s->job, w, what, t0 + s->timeout_s, E(e));
    return out_err(st, &e, err);
}

static struct ddph_group *torch_world(void *self)
{
    return &((torch_state *)self)->world.head;
}

static ddph_status torch_allreduce(void *self, struct ddph_group *g, void *buf,
                                   size_t count, ddph_dtype dtype,
                                   ddph_redop op, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLREDUCE, .buf = buf, .count = count,
                  .dtype = dtype, .op = op};
    return run(self, G(g), &a, "allreduce", err);
}

static ddph_status torch_allgather(void *self, struct ddph_group *g,
                                   const void *send, void *recv, size_t count,
                                   ddph_dtype dtype, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLGATHER, .send = send, .buf = recv,
                  .count = count, .dtype = dtype};
    return run(self, G(g), &a, "allgather", err);
}

static ddph_status torch_allgatherv(void *self, struct ddph_group *g,
                                    const void *send, void *recv,
                                    const size_t *counts, ddph_dtype dtype,
                                    ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLGATHERV, .send = send, .buf = recv,
                  .counts = counts, .dtype = dtype};
    return run(self, G(g), &a, "allgatherv", err);
}

static ddph_status torch_broadcast(void *self, struct ddph_group *g,
                                   void *buf, size_t count, ddph_dtype dtype,
                                   int root, ddph_err *err)
{
    tpg_args a = {.kind = TPG_BROADCAST, .buf = buf, .count = count,
                  .dtype = dtype, .root = root};
    return run(self, G(g), &a, "broadcast", err);
}

static ddph_status torch_reduce_scatter(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        size_t count, ddph_dtype dtype,
                                        ddph_redop op, ddph_err *err)
{
    tpg_args a = {.kind = TPG_REDUCE_SCATTER, .send = send, .buf = recv,
                  .count = count, .dtype = dtype, .op = op};
    return run(self, G(g), &a, "reduce_scatter", err);
}

static ddph_status torch_alltoall(void *self, struct ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLTOALL, .send = send, .buf = recv,
                  .count = count, .dtype = dtype};
    return run(self, G(g), &a, "alltoall", err);
}

static ddph_status start_op(void *self, struct ddph_group *g,
                            const tpg_args *a, ddph_comm_op *out,
                            ddph_err *err)
{
    OP(out)->work = NULL;
    return start(self, G(g), a, &OP(out)->work, err);
}

static ddph_status torch_start_allreduce(void *self, struct ddph_group *g,
                                         void *buf, size_t count,
                                         ddph_dtype dtype, ddph_redop op,
                                         ddph_comm_op *out, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLREDUCE, .buf = buf, .count = count,
                  .dtype = dtype, .op = op};
    return start_op(self, g, &a, out, err);
}

static ddph_status torch_start_allgather(void *self, struct ddph_group *g,
                                         const void *send, void *recv,
                                         size_t count, ddph_dtype dtype,
                                         ddph_comm_op *out, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLGATHER, .send = send, .buf = recv,
                  .count = count, .dtype = dtype};
    return start_op(self, g, &a, out, err);
}

static ddph_status torch_start_allgatherv(void *self, struct ddph_group *g,
                                          const void *send, void *recv,
                                          const size_t *counts,
                                          ddph_dtype dtype, ddph_comm_op *out,
                                          ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLGATHERV, .send = send, .buf = recv,
                  .counts = counts, .dtype = dtype};
    return start_op(self, g, &a, out, err);
}

static ddph_status torch_start_alltoall(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        size_t count, ddph_dtype dtype,
                                        ddph_comm_op *out, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLTOALL, .send = send, .buf = recv,
                  .count = count, .dtype = dtype};
    return start_op(self, g, &a, out, err);
}

static double deadline(torch_state *s, const ddph_comm_op *op)
{
    return op->start + s->timeout_s;
}

static ddph_status torch_wait(void *self, ddph_comm_op *op, ddph_err *err)
{
    torch_state *s = self;
    ddph_err e = {{0}};
    tpg_work *w = OP(op)->work;
    OP(op)->work = NULL;
    ddph_status st =
        w ? tpg_wait(s->job, w, op->what, deadline(s, op), E(e)) : DDPH_OK;
    return out_err(st, &e, err);
}

static ddph_status torch_test(void *self, ddph_comm_op *op, int *done,
                              ddph_err *err)
{
    torch_state *s = self;
    ddph_err e = {{0}};
    *done = 1;
    if (!OP(op)->work)
        return DDPH_OK;
    ddph_status st = tpg_test(s->job, OP(op)->work, op->what,
                              deadline(s, op), done, E(e));
    if (*done)
        OP(op)->work = NULL;
    return out_err(st, &e, err);
}

static ddph_status torch_progress(void *self, ddph_comm_op *op, ddph_err *err)
{
    torch_state *s = self;
    ddph_err e = {{0}};
    ddph_status st = OP(op)->work ? tpg_progress(s->job, OP(op)->work,
                                                 op->what, deadline(s, op),
                                                 E(e))
                                  : DDPH_OK;
    return out_err(st, &e, err);
}

/* ---- groups: splits and hosts ------------------------------------------ */

/* Collective over parent: the ranks of the same color form a group,
 * ordered by key then parent rank (MPI_Comm_split's rule); a negative
 * color makes none (*out NULL). */
static ddph_status torch_split(void *self, struct ddph_group *parent,
                               int color, int key, struct ddph_group **out,
                               ddph_err *err)
{
    torch_state *s = self;
    torch_group *p = G(parent);
    *out = NULL;
    int n = p->head.size;
    int64_t *all = calloc((size_t)n * 2, sizeof *all);
    if (!all)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    int64_t mine[2] = {color, key};
    tpg_args a = {.kind = TPG_ALLGATHER, .send = mine, .buf = all,
                  .count = 2, .dtype = DDPH_I64};
    ddph_status st = run(s, p, &a, "split", err);
    int rank = 0, size = 0;
    for (int r = 0; st == DDPH_OK && r < n; r++) {
        if (all[2 * r] != color)
            continue;
        size++;
        if (all[2 * r + 1] < key || (all[2 * r + 1] == key && r < p->head.rank))
            rank++;
    }
    free(all);
    int made = p->made++; /* every rank of parent counts the same splits */
    if (st != DDPH_OK || color < 0)
        return st;
    char name[96];
    snprintf(name, sizeof name, "%.40s/%d/%d", p->name, made, color);
    torch_group *g = NULL;
    st = new_group(s, name, rank, size, &g, err);
    *out = g ? &g->head : NULL;
    return st;
}

static ddph_status torch_intra_node(void *self, struct ddph_group **out,
                                    ddph_err *err)
{
    torch_state *s = self;
    return torch_split(self, &s->world.head, s->host_index,
                       s->world.head.rank, out, err);
}

/* ---- the control plane -------------------------------------------------- */

static ddph_status torch_fault(void *self, ddph_err *err)
{
    ddph_err e = {{0}};
    return out_err(tpg_fault(((torch_state *)self)->job, E(e)), &e, err);
}

static int torch_broken(void *self)
{
    return tpg_broken(((torch_state *)self)->job);
}

static void torch_fail(void *self, ddph_status st, const char *msg)
{
    tpg_fail(((torch_state *)self)->job, st, msg);
}

static ddph_status torch_allreduce_i64(void *self, int64_t *v, size_t n,
                                       ddph_redop op, ddph_err *err)
{
    torch_state *s = self;
    tpg_args a = {.kind = TPG_ALLREDUCE, .buf = v, .count = n,
                  .dtype = DDPH_I64, .op = op};
    return run(s, &s->control, &a, "the runtime's allreduce", err);
}

static ddph_status torch_bcast_bytes(void *self, void *buf, size_t n, int root,
                                     ddph_err *err)
{
    torch_state *s = self;
    tpg_args a = {.kind = TPG_BROADCAST, .buf = buf, .count = n,
                  .dtype = DDPH_U8, .root = root};
    return run(s, &s->control, &a, "the runtime's broadcast", err);
}

/* Every rank's outcome: the lowest failing rank's, with its message. */
static ddph_status torch_agree(void *self, ddph_status local,
                               const char *local_msg, ddph_err *err)
{
    torch_state *s = self;
    struct {
        int32_t status;
        char msg[1024];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    outcome.status = (int32_t)local;
    snprintf(outcome.msg, sizeof outcome.msg, "%s",
             local != DDPH_OK && local_msg ? local_msg : "");
    int size = s->world.head.size, rank = s->world.head.rank;
    int64_t first = local != DDPH_OK ? rank : size;
    ddph_status st = torch_allreduce_i64(s, &first, 1, DDPH_MIN, err);
    if (st != DDPH_OK || first == size)
        return st;
    st = torch_bcast_bytes(s, &outcome, sizeof outcome, (int)first, err);
    if (st != DDPH_OK)
        return st;
    outcome.msg[sizeof outcome.msg - 1] = '\0';
    if (first == rank)
        return ddph__fail(err, local, "%s", outcome.msg);
    return ddph__fail(err, (ddph_status)outcome.status, "rank %lld failed: %s",
                      (long long)first, outcome.msg);
}

/* out[0] the world, out[1..n-1] new groups (each call makes its own, as
 * the MPI backend duplicates the world). */
static ddph_status torch_lane_groups(void *self, int n,
                                     struct ddph_group **out, ddph_err *err)
{
    torch_state *s = self;
    if (n < 1 || n > DDPH__MAX_LANES)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "rank %d: %d lanes asked (1 to %d)",
                          s->world.head.rank, n, DDPH__MAX_LANES);
    int made = s->world.made++;
    out[0] = &s->world.head;
    ddph_status st = DDPH_OK;
    for (int i = 1; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "lanes/%d/%d", made, i);
        torch_group *g = NULL;
        if (st == DDPH_OK)
            st = new_group(s, name, s->world.head.rank, s->world.head.size,
                           &g, err);
        out[i] = g ? &g->head : NULL;
    }
    return st;
}

/* The end-of-step agreement (with check_collectives): on each lane, every
 * rank's summary, compared with rank 0's.  Under join the passes may
 * differ (a joined rank's shadow step): they are left out. */
enum { SUMMARY_FIELDS = 6 };
static const char *const summary_names[SUMMARY_FIELDS] = {
    "models stepped", "hooks (digest)", "trainer calls",
    "first model's iteration", "first model", "backward passes"};

static ddph_status torch_step_agree(void *self,
                                    struct ddph_group *const *groups, int n,
                                    const ddph_step_summary *sum,
                                    ddph_err *err)
{
    torch_state *s = self;
    int plain = sum->join_role == DDPH__STEP_PLAIN;
    const int64_t mine[SUMMARY_FIELDS] = {
        sum->models,
        plain ? sum->digest ^ sum->passes_digest : sum->digest,
        sum->trainer_calls, sum->iteration, sum->first_model,
        plain ? sum->passes : -1};
    ddph_status st = DDPH_OK;
    for (int i = 0; i < n && st == DDPH_OK; i++) {
        torch_group *g = G(groups[i]);
        int size = g->head.size;
        int64_t *all = calloc((size_t)size * SUMMARY_FIELDS, sizeof *all);
        if (!all)
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        tpg_args a = {.kind = TPG_ALLGATHER, .send = mine, .buf = all,
                      .count = SUMMARY_FIELDS, .dtype = DDPH_I64};
        st = run(s, g, &a, "the end-of-step agreement", err);
        for (int r = 1; st == DDPH_OK && r < size; r++)
            for (int f = 0; f < SUMMARY_FIELDS; f++)
                if (all[r * SUMMARY_FIELDS + f] != all[f]) {
                    st = ddph__fail(err, DDPH_ERR_MISMATCH,
                                    "the ranks' steps differ: rank %d's %s "
                                    "is %lld, rank 0's %lld",
                                    r, summary_names[f],
                                    (long long)all[r * SUMMARY_FIELDS + f],
                                    (long long)all[f]);
                    tpg_fail(s->job, st, err ? err->msg : "steps differ");
                    break;
                }
        free(all);
    }
    return st;
}

static int torch_in_sync_step(void *self, int on)
{
    torch_state *s = self;
    int was = atomic_exchange(&s->in_sync_step, on);
    publish(s);
    return was;
}

static void torch_step_synced(void *self)
{
    torch_state *s = self;
    atomic_fetch_add(&s->syncs_done, 1);
    atomic_store(&s->in_sync_step, 0);
    publish(s);
}

static int64_t torch_syncs_done(void *self)
{
    return (int64_t)atomic_load(&((torch_state *)self)->syncs_done);
}

static int64_t torch_trainer_calls(void *self)
{
    return (int64_t)atomic_load(&((torch_state *)self)->trainer_calls);
}

static void torch_depart(void *self, int kind, const char *what)
{
    torch_state *s = self;
    if (kind == DDPH__DEPART_TRAINER_CALL)
        atomic_fetch_add(&s->trainer_calls, 1);
    publish(s);
    tpg_notify_leaving(s->job, kind, what, torch_syncs_done(s),
                       torch_trainer_calls(s));
}

static void torch_closing(void *self)
{
    torch_state *s = self;
    tpg_notify_leaving(s->job, TPG_CLOSED, "", torch_syncs_done(s),
                       torch_trainer_calls(s));
}

static void torch_model_named(void *self, int64_t id, const char *name)
{
    (void)self; /* named in fingerprints, which this backend has none of */
    (void)id;
    (void)name;
}

static const ddph_comm_ops torch_comm_ops = {
    .name = "torch",
    .world = torch_world,
    .split = torch_split,
    .intra_node = torch_intra_node,
    .allreduce = torch_allreduce,
    .allgather = torch_allgather,
    .allgatherv = torch_allgatherv,
    .broadcast = torch_broadcast,
    .reduce_scatter = torch_reduce_scatter,
    .alltoall = torch_alltoall,
    .start_allreduce = torch_start_allreduce,
    .start_allgather = torch_start_allgather,
    .start_allgatherv = torch_start_allgatherv,
    .start_alltoall = torch_start_alltoall,
    .wait = torch_wait,
    .test = torch_test,
    .progress = torch_progress,
    .fingerprint = NULL, /* the end-of-step agreement compares the steps */
    .fingerprint_settle = NULL,
};

static const ddph_control_ops torch_control_ops = {
    .world = torch_world,
    .fault = torch_fault,
    .broken = torch_broken,
    .fail = torch_fail,
    .agree = torch_agree,
    .lane_groups = torch_lane_groups,
    .allreduce_i64 = torch_allreduce_i64,
    .bcast_bytes = torch_bcast_bytes,
    .step_agree = torch_step_agree,
    .in_sync_step = torch_in_sync_step,
    .step_synced = torch_step_synced,
    .syncs_done = torch_syncs_done,
    .trainer_calls = torch_trainer_calls,
    .depart = torch_depart,
    .closing = torch_closing,
    .model_named = torch_model_named,
};

/* ---- the job backend ---------------------------------------------------- */

static ddph_status torch_open(const ddph_backend_args *a, void **state,
                              ddph_err *err)
{
    torch_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    s->timeout_s = a->timeout_s;
    s->world.head = (struct ddph_group){0, 1}; /* until the job is joined */
    ddph_err e = {{0}};
    int rank = 0, size = 1;
    ddph_status st = tpg_job_open(a->timeout_s, &s->job, &rank, &size, E(e));
    if (st != DDPH_OK)
        return out_err(st, &e, err);
    /* The runtime's groups, each its own gloo group: their collectives
     * never interleave with one another's or the script's. */
    st = make_group(s, &s->world, "world", rank, size, err);
    if (st == DDPH_OK)
        st = make_group(s, &s->control, "control", rank, size, err);
    if (st == DDPH_OK)
        st = make_group(s, &s->trainer, "trainer", rank, size, err);
    if (st != DDPH_OK)
        s->world.head = (struct ddph_group){0, 1};
    s->up = st == DDPH_OK;
    return st;
}

enum { HOST_NAME_BYTES = 256 };

/* Every rank's host name, compared: this rank's index among its host's. */
static ddph_status torch_find_host(void *self, int *host_rank, int *host_size,
                                   ddph_err *err)
{
    torch_state *s = self;
    int rank = s->world.head.rank, size = s->world.head.size;
    char mine[HOST_NAME_BYTES] = {0};
    if (gethostname(mine, sizeof mine - 1) != 0)
        snprintf(mine, sizeof mine, "(unknown host)");
    char *all = calloc((size_t)size, HOST_NAME_BYTES);
    if (!all)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    tpg_args a = {.kind = TPG_ALLGATHER, .send = mine, .buf = all,
                  .count = HOST_NAME_BYTES, .dtype = DDPH_U8};
    ddph_status st = run(s, &s->control, &a, "finding the hosts", err);
    *host_rank = 0;
    *host_size = 1;
    if (st == DDPH_OK) {
        *host_size = 0;
        s->host_index = -1;
        for (int r = 0; r < size; r++) {
            if (strncmp(all + (size_t)r * HOST_NAME_BYTES, mine,
                        HOST_NAME_BYTES) != 0)
                continue;
            if (s->host_index < 0)
                s->host_index = r;
            *host_rank += r < rank;
            ++*host_size;
        }
    }
    free(all);
    return st;
}

static ddph_comm torch_comm_of(void *self)
{
    return (ddph_comm){&torch_comm_ops, self};
}

static ddph_control torch_control_of(void *self)
{
    return (ddph_control){&torch_control_ops, self};
}

static struct ddph_group *torch_trainer_group(void *self)
{
    return &((torch_state *)self)->trainer.head;
}

static ddph_status torch_barrier(void *self, struct ddph_group *g,
                                 const char *what, ddph_err *err)
{
    tpg_args a = {.kind = TPG_BARRIER};
    return run(self, G(g), &a, what, err);
}

static ddph_status torch_gather_bytes(void *self, const void *buf, size_t n,
                                      char **out, size_t *total, ddph_err *err)
{
    torch_state *s = self;
    int size = s->world.head.size;
    *out = NULL;
    *total = 0;
    int64_t *sizes = calloc((size_t)size, sizeof *sizes);
    size_t *counts = calloc((size_t)size, sizeof *counts);
    int64_t mine = (int64_t)n;
    tpg_args a = {.kind = TPG_ALLGATHER, .send = &mine, .buf = sizes,
                  .count = 1, .dtype = DDPH_I64};
    ddph_status st = sizes && counts ? run(s, &s->control, &a,
                                           "gathering the ranks' bytes", err)
                                     : ddph__fail(err, DDPH_ERR_NOMEM,
                                                  "out of memory");
    size_t sum = 0;
    for (int r = 0; st == DDPH_OK && r < size; r++)
        sum += counts[r] = (size_t)sizes[r];
    char *all = st == DDPH_OK ? malloc(sum ? sum : 1) : NULL;
    if (st == DDPH_OK && !all)
        st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    tpg_args v = {.kind = TPG_ALLGATHERV, .send = buf, .buf = all,
                  .counts = counts, .dtype = DDPH_U8};
    if (st == DDPH_OK)
        st = run(s, &s->control, &v, "gathering the ranks' bytes", err);
    if (st == DDPH_OK && s->world.head.rank == 0) {
        *out = all;
        *total = sum;
    } else if (st == DDPH_OK) {
        free(all); /* (a failed gather's may still be written by gloo) */
    }
    free(sizes);
    free(counts);
    return st;
}

/* The job's last meeting, on the control group: the lowest rank that
 * reports a failure, and its status. */
static ddph_status torch_leave(void *self, ddph_status local,
                               ddph_status *job, int *job_rank, ddph_err *err)
{
    torch_state *s = self;
    int rank = s->world.head.rank, size = s->world.head.size;
    *job = DDPH_OK;
    *job_rank = -1;
    ddph_status st = torch_fault(s, err);
    int64_t first = local != DDPH_OK ? rank : size;
    if (st == DDPH_OK)
        st = torch_allreduce_i64(s, &first, 1, DDPH_MIN, err);
    int32_t status = (int32_t)local;
    if (st == DDPH_OK && first < size)
        st = torch_bcast_bytes(s, &status, sizeof status, (int)first, err);
    if (st == DDPH_OK && first < size) {
        *job = (ddph_status)status;
        *job_rank = (int)first;
    }
    if (st == DDPH_OK) {
        s->left = 1;
    } else if (!tpg_broken(s->job)) {
        char msg[DDPH__ERR_LEN + 32];
        snprintf(msg, sizeof msg, "rank %d: %s", rank, err ? err->msg : "");
        tpg_fail(s->job, st, msg);
    }
    return st;
}

/* Notices are in the store as soon as they are posted, but the store
 * lives in one process: staying alive is what keeps them readable. */
static void torch_linger(void *self, double seconds)
{
    (void)self;
    struct timespec ts = {(time_t)seconds,
                          (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

/* How long rank 0 of a failed job stays (ten of its peers' polls). */
#define STORE_HOST_LINGER_S 0.25

static ddph_status torch_close(void *self, ddph_err *err)
{
    torch_state *s = self;
    if (!s)
        return DDPH_OK;
    ddph_status st = DDPH_OK;
    if (s->up && !s->left && !tpg_broken(s->job)) {
        ddph_status job;
        int job_rank;
        st = torch_leave(s, DDPH_OK, &job, &job_rank, err);
    }
    if (s->job && tpg_broken(s->job)) {
        /* No collective: gloo's threads may still wait on a dead peer,
         * in groups that stay allocated with the state. */
        st = torch_fault(s, err);
        /* Under an env:// launcher rank 0's process serves the store:
         * it stays until its peers have read the notices (a few polls). */
        if (s->world.head.rank == 0)
            torch_linger(s, STORE_HOST_LINGER_S);
        tpg_job_free(s->job, 1);
        return st;
    }
    tpg_job_free(s->job, 0);
    for (torch_group *g = s->groups, *next; g; g = next) {
        next = g->next;
        free(g);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
    return st;
}


static const ddph_backend_ops torch_backend = {
    .version = DDPH__BACKEND_VERSION,
    .struct_size = sizeof(ddph_backend_ops),
    .name = "torch",
    .open = torch_open,
    .find_host = torch_find_host,
    .comm = torch_comm_of,
    .control = torch_control_of,
    .trainer_group = torch_trainer_group,
    .trainer_call = NULL, /* the trainer's calls are not compared */
    .barrier = torch_barrier,
    .gather_bytes = torch_gather_bytes,
    .shared_open = NULL, /* buckets are never shared between ranks */
    .shared_close = NULL,
    .close_hazard = NULL,
    .leave = torch_leave,
    .close = torch_close,
    .linger = torch_linger,
};

__attribute__((visibility("default"))) const ddph_backend_ops *
ddph_backend_module_v1(void);
const ddph_backend_ops *ddph_backend_module_v1(void)
{
    return &torch_backend;
}
