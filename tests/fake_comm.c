/* fake_comm.c: see fake_comm.h. */
#include "build-config.h"

#include "fake_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A rank's view of one group: the world (lane 0) or a lane's duplicate. */
typedef struct fake_group {
    struct ddph_group g; /* first: the tables are handed &g */
    int lane;
} fake_group;

typedef struct fake_rank {
    fake_world *w;
    int rank;
    fake_group lanes[FAKE_COMM_MAX_LANES];
    int64_t calls;
    fake_call log[FAKE_COMM_LOG];
    int64_t fail_nth; /* -1: none planted */
    ddph_status fail_status;
} fake_rank;

/* Where the ranks of one group meet: the inputs they put aside, and a
 * barrier whose generation counts the meetings. */
typedef struct meeting {
    int arrived;
    uint64_t generation;
    const void **in;
} meeting;

struct fake_world {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    meeting meet[FAKE_COMM_MAX_LANES];
    ddph_status broken;
    char why[DDPH__ERR_LEN];
    fake_rank *ranks;
    /* Inputs of collectives that failed, which a peer may still have been
     * reading: freed with the world, when every rank's thread is done. */
    struct abandoned {
        struct abandoned *next;
        _Alignas(max_align_t) unsigned char data[];
    } *abandoned;
};

fake_world *fake_world_new(int size)
{
    if (size < 1 || size > FAKE_COMM_MAX_RANKS)
        return NULL;
    fake_world *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->size = size;
    w->ranks = calloc((size_t)size, sizeof *w->ranks);
    int ok = w->ranks != NULL;
    for (int l = 0; l < FAKE_COMM_MAX_LANES; l++)
        ok = ok && (w->meet[l].in = calloc((size_t)size, sizeof(void *)));
    if (!ok) {
        fake_world_free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int r = 0; r < size; r++) {
        fake_rank *fr = &w->ranks[r];
        *fr = (fake_rank){.w = w, .rank = r, .fail_nth = -1};
        for (int l = 0; l < FAKE_COMM_MAX_LANES; l++) {
            fr->lanes[l].lane = l;
            fr->lanes[l].g.rank = r;
            fr->lanes[l].g.size = size;
        }
    }
    return w;
}

void fake_world_free(fake_world *w)
{
    if (!w)
        return;
    if (w->ranks) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    for (int l = 0; l < FAKE_COMM_MAX_LANES; l++)
        free(w->meet[l].in);
    while (w->abandoned) {
        struct abandoned *next = w->abandoned->next;
        free(w->abandoned);
        w->abandoned = next;
    }
    free(w->ranks);
    free(w);
}

/* With w->mu held: the job breaks (the first failure stays). */
static void break_locked(fake_world *w, ddph_status st, const char *msg)
{
    if (w->broken != DDPH_OK)
        return;
    w->broken = st;
    snprintf(w->why, sizeof w->why, "%s", msg);
    pthread_cond_broadcast(&w->cv);
}

static void break_job(fake_world *w, ddph_status st, const char *msg)
{
    pthread_mutex_lock(&w->mu);
    break_locked(w, st, msg);
    pthread_mutex_unlock(&w->mu);
}

static ddph_status broken_status(fake_world *w, ddph_err *err)
{
    pthread_mutex_lock(&w->mu);
    ddph_status st = w->broken;
    if (st != DDPH_OK)
        ddph__fail(err, st, "%s", w->why);
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* Rank r waits until every rank of the group has come (DDPH_OK), the job
 * breaks, or FAKE_COMM_WAIT_S passes (the job breaks, DDPH_ERR_TIMEOUT). */
static ddph_status meet(fake_rank *r, int lane, const char *what,
                        ddph_err *err)
{
    fake_world *w = r->w;
    meeting *m = &w->meet[lane];
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)FAKE_COMM_WAIT_S;
    pthread_mutex_lock(&w->mu);
    uint64_t generation = m->generation;
    if (w->broken == DDPH_OK && ++m->arrived == w->size) {
        m->arrived = 0;
        m->generation++;
        pthread_cond_broadcast(&w->cv);
    }
    while (m->generation == generation && w->broken == DDPH_OK) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT) {
            char msg[128];
            snprintf(msg, sizeof msg,
                     "rank %d: %s: its peers did not come within %g s", r->rank,
                     what, FAKE_COMM_WAIT_S);
            break_locked(w, DDPH_ERR_TIMEOUT, msg);
        }
    }
    ddph_status st = DDPH_OK;
    if (m->generation == generation)
        st = ddph__fail(err, w->broken, "%s", w->why);
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* What a collective computes from every rank's input, in rank order. */
typedef void (*combine_fn)(const void *const *in, int size, int rank,
                           void *arg);

