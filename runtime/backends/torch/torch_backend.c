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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/torch/torch_internal.h"

_Static_assert((int)TPG_DATA_END == (int)DDPH__DEPART_DATA_END &&
                   (int)TPG_TRAINER_CALL == (int)DDPH__DEPART_TRAINER_CALL,
               "torch_pg.h's departures are comm.h's");

/* A gloo group of `size` ranks named `name`: made collectively.  A hook
 * group (`hooks`) with check_collectives gets a twin for the
 * fingerprints, so that each exchange waits on no data still moving on
 * the group (gloo runs a group's collectives from one queue). */
static ddph_status make_group(torch_state *s, torch_group *g, const char *name,
                              int rank, int size, int hooks, ddph_err *err)
{
    ddph_err e = {{0}};
    snprintf(g->name, sizeof g->name, "%s", name);
    g->head.rank = rank;
    g->head.size = size;
    ddph_status st = tpg_group_new(s->job, name, rank, size, &g->pg, E(e));
    g->checks = g->pg;
    if (st == DDPH_OK && hooks && s->check_collectives && size > 1) {
        char twin[sizeof g->name + 8];
        snprintf(twin, sizeof twin, "%s/checks", name);
        st = tpg_group_new(s->job, twin, rank, size, &g->checks, E(e));
    }
    if (st != DDPH_OK)
        tpg_fail(s->job, st, e.msg);
    return out_err(st, &e, err);
}

ddph_status ddph__torch_new_group(torch_state *s, const char *name, int rank,
                                  int size, torch_group **out, ddph_err *err)
{
    *out = NULL;
    torch_group *g = calloc(1, sizeof *g);
    if (!g)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st = make_group(s, g, name, rank, size, 1, err);
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

static ddph_status start(torch_state *s, tpg_group *pg, const tpg_args *a,
                         tpg_work **w, ddph_err *err)
{
    ddph_err e = {{0}};
    ddph_status st = tpg_start(s->job, pg, a, w, E(e));
    if (st != DDPH_OK && !tpg_broken(s->job))
        tpg_fail(s->job, st, e.msg); /* the peers would wait for us */
    return out_err(st, &e, err);
}

ddph_status ddph__torch_run(torch_state *s, torch_group *g, const tpg_args *a,
                            const char *what, ddph_err *err)
{
    return ddph__torch_run_on(s, g->pg, a, what, err);
}

ddph_status ddph__torch_run_on(torch_state *s, tpg_group *pg,
                               const tpg_args *a, const char *what,
                               ddph_err *err)
{
    tpg_work *w = NULL;
    double t0 = ddph__now();
    ddph_status st = start(s, pg, a, &w, err);
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
    return ddph__torch_run(self, G(g), &a, "allreduce", err);
}

static ddph_status torch_allgather(void *self, struct ddph_group *g,
                                   const void *send, void *recv, size_t count,
                                   ddph_dtype dtype, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLGATHER, .send = send, .buf = recv,
                  .count = count, .dtype = dtype};
    return ddph__torch_run(self, G(g), &a, "allgather", err);
}

static ddph_status torch_allgatherv(void *self, struct ddph_group *g,
                                    const void *send, void *recv,
                                    const size_t *counts, ddph_dtype dtype,
                                    ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLGATHERV, .send = send, .buf = recv,
                  .counts = counts, .dtype = dtype};
    return ddph__torch_run(self, G(g), &a, "allgatherv", err);
}

static ddph_status torch_broadcast(void *self, struct ddph_group *g,
                                   void *buf, size_t count, ddph_dtype dtype,
                                   int root, ddph_err *err)
{
    tpg_args a = {.kind = TPG_BROADCAST, .buf = buf, .count = count,
                  .dtype = dtype, .root = root};
    return ddph__torch_run(self, G(g), &a, "broadcast", err);
}

static ddph_status torch_reduce_scatter(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        size_t count, ddph_dtype dtype,
                                        ddph_redop op, ddph_err *err)
{
    tpg_args a = {.kind = TPG_REDUCE_SCATTER, .send = send, .buf = recv,
                  .count = count, .dtype = dtype, .op = op};
    return ddph__torch_run(self, G(g), &a, "reduce_scatter", err);
}

static ddph_status torch_alltoall(void *self, struct ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_err *err)
{
    tpg_args a = {.kind = TPG_ALLTOALL, .send = send, .buf = recv,
                  .count = count, .dtype = dtype};
    return ddph__torch_run(self, G(g), &a, "alltoall", err);
}

static ddph_status start_op(void *self, struct ddph_group *g,
                            const tpg_args *a, ddph_comm_op *out,
                            ddph_err *err)
{
    OP(out)->work = NULL;
    return start(self, G(g)->pg, a, &OP(out)->work, err);
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
    ddph_status st = ddph__torch_split_call(s, p, err);
    if (st == DDPH_OK)
        st = ddph__torch_run(s, p, &a, "split", err);
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
    st = ddph__torch_new_group(s, name, rank, size, &g, err);
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
    .fingerprint = ddph__torch_fingerprint, /* compared at the step's end */
    .fingerprint_settle = NULL,
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
    s->check_collectives = a->check_collectives;
    s->world.head = (struct ddph_group){0, 1}; /* until the job is joined */
    ddph_err e = {{0}};
    int rank = 0, size = 1;
    ddph_status st = tpg_job_open(a->timeout_s, a->activity_touch, &s->job, &rank,
                                  &size, E(e));
    if (st != DDPH_OK)
        return out_err(st, &e, err);
    /* The runtime's groups, each its own gloo group: their collectives
     * never interleave with one another's or the script's. */
    st = make_group(s, &s->world, "world", rank, size, 1, err);
    if (st == DDPH_OK)
        st = make_group(s, &s->control, "control", rank, size, 0, err);
    if (st == DDPH_OK)
        st = make_group(s, &s->trainer, "trainer", rank, size, 0, err);
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
    ddph_status st = ddph__torch_run(s, &s->control, &a, "finding the hosts", err);
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
    return (ddph_control){&ddph__torch_control_ops, self};
}

static struct ddph_group *torch_trainer_group(void *self)
{
    return &((torch_state *)self)->trainer.head;
}

static ddph_status torch_barrier(void *self, struct ddph_group *g,
                                 const char *what, ddph_err *err)
{
    tpg_args a = {.kind = TPG_BARRIER};
    return ddph__torch_run(self, G(g), &a, what, err);
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
    ddph_status st = sizes && counts ? ddph__torch_run(s, &s->control, &a,
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
        st = ddph__torch_run(s, &s->control, &v, "gathering the ranks' bytes", err);
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
        st = ddph__torch_leave(s, DDPH_OK, &job, &job_rank, err);
    }
    if (s->job && tpg_broken(s->job)) {
        /* No collective: gloo's threads may still wait on a dead peer,
         * in groups that stay allocated with the state. */
        st = ddph__torch_fault(s, err);
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
    .trainer_call = ddph__torch_trainer_call,
    .barrier = torch_barrier,
    .gather_bytes = torch_gather_bytes,
    .shared_open = NULL, /* buckets are never shared between ranks */
    .shared_close = NULL,
    .close_hazard = NULL,
    .leave = ddph__torch_leave,
    .close = torch_close,
    .linger = torch_linger,
};

__attribute__((visibility("default"))) const ddph_backend_ops *
ddph_backend_module_v1(void);
const ddph_backend_ops *ddph_backend_module_v1(void)
{
    return &torch_backend;
}