/* Rank r's input goes aside, the ranks meet, each combines, the ranks
 * meet again (no input is freed while a peer may read it). */
static ddph_status exchange(fake_rank *r, int lane, const char *what,
                            const void *mine, size_t bytes, combine_fn combine,
                            void *arg, ddph_err *err)
{
    fake_world *w = r->w;
    /* The input follows a list link, so that a failed collective's can
     * be handed to the world (below). */
    struct abandoned *block = malloc(sizeof *block + (bytes ? bytes : 1));
    if (!block)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    unsigned char *copy = block->data;
    if (bytes)
        memcpy(copy, mine, bytes);
    pthread_mutex_lock(&w->mu);
    w->meet[lane].in[r->rank] = copy;
    pthread_mutex_unlock(&w->mu);
    ddph_status st = meet(r, lane, what, err);
    if (st == DDPH_OK) {
        combine(w->meet[lane].in, w->size, r->rank, arg);
        st = meet(r, lane, what, err);
    }
    if (st == DDPH_OK) {
        free(block);
        return st;
    }
    pthread_mutex_lock(&w->mu); /* a peer may still read it */
    block->next = w->abandoned;
    w->abandoned = block;
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* A hook's collective begins: logged, and failed where one is planted. */
static ddph_status counted(fake_rank *r, struct ddph_group *g,
                           const char *what, size_t count, const void *buf,
                           ddph_err *err)
{
    int64_t n = r->calls++;
    if (n < FAKE_COMM_LOG) {
        float first = 0;
        if (buf && count)
            memcpy(&first, buf, sizeof first);
        r->log[n] = (fake_call){what, count, ((fake_group *)g)->lane, first};
    }
    /* Only this call fails: the job breaks when the caller reports it
     * (as a reducer does, naming the bucket), and the peers waiting for
     * this rank meanwhile learn it then. */
    if (n == r->fail_nth)
        return ddph__fail(err, r->fail_status,
                          "%s (collective %lld) failed: planted by the test",
                          what, (long long)n);
    return broken_status(r->w, err);
}

/* ---- the arithmetic ------------------------------------------------------ */

typedef struct reduction {
    void *out;
    size_t count, from; /* elements of out; first element read from each */
    ddph_dtype dtype;
    ddph_redop op;
} reduction;

#define REDUCE(T)                                                            \
    do {                                                                     \
        T *o = red->out;                                                     \
        for (size_t i = 0; i < red->count; i++) {                            \
            T acc = ((const T *)in[0])[red->from + i];                       \
            for (int k = 1; k < size; k++) {                                 \
                T v = ((const T *)in[k])[red->from + i];                     \
                acc = red->op == DDPH_SUM   ? acc + v                        \
                      : red->op == DDPH_MAX ? (v > acc ? v : acc)            \
                                            : (v < acc ? v : acc);           \
            }                                                                \
            o[i] = acc;                                                      \
        }                                                                    \
    } while (0)

static void reduce(const void *const *in, int size, int rank, void *arg)
{
    (void)rank;
    reduction *red = arg;
    switch (red->dtype) {
    case DDPH_F32:
        REDUCE(float);
        break;
    case DDPH_F64:
        REDUCE(double);
        break;
    case DDPH_I32:
        REDUCE(int32_t);
        break;
    default:
        REDUCE(int64_t);
        break;
    }
}

static int reducible(ddph_dtype dtype)
{
    return dtype == DDPH_F32 || dtype == DDPH_F64 || dtype == DDPH_I32 ||
           dtype == DDPH_I64;
}

/* A gather: block k of out is bytes[k] of in[k], from its byte `from`. */
typedef struct gathering {
    char *out;
    const size_t *bytes;
    size_t from;
} gathering;

static void gather(const void *const *in, int size, int rank, void *arg)
{
    (void)rank;
    gathering *ga = arg;
    size_t at = 0;
    for (int k = 0; k < size; k++) {
        memcpy(ga->out + at, (const char *)in[k] + ga->from, ga->bytes[k]);
        at += ga->bytes[k];
    }
}

/* ---- comm.h's table ------------------------------------------------------ */

static fake_rank *rank_of(void *self)
{
    return self;
}

static int lane_of(struct ddph_group *g)
{
    return ((fake_group *)g)->lane;
}

static struct ddph_group *fake_world_group(void *self)
{
    return &rank_of(self)->lanes[0].g;
}

static ddph_status fake_split(void *self, struct ddph_group *parent,
                              int color, int key, struct ddph_group **out,
                              ddph_err *err)
{
    (void)self, (void)parent, (void)color, (void)key;
    *out = NULL;
    return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                      "split: the fake communicator has the world only");
}

static ddph_status fake_intra_node(void *self, struct ddph_group **out,
                                   ddph_err *err)
{
    (void)err;
    *out = fake_world_group(self); /* every rank on one host */
    return DDPH_OK;
}

/* allreduce and reduce_scatter: `sent` elements of send go aside. */
static ddph_status reduced(fake_rank *r, struct ddph_group *g,
                           const char *what, const void *send, size_t sent,
                           reduction red, ddph_err *err)
{
    ddph_status st = counted(r, g, what, red.count, send, err);
    if (st != DDPH_OK)
        return st;
    if (!reducible(red.dtype))
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "%s: the fake communicator reduces f32, f64, i32 "
                          "and i64 only",
                          what);
    return exchange(r, lane_of(g), what, send,
                    sent * ddph__dtype_size(red.dtype), reduce, &red, err);
}

static ddph_status fake_allreduce(void *self, struct ddph_group *g, void *buf,
                                  size_t count, ddph_dtype dtype,
                                  ddph_redop op, ddph_err *err)
{
    return reduced(rank_of(self), g, "allreduce", buf, count,
                   (reduction){buf, count, 0, dtype, op}, err);
}

static ddph_status fake_reduce_scatter(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_redop op, ddph_err *err)
{
    return reduced(rank_of(self), g, "reduce_scatter", send,
                   count * (size_t)g->size,
                   (reduction){recv, count, count * (size_t)g->rank, dtype,
                               op},
                   err);
}

/* The gathers: block k of recv is counts[k] elements (count for every
 * rank when counts is NULL) of rank k's send, from its element `from`;
 * `sent` elements of this rank's send go aside.  `logged`: the count
 * the log shows. */
static ddph_status gathered(fake_rank *r, struct ddph_group *g,
                            const char *what, const void *send, void *recv,
                            const size_t *counts, size_t count, size_t from,
                            size_t sent, ddph_dtype dtype, size_t logged,
                            ddph_err *err)
{
    ddph_status st = counted(r, g, what, logged, send, err);
    if (st != DDPH_OK)
        return st;
    size_t es = ddph__dtype_size(dtype), bytes[FAKE_COMM_MAX_RANKS];
    for (int k = 0; k < g->size; k++)
        bytes[k] = (counts ? counts[k] : count) * es;
    gathering ga = {recv, bytes, from * es};
    return exchange(r, lane_of(g), what, send, sent * es, gather, &ga, err);
}

static ddph_status fake_allgather(void *self, struct ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_err *err)
{
    return gathered(rank_of(self), g, "allgather", send, recv, NULL, count, 0,
                    count, dtype, count, err);
}

static ddph_status fake_allgatherv(void *self, struct ddph_group *g,
                                   const void *send, void *recv,
                                   const size_t *counts, ddph_dtype dtype,
                                   ddph_err *err)
{
    size_t mine = counts[g->rank];
    return gathered(rank_of(self), g, "allgatherv", send, recv, counts, 0, 0,
                    mine, dtype, mine, err);
}

static ddph_status fake_broadcast(void *self, struct ddph_group *g, void *buf,
                                  size_t count, ddph_dtype dtype, int root,
                                  ddph_err *err)
{
    /* Every rank gathers what the root put aside, and only that. */
    size_t counts[FAKE_COMM_MAX_RANKS] = {0};
    counts[root] = count;
    size_t n = count * ddph__dtype_size(dtype);
    void *got = malloc(n ? n : 1);
    if (!got)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st =
        gathered(rank_of(self), g, "broadcast", buf, got, counts, 0, 0,
                 counts[g->rank], dtype, count, err);
    if (st == DDPH_OK)
        memcpy(buf, got, n);
    free(got);
    return st;
}

/* Block k of recv: block `rank` of rank k's send. */
static ddph_status fake_alltoall(void *self, struct ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    return gathered(rank_of(self), g, "alltoall", send, recv, NULL, count,
                    count * (size_t)g->rank, count * (size_t)g->size, dtype,
                    count, err);
}

/* The nonblocking ones run to their end as they start. */
static ddph_status fake_start_allreduce(void *self, struct ddph_group *g,
                                        void *buf, size_t count,
                                        ddph_dtype dtype, ddph_redop op,
                                        ddph_comm_op *out, ddph_err *err)
{
    return out->done = fake_allreduce(self, g, buf, count, dtype, op, err);
}

static ddph_status fake_start_allgather(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        size_t count, ddph_dtype dtype,
                                        ddph_comm_op *out, ddph_err *err)
{
    return out->done =
               fake_allgather(self, g, send, recv, count, dtype, err);
}

static ddph_status fake_start_allgatherv(void *self, struct ddph_group *g,
                                         const void *send, void *recv,
                                         const size_t *counts,
                                         ddph_dtype dtype, ddph_comm_op *out,
                                         ddph_err *err)
{
    return out->done =
               fake_allgatherv(self, g, send, recv, counts, dtype, err);
}

static ddph_status fake_start_alltoall(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_comm_op *out, ddph_err *err)
{
    return out->done = fake_alltoall(self, g, send, recv, count, dtype, err);
}

static ddph_status fake_wait(void *self, ddph_comm_op *op, ddph_err *err)
{
    (void)self, (void)err;
    return op->done;
}

static ddph_status fake_test(void *self, ddph_comm_op *op, int *done,
                             ddph_err *err)
{
    (void)self, (void)err;
    *done = 1;
    return op->done;
}

static ddph_status fake_progress(void *self, ddph_comm_op *op, ddph_err *err)
{
    (void)self, (void)err;
    return op->done;
}

static const ddph_comm_ops fake_comm_ops = {
    .name = "fake",
    .world = fake_world_group,
    .split = fake_split,
    .intra_node = fake_intra_node,
    .allreduce = fake_allreduce,
    .allgather = fake_allgather,
    .allgatherv = fake_allgatherv,
    .broadcast = fake_broadcast,
    .reduce_scatter = fake_reduce_scatter,
    .alltoall = fake_alltoall,
    .start_allreduce = fake_start_allreduce,
    .start_allgather = fake_start_allgather,
    .start_allgatherv = fake_start_allgatherv,
    .start_alltoall = fake_start_alltoall,
    .wait = fake_wait,
    .test = fake_test,
    .progress = fake_progress,
};

/* ---- the control plane --------------------------------------------------- */

static ddph_status fake_fault(void *self, ddph_err *err)
{
    return broken_status(rank_of(self)->w, err);
}

static int fake_is_broken(void *self)
{
    return broken_status(rank_of(self)->w, &(ddph_err){0}) != DDPH_OK;
}

static void fake_fail(void *self, ddph_status st, const char *msg)
{
    break_job(rank_of(self)->w, st, msg);
}

/* What a rank brings to an agreement. */
typedef struct outcome {
    ddph_status status;
    char msg[DDPH__ERR_LEN / 2];
} outcome;

typedef struct agreement {
    ddph_status status;
    ddph_err *err;
} agreement;

static void lowest_failure(const void *const *in, int size, int rank,
                           void *arg)
{
    agreement *ag = arg;
    for (int k = 0; k < size; k++) {
        const outcome *o = in[k];
        if (o->status == DDPH_OK)
            continue;
        ag->status = k == rank ? ddph__fail(ag->err, o->status, "%s", o->msg)
                               : ddph__fail(ag->err, o->status,
                                            "rank %d failed: %s", k, o->msg);
        return;
    }
}

static ddph_status fake_agree(void *self, ddph_status local,
                              const char *local_msg, ddph_err *err)
{
    fake_rank *r = rank_of(self);
    outcome mine = {.status = local};
    snprintf(mine.msg, sizeof mine.msg, "%s", local_msg ? local_msg : "");
    agreement ag = {DDPH_OK, err};
    ddph_status st = exchange(r, 0, "agreement", &mine, sizeof mine,
                              lowest_failure, &ag, err);
    return st != DDPH_OK ? st : ag.status;
}

static ddph_status fake_lane_groups(void *self, int n, struct ddph_group **out,
                                    ddph_err *err)
{
    if (n > FAKE_COMM_MAX_LANES)
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "the fake communicator has %d lanes at most",
                          FAKE_COMM_MAX_LANES);
    for (int i = 0; i < n; i++)
        out[i] = &rank_of(self)->lanes[i].g;
    return DDPH_OK;
}

static const ddph_control_ops fake_control_ops = {
    .world = fake_world_group,
    .fault = fake_fault,
    .broken = fake_is_broken,
    .fail = fake_fail,
    .agree = fake_agree,
    .lane_groups = fake_lane_groups,
};

ddph_comm fake_comm(fake_world *w, int rank)
{
    return (ddph_comm){&fake_comm_ops, &w->ranks[rank]};
}

ddph_control fake_control(fake_world *w, int rank)
{
    return (ddph_control){&fake_control_ops, &w->ranks[rank]};
}

void fake_fail_at(fake_world *w, int rank, int64_t nth, ddph_status st)
{
    w->ranks[rank].fail_nth = nth;
    w->ranks[rank].fail_status = st;
}

int64_t fake_calls(fake_world *w, int rank)
{
    return w->ranks[rank].calls;
}

fake_call fake_call_at(fake_world *w, int rank, int64_t i)
{
    return w->ranks[rank].log[i];
}

int fake_broken(fake_world *w, const char **why)
{
    *why = w->why;
    return w->broken != DDPH_OK;
}
