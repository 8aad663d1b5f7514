/* check_nccl_backend.c: the nccl backend's logic on a machine without a
 * GPU, against tests/fake_nccl (scripted CUDA and NCCL answers): every
 * communicator nonblocking, creation, splits, enqueues and stream waits
 * settled or aborted within timeout_s, NCCL's and CUDA's errors named in
 * the message, a stale "not ready" cleared, a rank outside a split still
 * joining it.  One rank; the host side (MPI) is faked too. */
#include "build-config.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#include "bf16_host.h"
#include "backends/nccl/backend_nccl.h"
#include "backends/nccl/device_cuda.h"
#include "device/quant_ops.h"
#include "device/sign_ops.h"
#include "device/sparse_ops.h"
#include "fake_nccl/fake_nccl.h"

#define TIMEOUT_S 0.3

/* The runtime's side the module is given (gpu.h's ddph_gpu_job): a
 * control plane and a host table over one rank here, over a team of
 * threads below. */
typedef struct test_host {
    struct ddph_group world;
    struct ddph_group split_group;
    struct ddph_group node; /* the team's hosts hold two ranks each */
} test_host;

static test_host host1;
static ddph_gpu_job job;
static ddph_status host_fault_status;
static ddph_status host_split_status;

static void touch(void) {}

static struct ddph_group *host_world(void *self)
{
    return &((test_host *)self)->world;
}

static ddph_status host_fault(void *self, ddph_err *err)
{
    return host_fault_status == DDPH_OK
               ? DDPH_OK
               : ddph__fail(err, host_fault_status,
                            "rank 1 failed: its hook returned an error");
}

static ddph_status host_allreduce_i64(void *self, int64_t *v, size_t n,
                                      ddph_redop op, ddph_err *err)
{
    return DDPH_OK; /* one rank: its own values */
}

static ddph_status host_bcast(void *self, void *buf, size_t bytes, int root,
                              ddph_err *err)
{
    return DDPH_OK;
}

static ddph_status host_split(void *self, struct ddph_group *parent,
                              int color, int key, struct ddph_group **out,
                              ddph_err *err)
{
    struct ddph_group *split_group = &((test_host *)self)->split_group;
    if (color < 0)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "colour %d: this rank is in no group", color);
    if (host_split_status != DDPH_OK)
        return ddph__fail(err, host_split_status, "MPI_Comm_split failed");
    split_group->rank = 0;
    split_group->size = 1;
    *out = split_group;
    return DDPH_OK;
}

/* What the module calls of each table; the rest stays NULL. */
static const ddph_control_ops host_control = {
    .world = host_world,
    .fault = host_fault,
    .allreduce_i64 = host_allreduce_i64,
    .bcast_bytes = host_bcast,
};

static const ddph_comm_ops host_comm = {
    .name = "host",
    .world = host_world,
    .split = host_split,
};

static ddph_gpu_job job_of(test_host *h, const ddph_control_ops *control,
                           const ddph_comm_ops *comm)
{
    return (ddph_gpu_job){.control = {control, h},
                          .host = {comm, h},
                          .timeout_s = TIMEOUT_S,
                          .node_rank = h->world.rank, /* one host */
                          .node_size = h->world.size,
                          .activity_touch = touch};
}

static void setup(void)
{
    fake_reset();
    memset(&host1, 0, sizeof host1);
    host1.world.rank = 0;
    host1.world.size = 1;
    job = job_of(&host1, &host_control, &host_comm);
    host_fault_status = DDPH_OK;
    host_split_status = DDPH_OK;
}

static ddph_nccl *started(void)
{
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&job, &n, &err), DDPH_OK);
    ck_assert_ptr_nonnull(n);
    return n;
}

static float buf[16];

#define ck_assert_msg_has(err, text)                                      \
    ck_assert_msg(strstr((err).msg, (text)) != NULL,                      \
                  "message '%s' lacks '%s'", (err).msg, (text))

START_TEST(init_is_nonblocking_and_clears_not_ready)
{
    ddph_nccl *n = started();
    ck_assert_int_eq(fake_seen[0].inits, 1);
    ck_assert_int_eq(fake_seen[0].init_blocking, 0);
    /* The stream answers "not ready" three times: CUDA keeps that as the
     * thread's last error, which the next launch would report. */
    fake.stream_busy = 3;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &n->world.head, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_OK);
    ck_assert_int_eq(fake_seen[0].stream_polls, 4);
    ck_assert_int_eq(fake_peek_last_error(), cudaSuccess);
    /* ddph__nccl_idle leaves no stale error either. */
    fake.stream_busy = 1;
    ck_assert_int_eq(ddph__nccl_start_allreduce(n, &n->world, buf, 16,
                                                DDPH_F32, DDPH_SUM, &err),
                     DDPH_OK);
    ck_assert_int_eq(ddph__nccl_idle(n), 0);
    ck_assert_int_eq(fake_peek_last_error(), cudaSuccess);
    ck_assert_int_eq(ddph__nccl_idle(n), 1);
    ddph__nccl_finalize(n, 0);
    ck_assert_int_eq(fake_seen[0].destroys, 1);
    ck_assert_int_eq(fake_seen[0].aborts, 0);
}
END_TEST

START_TEST(init_that_never_connects_times_out)
{
    fake.returns = ncclInProgress;
    fake.pending = -1; /* a peer that never comes */
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_init(&job, &n, &err), DDPH_ERR_TIMEOUT);
    double took = ddph__now() - t0;
    ck_assert_msg(took >= TIMEOUT_S && took < TIMEOUT_S + 1,
                  "took %.3f s against timeout_s %.1f", took, TIMEOUT_S);
    ck_assert_msg_has(err,
                      "ncclCommInitRank did not complete within timeout_s");
    ck_assert_int_eq(fake_seen[0].aborts, 1);
    ck_assert_int_eq(fake_seen[0].destroys, 0);
}
END_TEST

START_TEST(init_error_is_named)
{
    fake.pending = 3;
    fake.settles = ncclRemoteError;
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&job, &n, &err), DDPH_ERR_BACKEND);
    ck_assert_msg_has(err, "ncclCommInitRank failed: remote process exited");
    ck_assert_int_eq(fake_seen[0].aborts, 1);
}
END_TEST

START_TEST(no_device_is_unsupported)
{
    fake.device_count = 0;
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&job, &n, &err), DDPH_ERR_UNSUPPORTED);
    ck_assert_msg_has(err, "no CUDA device on this rank");
    ck_assert_int_eq(fake_seen[0].inits, 0);
}
END_TEST

START_TEST(blocking_environment_is_refused)
{
    setenv("NCCL_COMM_BLOCKING", "1", 1);
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&job, &n, &err), DDPH_ERR_INVALID);
    ck_assert_msg_has(err, "NCCL_COMM_BLOCKING=1 is set");
    ck_assert_int_eq(fake_seen[0].inits, 0);
    unsetenv("NCCL_COMM_BLOCKING");
}
END_TEST

START_TEST(unique_id_failure_stops_before_init)
{
    fake.unique_id = ncclSystemError;
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&job, &n, &err), DDPH_ERR_BACKEND);
    ck_assert_msg_has(err, "ncclGetUniqueId failed: unhandled system error");
    ck_assert_int_eq(fake_seen[0].inits, 0);
}
END_TEST

START_TEST(stuck_stream_times_out_and_aborts)
{
    ddph_nccl *n = started();
    fake.stream_busy = -1;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &n->world.head, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_TIMEOUT);
    double took = ddph__now() - t0;
    ck_assert_msg(took >= TIMEOUT_S && took < TIMEOUT_S + 1, "took %.3f s",
                  took);
    /* Polled with a back-off, not a busy spin of a core (about 7000
     * polls in 0.3 s; a spin makes hundreds of thousands). */
    ck_assert_msg(fake_seen[0].stream_polls < 20000,
                  "%d polls of the stream in %.2f s", fake_seen[0].stream_polls,
                  took);
    ck_assert_msg_has(err, "allreduce did not complete within timeout_s");
    ck_assert_int_eq(fake_seen[0].aborts, 1);
    ck_assert_ptr_null(n->world.nccl);
    /* The aborted communicator is never used again. */
    int enqueues = fake_seen[0].enqueues;
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &n->world.head, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_BACKEND);
    ck_assert_msg_has(err, "aborted after an earlier failure");
    ck_assert_int_eq(fake_seen[0].enqueues, enqueues);
    ddph__nccl_finalize(n, 1); /* aborts nothing twice (the fake would stop) */
    ck_assert_int_eq(fake_seen[0].aborts, 1);
}
END_TEST

START_TEST(async_error_while_waiting_is_reported_at_once)
{
    ddph_nccl *n = started();
    fake.stream_busy = -1;
    fake.async_while_busy = ncclRemoteError;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &n->world.head, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_BACKEND);
    ck_assert(ddph__now() - t0 < TIMEOUT_S);
    ck_assert_msg_has(err, "allreduce failed: remote process exited");
    ck_assert_int_eq(fake_seen[0].aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(peer_failure_ends_the_wait)
{
    ddph_nccl *n = started();
    fake.stream_busy = -1;
    host_fault_status = DDPH_ERR_HOOK;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &n->world.head, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_HOOK);
    ck_assert(ddph__now() - t0 < TIMEOUT_S);
    ck_assert_msg_has(err, "rank 1 failed");
    ck_assert_int_eq(fake_seen[0].aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(enqueue_in_progress_is_settled)
{
    ddph_nccl *n = started();
    fake.returns = ncclInProgress;
    fake.pending = 5;
    int polls = fake_seen[0].async_polls;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &n->world.head, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_OK);
    ck_assert_int_ge(fake_seen[0].async_polls - polls, 6);
    /* One that stays in progress: reported at timeout_s, not waited on. */
    fake.pending = -1;
    ck_assert_int_eq(ddph__nccl_start_allgather(n, &n->world, buf, buf, 4,
                                                DDPH_F32, &err),
                     DDPH_ERR_TIMEOUT);
    ck_assert_msg_has(err, "ncclAllGather did not complete within timeout_s");
    ck_assert_int_eq(fake_seen[0].aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(enqueue_errors_are_named)
{
    ddph_nccl *n = started();
    fake.returns = ncclInvalidArgument;
    ddph_err err = {0};
    size_t counts[1] = {4};
    ck_assert_int_eq(ddph__nccl_start_allgatherv(n, &n->world, buf, buf,
                                                 counts, DDPH_F32, &err),
                     DDPH_ERR_BACKEND);
    ck_assert_msg_has(err,
                      "ncclBroadcast (allgatherv) failed: invalid argument");
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(negative_colour_still_joins_the_split)
{
    ddph_nccl *n = started();
    ddph_nccl_group *g = NULL;
    ddph_err err = {0};
    /* The other ranks wait in ncclCommSplit until every rank of the
     * parent has called it: this one must, with NCCL_SPLIT_NOCOLOR. */
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, -1, 0, &g, &err),
                     DDPH_ERR_INVALID);
    ck_assert_int_eq(fake_seen[0].splits, 1);
    ck_assert_int_eq(fake_seen[0].split_color, NCCL_SPLIT_NOCOLOR);
    ck_assert_int_eq(fake_seen[0].split_blocking, 0);
    ck_assert_ptr_null(g);
    ck_assert_msg_has(err, "in no group");
    ddph__nccl_finalize(n, 0);
}
END_TEST

START_TEST(split_makes_a_communicator)
{
    ddph_nccl *n = started();
    ddph_nccl_group *g = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, 3, 0, &g, &err), DDPH_OK);
    ck_assert_int_eq(fake_seen[0].split_color, 3);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(g->nccl);
    ck_assert_int_eq(ddph__nccl_comm_ops.allreduce(n, &g->head, buf, 16, DDPH_F32, DDPH_SUM,
                                          &err),
                     DDPH_OK);
    ddph__nccl_finalize(n, 0);
    ck_assert_int_eq(fake_seen[0].destroys, 2);
}
END_TEST

START_TEST(split_failing_on_every_rank_calls_no_nccl)
{
    ddph_nccl *n = started();
    host_split_status = DDPH_ERR_NOMEM;
    ddph_nccl_group *g = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, 2, 0, &g, &err),
                     DDPH_ERR_NOMEM);
    ck_assert_int_eq(fake_seen[0].splits, 0);
    ddph__nccl_finalize(n, 0);
}
END_TEST

START_TEST(split_that_never_completes_times_out)
{
    ddph_nccl *n = started();
    fake.returns = ncclInProgress;
    fake.pending = -1;
    ddph_nccl_group *g = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, 1, 0, &g, &err),
                     DDPH_ERR_TIMEOUT);
    ck_assert_msg_has(err, "ncclCommSplit did not complete within timeout_s");
    /* The parent, and the half-made child NCCL writes out as it stops. */
    ck_assert_int_eq(fake_seen[0].aborts, 2);
    ddph__nccl_finalize(n, 1);
    ck_assert_int_eq(fake_live_comms(0), 0);
}
END_TEST

/* ---- several ranks: threads over the fake's real data movement -------- */

/* The MPI side of W ranks in one process: every exchange through `team`,
 * a barrier on each side of it. */
static struct team {
    int w;
    pthread_barrier_t bar;
    int64_t slots[FAKE_MAX_RANKS][64];
    char bytes[256];
    int color[FAKE_MAX_RANKS], key[FAKE_MAX_RANKS];
} team;

typedef struct rank_ctx {
    ddph_services s; /* first: the services mock's `s` is the rank */
    int rank;
    test_host host;
    ddph_nccl *n;
    ddph_gpu_job job;
    char message[512];
    ddph_status st;
    ddph_err err;
    double took;
    int caller_device;
    int world_works; /* after a failure elsewhere */
    int live;        /* communicators not ended after teardown */
    int host_reads;  /* int8: services that hand a value to the host */
} rank_ctx;

static rank_ctx ranks[FAKE_MAX_RANKS];

static ddph_status team_allreduce(void *self, int64_t *v, size_t n,
                                  ddph_redop op, ddph_err *err)
{
    test_host *m = self;
    if (n > 64)
        return ddph__fail(err, DDPH_ERR_INVALID, "team: %zu values", n);
    memcpy(team.slots[m->world.rank], v, n * sizeof *v);
    pthread_barrier_wait(&team.bar);
    for (size_t i = 0; i < n; i++) {
        int64_t acc = team.slots[0][i];
        for (int r = 1; r < team.w; r++) {
            int64_t x = team.slots[r][i];
            acc = op == DDPH_SUM   ? acc + x
                  : op == DDPH_MAX ? (x > acc ? x : acc)
                                   : (x < acc ? x : acc);
        }
        v[i] = acc;
    }
    pthread_barrier_wait(&team.bar);
    return DDPH_OK;
}

static ddph_status team_bcast(void *self, void *data, size_t bytes, int root,
                              ddph_err *err)
{
    test_host *m = self;
    if (m->world.rank == root)
        memcpy(team.bytes, data, bytes);
    pthread_barrier_wait(&team.bar);
    if (m->world.rank != root)
        memcpy(data, team.bytes, bytes);
    pthread_barrier_wait(&team.bar);
    return DDPH_OK;
}

static ddph_status team_split(void *self, struct ddph_group *parent,
                              int color, int key, struct ddph_group **out,
                              ddph_err *err)
{
    test_host *m = self;
    int me = m->world.rank;
    team.color[me] = color;
    team.key[me] = key;
    pthread_barrier_wait(&team.bar);
    int rank = 0, size = 0;
    for (int r = 0; r < team.w; r++)
        if (team.color[r] == color) {
            size++;
            if (team.key[r] < key || (team.key[r] == key && r < me))
                rank++;
        }
    pthread_barrier_wait(&team.bar);
    if (color < 0)
        return ddph__fail(err, DDPH_ERR_INVALID, "colour %d: no group", color);
    struct ddph_group *g = &m->split_group;
    memset(g, 0, sizeof *g);
    g->rank = rank;
    g->size = size;
    *out = g;
    return DDPH_OK;
}

/* The ranks of this rank's host: 2k and 2k+1. */
static ddph_status team_intra_node(void *self, struct ddph_group **out,
                                   ddph_err *err)
{
    test_host *m = self;
    int first = m->world.rank / 2 * 2;
    m->node.rank = m->world.rank - first;
    m->node.size = m->world.size - first < 2 ? 1 : 2;
    *out = &m->node;
    return DDPH_OK;
}

/* An allreduce on the node group only (all the module asks of the host
 * table's collectives): every rank of the team meets, each reduces the
 * values of its host's ranks. */
static ddph_status team_node_allreduce(void *self, struct ddph_group *g,
                                       void *data, size_t count,
                                       ddph_dtype dtype, ddph_redop op,
                                       ddph_err *err)
{
    test_host *m = self;
    if (g != &m->node || count != 1 || dtype != DDPH_I64 || op != DDPH_MIN)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "team: only a MIN of one i64 on the node group");
    int me = m->world.rank;
    team.slots[me][0] = *(int64_t *)data;
    pthread_barrier_wait(&team.bar);
    int64_t least = team.slots[me][0];
    for (int r = 0; r < team.w; r++)
        if (r / 2 == me / 2 && team.slots[r][0] < least)
            least = team.slots[r][0];
    pthread_barrier_wait(&team.bar);
    *(int64_t *)data = least;
    return DDPH_OK;
}

static const ddph_control_ops team_control = {
    .world = host_world,
    .fault = host_fault,
    .allreduce_i64 = team_allreduce,
    .bcast_bytes = team_bcast,
};

static const ddph_comm_ops team_comm = {
    .name = "team",
    .world = host_world,
    .split = team_split,
    .intra_node = team_intra_node,
    .allreduce = team_node_allreduce,
};

static void team_start(int w)
{
    memset(&team, 0, sizeof team);
    team.w = w;
    pthread_barrier_init(&team.bar, NULL, (unsigned)w);
    for (int r = 0; r < w; r++) {
        rank_ctx *c = &ranks[r];
        memset(c, 0, sizeof *c);
        c->rank = r;
        c->host.world.rank = r;
        c->host.world.size = w;
        c->job = job_of(&c->host, &team_control, &team_comm);
    }
}

typedef void (*rank_fn)(rank_ctx *c);
static rank_fn team_fn;

static void *rank_main(void *arg)
{
    rank_ctx *c = arg;
    fake_set_rank(c->rank);
    team_fn(c);
    return NULL;
}

/* fn on W threads, one a rank; returns when all have. */
static void team_run(int w, rank_fn fn)
{
    pthread_t t[FAKE_MAX_RANKS];
    team_fn = fn;
    for (int r = 0; r < w; r++)
        ck_assert_int_eq(pthread_create(&t[r], NULL, rank_main, &ranks[r]), 0);
    for (int r = 0; r < w; r++)
        pthread_join(t[r], NULL);
}

static void rank_init(rank_ctx *c)
{
    c->st = ddph__nccl_init(&c->job, &c->n, &c->err);
}

/* Every rank's status: `want`, its message holding `text`. */
static void all_ranks(int w, ddph_status want, const char *text)
{
    for (int r = 0; r < w; r++) {
        ck_assert_msg(ranks[r].st == want, "rank %d of %d: status %d (%s), "
                      "not %d", r, w, ranks[r].st, ranks[r].err.msg, want);
        if (text)
            ck_assert_msg(strstr(ranks[r].err.msg, text),
                          "rank %d of %d: '%s' lacks '%s'", r, w,
                          ranks[r].err.msg, text);
        ck_assert_msg(fake_seen[r].concurrent_calls == 0,
                      "rank %d of %d: %d NCCL calls while another thread "
                      "was inside one on the same communicator", r, w,
                      fake_seen[r].concurrent_calls);
    }
}

/* fn on W ranks; every rank ends with `want` (and `text`). */
static void team_expect(int w, rank_fn fn, ddph_status want, const char *text)
{
    team_start(w);
    team_run(w, fn);
    all_ranks(w, want, text);
}

static const int worlds[] = {2, 4};

/* Every collective the backend offers, with real data: each value says
 * which rank and element it came from, so a wrong count or offset shows. */
static void rank_collectives(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    ddph_nccl *n = c->n;
    int w = n->world.size, me = c->rank;
    ddph_err *err = &c->err;
    char *bad = c->message;
    float a[7], g[4 * FAKE_MAX_RANKS], rs[3 * FAKE_MAX_RANKS], out[3];
    int32_t b[5];
    ddph_status st = DDPH_OK;
#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (st == DDPH_OK && !(cond)) {                                    \
            snprintf(bad, sizeof c->message, __VA_ARGS__);                 \
            st = DDPH_ERR_STATE;                                           \
        }                                                                  \
    } while (0)
    for (int i = 0; i < 7; i++)
        a[i] = (float)(me * 10 + i);
    st = ddph__nccl_comm_ops.allreduce(n, &n->world.head, a, 7, DDPH_F32, DDPH_SUM, err);
    for (int i = 0; i < 7 && st == DDPH_OK; i++)
        EXPECT(a[i] == (float)(10 * w * (w - 1) / 2 + w * i),
               "allreduce sum [%d] = %g", i, (double)a[i]);
    float four[4];
    for (int i = 0; i < 4; i++)
        four[i] = (float)(me * 100 + i);
    if (st == DDPH_OK)
        st = ddph__nccl_comm_ops.allgather(n, &n->world.head, four, g, 4, DDPH_F32, err);
    for (int r = 0; r < w && st == DDPH_OK; r++)
        for (int i = 0; i < 4; i++)
            EXPECT(g[4 * r + i] == (float)(r * 100 + i),
                   "allgather [%d][%d] = %g", r, i, (double)g[4 * r + i]);
    for (int i = 0; i < 5; i++)
        b[i] = me == w - 1 ? 1000 + i : -1;
    if (st == DDPH_OK)
        st = ddph__nccl_comm_ops.broadcast(n, &n->world.head, b, 5, DDPH_I32, w - 1, err);
    for (int i = 0; i < 5 && st == DDPH_OK; i++)
        EXPECT(b[i] == 1000 + i, "broadcast [%d] = %d", i, b[i]);
    for (int i = 0; i < 3 * w; i++)
        rs[i] = (float)(me + i);
    if (st == DDPH_OK)
        st = ddph__nccl_comm_ops.reduce_scatter(n, &n->world.head, rs, out, 3, DDPH_F32,
                                       DDPH_SUM, err);
    for (int i = 0; i < 3 && st == DDPH_OK; i++)
        EXPECT(out[i] == (float)(w * (w - 1) / 2 + w * (3 * me + i)),
               "reduce_scatter [%d] = %g", i, (double)out[i]);
    /* allgatherv: rank r sends r + 1 values, at offset r (r + 1) / 2. */
    size_t counts[FAKE_MAX_RANKS];
    float mine[FAKE_MAX_RANKS], all[FAKE_MAX_RANKS * FAKE_MAX_RANKS];
    for (int r = 0; r < w; r++)
        counts[r] = (size_t)r + 1;
    for (int i = 0; i <= me; i++)
        mine[i] = (float)(me * 1000 + i);
    if (st == DDPH_OK)
        st = ddph__nccl_comm_ops.allgatherv(n, &n->world.head, mine, all, counts, DDPH_F32,
                                   err);
    for (int r = 0, at = 0; r < w && st == DDPH_OK; at += r + 1, r++)
        for (int i = 0; i <= r; i++)
            EXPECT(all[at + i] == (float)(r * 1000 + i),
                   "allgatherv [%d] (rank %d's %d) = %g", at + i, r, i,
                   (double)all[at + i]);
    /* alltoall: block j of rank r's send goes to rank j, into block r. */
    int8_t send[3 * FAKE_MAX_RANKS], recv[3 * FAKE_MAX_RANKS];
    for (int j = 0; j < w; j++)
        for (int i = 0; i < 3; i++)
            send[3 * j + i] = (int8_t)(me * 16 + j * 4 + i);
    if (st == DDPH_OK)
        st = ddph__nccl_start_alltoall(n, &n->world, send, recv, 3, DDPH_I8,
                                       err);
    if (st == DDPH_OK)
        st = ddph__nccl_wait(n, &n->world, "alltoall", err);
    for (int r = 0; r < w && st == DDPH_OK; r++)
        for (int i = 0; i < 3; i++)
            EXPECT(recv[3 * r + i] == (int8_t)(r * 16 + me * 4 + i),
                   "alltoall from rank %d [%d] = %d", r, i, recv[3 * r + i]);
    /* fmaxf: a NaN on one rank is dropped by NCCL's MAX. */
    float m = me == 1 ? NAN : (float)me;
    if (st == DDPH_OK)
        st = ddph__nccl_comm_ops.allreduce(n, &n->world.head, &m, 1, DDPH_F32, DDPH_MAX,
                                  err);
    int top = w == 2 ? 0 : w - 1; /* the largest rank but 1 */
    EXPECT(m == (float)top, "MAX over ranks with a NaN = %g, not %d (fmaxf)",
           (double)m, top);
    /* A split into even and odd ranks; its own collectives. */
    ddph_nccl_group *half = NULL;
    if (st == DDPH_OK)
        st = ddph__nccl_split(n, &n->world, me % 2, me, &half, err);
    int64_t v = me;
    if (st == DDPH_OK)
        st = ddph__nccl_comm_ops.allreduce(n, &half->head, &v, 1, DDPH_I64, DDPH_SUM, err);
    int64_t want = 0;
    for (int r = me % 2; r < w; r += 2)
        want += r;
    EXPECT(v == want, "allreduce on the split: %lld, not %lld", (long long)v,
           (long long)want);
    c->st = st;
    if (st == DDPH_ERR_STATE)
        snprintf(c->err.msg, sizeof c->err.msg, "%s", c->message);
    ddph__nccl_finalize(n, st != DDPH_OK);
#undef EXPECT
}

START_TEST(collectives_move_real_data)
{
    int w = worlds[_i];
    team_start(w);
    team_run(w, rank_collectives);
    all_ranks(w, DDPH_OK, NULL);
    for (int r = 0; r < w; r++) {
        ck_assert_int_eq(fake_seen[r].aborts, 0);
        ck_assert_int_eq(fake_seen[r].destroys, 2); /* world and split */
        ck_assert_int_eq(fake_seen[r].destroy_unfinalized, 0);
        ck_assert_int_lt(fake_seen[r].stream_priority, 0); /* the highest */
    }
}
END_TEST

/* The ranks of a host: the host table's node group, whose first rank
 * (found by the host table's allreduce) colours an NCCL split of the
 * world; collectives on it stay within the host. */
static void rank_intra_node(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    ddph_nccl_group *g = NULL;
    c->st = ddph__nccl_intra_node(c->n, &g, &c->err);
    int64_t v = c->rank;
    if (c->st == DDPH_OK && (g->rank != c->rank % 2 || g->size != 2))
        c->st = ddph__fail(&c->err, DDPH_ERR_STATE,
                           "rank %d: node group rank %d of %d, not %d of 2",
                           c->rank, g->rank, g->size, c->rank % 2);
    if (c->st == DDPH_OK)
        c->st = ddph__nccl_comm_ops.allreduce(c->n, &g->head, &v, 1, DDPH_I64, DDPH_SUM,
                                     &c->err);
    int64_t want = c->rank / 2 * 4 + 1; /* 2k + 2k+1 */
    if (c->st == DDPH_OK && v != want)
        c->st = ddph__fail(&c->err, DDPH_ERR_STATE,
                           "rank %d: sum on its host %lld, not %lld", c->rank,
                           (long long)v, (long long)want);
    ddph__nccl_finalize(c->n, c->st != DDPH_OK);
}

START_TEST(intra_node_splits_by_host)
{
    team_expect(4, rank_intra_node, DDPH_OK, NULL);
}
END_TEST

/* NCCL may answer ncclInProgress to the calls inside a group: the group
 * must go on (a rank that stopped there would leave its peers waiting for
 * the rest), and the communicator be settled before its next call. */
/* Half-precision sums, as the fp16 and bf16 hooks hand them to NCCL:
 * rank r gives 1 + r/8 (exact in both types), so the sum says whether
 * the backend named the right type. */
static void rank_half_sums(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    int w = c->n->world.size;
    for (int bf = 0; bf < 2 && c->st == DDPH_OK; bf++) {
        uint16_t v[3];
        float mine = 1.0f + (float)c->rank / 8;
        for (int i = 0; i < 3; i++)
            v[i] = bf ? bf16_from_float(mine) : fake_float_to_f16(mine);
        c->st = ddph__nccl_comm_ops.allreduce(c->n, &c->n->world.head, v, 3,
                                     bf ? DDPH_BF16 : DDPH_F16, DDPH_SUM,
                                     &c->err);
        float want = (float)w + (float)(w * (w - 1) / 2) / 8;
        float got = bf ? bf16_to_float(v[2]) : fake_f16_to_float(v[2]);
        if (c->st == DDPH_OK && got != want)
            c->st = ddph__fail(&c->err, DDPH_ERR_BACKEND,
                               "%s sum %g, want %g", bf ? "bf16" : "f16",
                               (double)got, (double)want);
    }
    ddph__nccl_finalize(c->n, 0);
}

START_TEST(half_precision_sums)
{
    team_expect(worlds[_i], rank_half_sums, DDPH_OK, NULL);
}
END_TEST

START_TEST(in_progress_inside_groups)
{
    int w = worlds[_i];
    fake.in_group = ncclInProgress;
    team_start(w);
    team_run(w, rank_collectives);
    all_ranks(w, DDPH_OK, NULL);
}
END_TEST

/* ---- int8 over the fake: a NaN on one rank -------------------------- */

#define CTX(s) ((rank_ctx *)(void *)(s))

/* Device memory is host memory here; the device operations wait for the
 * stream first, as the kernels would run after what is queued on it. */
static ddph_status mock_sync(const ddph_services *s)
{
    ddph_nccl *n = CTX(s)->n;
    return ddph__nccl_wait(n, NULL, "device operation", &CTX(s)->err);
}

static int mock_group_size(const ddph_group *g) { return g->size; }
static int mock_opt_bool(const ddph_options *o, const char *name) { return 1; }

static void *mock_alloc(const ddph_services *s, size_t bytes)
{
    return calloc(1, bytes);
}

static void mock_free(const ddph_services *s, void *p) { free(p); }

static void mock_set_error(const ddph_services *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(CTX(s)->message, sizeof CTX(s)->message, fmt, ap);
    va_end(ap);
}

static ddph_status mock_zero(const ddph_services *s, void *p, size_t bytes)
{
    ddph_status st = mock_sync(s);
    if (st == DDPH_OK)
        memset(p, 0, bytes);
    return st;
}

/* A copy to or from the host, and absmax, wait for the stream on a GPU:
 * counted in host_reads. */
static ddph_status mock_copy(const ddph_services *s, void *dst,
                             const void *src, size_t bytes,
                             ddph_copy_kind kind)
{
    CTX(s)->host_reads += kind != DDPH_COPY_DEVICE;
    ddph_status st = mock_sync(s);
    if (st == DDPH_OK)
        memmove(dst, src, bytes);
    return st;
}

static ddph_status mock_absmax(const ddph_services *s, const float *x,
                               size_t n, float *out)
{
    CTX(s)->host_reads++;
    ddph_status st = mock_sync(s);
    if (st == DDPH_OK)
        *out = ddph__cpu_absmax(x, n);
    return st;
}

static ddph_status mock_chunk_abs_max(const ddph_services *s, const float *x,
                                      size_t n, size_t chunk, float *out)
{
    ddph_status st = mock_sync(s);
    if (st == DDPH_OK)
        ddph__cpu_chunk_abs_max(x, n, chunk, out);
    return st;
}

static ddph_status mock_axpy(const ddph_services *s, size_t n, float alpha,
                             const float *x, float *y)
{
    ddph_status st = mock_sync(s);
    for (size_t i = 0; i < n && st == DDPH_OK; i++)
        y[i] += alpha * x[i];
    return st;
}

static ddph_status mock_divide(const ddph_services *s, void *p,
                               ddph_dtype dtype, size_t n, double divisor)
{
    ddph_status st = mock_sync(s);
    for (size_t i = 0; i < n && st == DDPH_OK; i++)
        ((float *)p)[i] /= (float)divisor;
    return st;
}

static ddph_status mock_quantize(const ddph_services *s, const float *x,
                                 size_t n, float scale, int8_t *q)
{
    ddph_status st = mock_sync(s);
    if (st == DDPH_OK)
        ddph__cpu_quantize_int8(x, n, scale, q);
    return st;
}

static ddph_status mock_dequantize(const ddph_services *s, const int8_t *q,
                                   size_t n, float scale, float beta,
                                   float *y)
{
    ddph_status st = mock_sync(s);
    if (st == DDPH_OK)
        ddph__cpu_dequantize_int8(q, n, scale, beta, y);
    return st;
}

static ddph_status keep_err(const ddph_services *s, ddph_status st)
{
    if (st != DDPH_OK)
        snprintf(CTX(s)->message, sizeof CTX(s)->message, "%s",
                 CTX(s)->err.msg);
    return st;
}

/* The services hand out the heads of the backend's groups. */
static ddph_nccl_group *NG(ddph_group *g)
{
    return (ddph_nccl_group *)g;
}

static ddph_status mock_allreduce(const ddph_services *s, ddph_group *g,
                                  void *data, size_t count, ddph_dtype dtype,
                                  ddph_redop op)
{
    return keep_err(s, ddph__nccl_comm_ops.allreduce(CTX(s)->n, &(NG(g))->head, data, count,
                                            dtype, op, &CTX(s)->err));
}

/* Requests: the stream runs everything in order, so any pointer will do. */
static ddph_status mock_ialltoall(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_request **req)
{
    *req = (ddph_request *)(void *)CTX(s);
    return keep_err(s, ddph__nccl_start_alltoall(CTX(s)->n, NG(g), send, recv,
                                                 count, dtype, &CTX(s)->err));
}

static ddph_status mock_iallgather(const ddph_services *s, ddph_group *g,
                                   const void *send, void *recv, size_t count,
                                   ddph_dtype dtype, ddph_request **req)
{
    *req = (ddph_request *)(void *)CTX(s);
    return keep_err(s, ddph__nccl_start_allgather(CTX(s)->n, NG(g), send, recv,
                                                  count, dtype, &CTX(s)->err));
}

static ddph_status mock_wait(const ddph_services *s, ddph_request *req)
{
    return keep_err(s, ddph__nccl_wait(CTX(s)->n, NULL, "wait",
                                       &CTX(s)->err));
}

const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor);

#define INT8_NUMEL 37

static int nan_rank; /* -1: none */

static void rank_int8(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    ddph_services *s = &c->s;
    s->struct_size = sizeof *s;
    s->abi_minor = DDPH_PLUGIN_ABI_MINOR;
    s->rank = c->rank;
    s->world_size = c->n->world.size;
    s->world = &c->n->world.head;
    s->group_size = mock_group_size;
    s->opt_bool = mock_opt_bool;
    s->alloc = mock_alloc;
    s->free = mock_free;
    s->set_error = mock_set_error;
    s->zero = mock_zero;
    s->copy = mock_copy;
    s->absmax = mock_absmax;
    s->chunk_abs_max = mock_chunk_abs_max;
    s->axpy = mock_axpy;
    s->divide = mock_divide;
    s->quantize_int8 = mock_quantize;
    s->dequantize_int8 = mock_dequantize;
    s->allreduce = mock_allreduce;
    s->ialltoall = mock_ialltoall;
    s->iallgather = mock_iallgather;
    s->wait = mock_wait;
    const ddph_plugin_api_v1 *api = ddph_plugin_v1(DDPH_PLUGIN_ABI_MINOR);
    float grad[INT8_NUMEL];
    for (int i = 0; i < INT8_NUMEL; i++)
        grad[i] = (float)((i * 7 + c->rank * 3) % 19) - 9.0f;
    if (c->rank == nan_rank)
        grad[5] = NAN;
    ddph_bucket b = {.struct_size = sizeof b, .index = 0, .count = 1,
                     .is_last = 1, .dtype = DDPH_F32, .device = DDPH_CUDA,
                     .buffer = grad, .numel = INT8_NUMEL};
    const ddph_bucket *list[1] = {&b};
    ddph_layout layout = {.struct_size = sizeof layout, .model = "m",
                          .nbuckets = 1, .buckets = &b, .bucket_list = list};
    void *state = NULL;
    ddph_status st = api->create(s, NULL, &state);
    if (st == DDPH_OK)
        st = api->on_layout(state, &layout, s);
    c->host_reads = 0;
    if (st == DDPH_OK)
        st = api->on_bucket(state, &b, s);
    /* Without a NaN: the average of the ranks' gradients, to the hook's
     * tolerance of its largest value (9). */
    for (int i = 0; i < INT8_NUMEL && st == DDPH_OK; i++) {
        double want = 0;
        for (int r = 0; r < s->world_size; r++)
            want += (double)((i * 7 + r * 3) % 19) - 9.0;
        want /= s->world_size;
        if (fabs(grad[i] - want) > 9 * 5e-2) {
            snprintf(c->message, sizeof c->message, "int8 [%d] = %g, not %g",
                     i, (double)grad[i], want);
            st = DDPH_ERR_STATE;
        }
    }
    api->destroy(s, state);
    c->st = st;
    snprintf(c->err.msg, sizeof c->err.msg, "%s", c->message);
    ddph__nccl_finalize(c->n, 0);
}

START_TEST(int8_averages_over_nccl)
{
    int w = worlds[_i];
    nan_rank = -1;
    team_start(w);
    team_run(w, rank_int8);
    all_ranks(w, DDPH_OK, NULL);
}
END_TEST

/* On a GPU each value read on the host waits for the stream: int8 reads
 * the three its algorithm needs (the bucket's scale after the max
 * allreduce, its chunk's scale, the W chunk scales), the maxima staying
 * on the device until then (no absmax, no copy from the host). */
START_TEST(int8_reads_three_values_on_the_host)
{
    int w = worlds[_i];
    nan_rank = -1;
    team_start(w);
    team_run(w, rank_int8);
    all_ranks(w, DDPH_OK, NULL);
    for (int r = 0; r < w; r++)
        ck_assert_msg(ranks[r].host_reads == 3,
                      "rank %d of %d: int8 waited for the stream %d times "
                      "for a value on the host, not 3", r, w,
                      ranks[r].host_reads);
}
END_TEST

/* NCCL's MAX (fmaxf) drops a NaN: int8 must still see it, on every rank,
 * instead of quantizing it to 0 and keeping it in its error memory. */
START_TEST(int8_sees_a_nan_on_one_rank)
{
    int w = worlds[_i];
    nan_rank = w - 1;
    team_start(w);
    team_run(w, rank_int8);
    all_ranks(w, DDPH_ERR_HOOK, "holds a NaN or Inf on some rank");
}
END_TEST

/* ---- splits, teardown, asynchronous errors --------------------------- */

/* A split whose child fails or never connects: in NCCL the child's init
 * is a job of the parent, so the parent is lost with it; what must not
 * be lost is the half-made child NCCL writes out (it is freed), nor the
 * cause (the message names the split and the parent). */
static void rank_split_fails(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    ddph_nccl_group *g = NULL;
    c->st = ddph__nccl_split(c->n, &c->n->world, c->rank % 2, c->rank, &g,
                             &c->err);
    /* The world was aborted: a collective on it says so, calling no NCCL. */
    float x = 1;
    ddph_err e2 = {0};
    c->world_works =
        ddph__nccl_comm_ops.allreduce(c->n, &c->n->world.head, &x, 1, DDPH_F32, DDPH_SUM,
                             &e2) == DDPH_OK ||
        !strstr(e2.msg, "aborted after an earlier failure");
    ddph__nccl_finalize(c->n, 0);
    c->live = fake_live_comms(c->rank);
}

static void split_failure_checked(int w, ddph_status want, const char *text)
{
    team_expect(w, rank_split_fails, want, text);
    for (int r = 0; r < w; r++) {
        ck_assert_msg(strstr(ranks[r].err.msg, "parent's communicator"),
                      "rank %d: '%s' does not say the parent was aborted", r,
                      ranks[r].err.msg);
        ck_assert_msg(!ranks[r].world_works,
                      "rank %d: the world still ran after its split failed "
                      "(NCCL sets the split's failure on it)", r);
        ck_assert_msg(ranks[r].live == 0,
                      "rank %d: %d communicators left after teardown (the "
                      "half-made child leaked)", r, ranks[r].live);
    }
}

START_TEST(split_stall_aborts_the_parent_and_frees_the_child)
{
    fake.child_pending = -1; /* the new communicators never connect */
    split_failure_checked(worlds[_i], DDPH_ERR_TIMEOUT,
                          "ncclCommSplit did not complete");
}
END_TEST

START_TEST(split_failure_lands_on_the_parent)
{
    fake.child_settles = ncclSystemError;
    split_failure_checked(worlds[_i], DDPH_ERR_BACKEND,
                          "ncclCommSplit failed: unhandled system error");
}
END_TEST

/* Rank 0's allreduce is never joined (its peers are gone): its teardown
 * must end within timeout_s, aborting, not block in ncclCommDestroy. */
static void rank_teardown(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    float x = 1;
    if (c->rank == 0)
        c->st = ddph__nccl_start_allreduce(c->n, &c->n->world, &x, 1,
                                           DDPH_F32, DDPH_SUM, &c->err);
    pthread_barrier_wait(&team.bar);
    double t0 = ddph__now();
    ddph__nccl_finalize(c->n, c->rank != 0); /* the peers: gone */
    c->took = ddph__now() - t0;
}

START_TEST(teardown_ends_by_the_deadline)
{
    int w = worlds[_i];
    team_start(w);
    team_run(w, rank_teardown);
    all_ranks(w, DDPH_OK, NULL);
    ck_assert_msg(ranks[0].took < TIMEOUT_S + 1,
                  "rank 0's teardown took %.2f s (timeout_s %.1f)",
                  ranks[0].took, TIMEOUT_S);
    ck_assert_int_eq(fake_seen[0].finalizes, 1);
    ck_assert_int_eq(fake_seen[0].destroy_unfinalized, 0);
    ck_assert_int_eq(fake_seen[0].aborts, 1);
}
END_TEST

static void rank_clean_teardown(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    float x = 1;
    c->st = ddph__nccl_comm_ops.allreduce(c->n, &c->n->world.head, &x, 1, DDPH_F32,
                                 DDPH_SUM, &c->err);
    ddph__nccl_finalize(c->n, 0);
}

START_TEST(teardown_finalizes_then_destroys)
{
    int w = worlds[_i];
    team_expect(w, rank_clean_teardown, DDPH_OK, NULL);
    for (int r = 0; r < w; r++) {
        ck_assert_int_eq(fake_seen[r].finalizes, 1);
        ck_assert_int_eq(fake_seen[r].destroys, 1);
        ck_assert_int_eq(fake_seen[r].destroy_unfinalized, 0);
        ck_assert_int_eq(fake_seen[r].aborts, 0);
    }
}
END_TEST

/* A hook's test as the services run it (plugin/services.c): not idle and
 * before the deadline, "not done"; otherwise the wait, which reports. */
static ddph_status hook_test(ddph_nccl *n, double started, int *done,
                             ddph_err *err)
{
    int idle = ddph__nccl_idle(n);
    *done = 0;
    if (idle == 0 && ddph__now() - started <= n->timeout_s)
        return DDPH_OK;
    *done = 1;
    return ddph__nccl_wait(n, &n->world, "iallreduce", err);
}

static void rank_async_error(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    float x = 1;
    ddph_status st = ddph__nccl_comm_ops.allreduce(c->n, &c->n->world.head, &x, 1,
                                          DDPH_F32, DDPH_SUM, &c->err);
    double t0 = ddph__now();
    if (st == DDPH_OK) /* the second collective: struck in its middle */
        st = ddph__nccl_start_allreduce(c->n, &c->n->world, &x, 1, DDPH_F32,
                                        DDPH_SUM, &c->err);
    int done = 0;
    while (st == DDPH_OK && !done)
        st = hook_test(c->n, t0, &done, &c->err);
    c->took = ddph__now() - t0;
    c->st = st;
    ddph__nccl_finalize(c->n, 1);
}

START_TEST(async_error_reaches_a_hooks_test)
{
    int w = worlds[_i];
    fake.fail_op = 2;
    fake.fail_comm = 0;
    team_start(w);
    team_run(w, rank_async_error);
    all_ranks(w, DDPH_ERR_BACKEND, "remote process exited");
    for (int r = 0; r < w; r++)
        ck_assert_msg(ranks[r].took < TIMEOUT_S / 2,
                      "rank %d learnt of the error after %.2f s (timeout_s "
                      "%.1f)", r, ranks[r].took, TIMEOUT_S);
}
END_TEST

/* An error on a split's communicator stops the stream that the world's
 * work shares: a wait on the world reports it instead of timing out. */
static void rank_error_elsewhere(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    ddph_nccl_group *g = NULL;
    float x = 1, y = 1;
    ddph_status st = ddph__nccl_split(c->n, &c->n->world, 0, c->rank, &g,
                                      &c->err);
    double t0 = ddph__now();
    if (st == DDPH_OK)
        st = ddph__nccl_start_allreduce(c->n, g, &x, 1, DDPH_F32, DDPH_SUM,
                                        &c->err);
    if (st == DDPH_OK)
        st = ddph__nccl_start_allreduce(c->n, &c->n->world, &y, 1, DDPH_F32,
                                        DDPH_SUM, &c->err);
    if (st == DDPH_OK)
        st = ddph__nccl_wait(c->n, &c->n->world, "allreduce", &c->err);
    c->took = ddph__now() - t0;
    c->st = st;
    ddph__nccl_finalize(c->n, 1);
}

START_TEST(async_error_on_another_communicator_is_reported)
{
    int w = worlds[_i];
    fake.fail_op = 1;
    fake.fail_comm = 1; /* the split's */
    team_start(w);
    team_run(w, rank_error_elsewhere);
    all_ranks(w, DDPH_ERR_BACKEND, "remote process exited");
    for (int r = 0; r < w; r++)
        ck_assert_msg(ranks[r].took < TIMEOUT_S / 2, "rank %d: %.2f s", r,
                      ranks[r].took);
}
END_TEST

/* ---- the GPU of each rank ---------------------------------------------- */

static void rank_init_on_device_1(rank_ctx *c)
{
    cudaSetDevice(1); /* the trainer's choice on its own thread */
    rank_init(c);
    cudaGetDevice(&c->caller_device);
    if (c->st == DDPH_OK)
        ddph__nccl_finalize(c->n, 0);
}

START_TEST(more_ranks_than_gpus_is_named)
{
    int w = worlds[_i];
    fake.one_host = 1;
    fake.device_count = w / 2; /* two ranks on each GPU */
    team_start(w);
    team_run(w, rank_init);
    all_ranks(w, DDPH_ERR_BACKEND, "would share GPU");
    for (int r = 0; r < w; r++)
        ck_assert_int_eq(fake_seen[r].inits, 0);
}
END_TEST

START_TEST(one_gpu_per_rank_and_the_callers_device_kept)
{
    int w = worlds[_i];
    fake.one_host = 1;
    fake.device_count = w;
    team_start(w);
    team_run(w, rank_init_on_device_1);
    all_ranks(w, DDPH_OK, NULL);
    for (int r = 0; r < w; r++)
        ck_assert_msg(ranks[r].caller_device == 1,
                      "rank %d: the caller's device is now %d, not 1", r,
                      ranks[r].caller_device);
}
END_TEST

/* A lone allreduce whose NCCL group thread never finishes (every rank):
 * each rank reports it within timeout_s, aborts the communicator itself,
 * and its teardown ends at once, leaving nothing. */
static void rank_stalled_enqueue(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    pthread_barrier_wait(&team.bar);
    if (c->rank == 0)
        fake.enqueue_stalls = 1;
    pthread_barrier_wait(&team.bar);
    float data[4] = {1, 2, 3, 4};
    double t0 = ddph__now();
    c->st = ddph__nccl_comm_ops.allreduce(c->n, &c->n->world.head, data, 4, DDPH_F32,
                                 DDPH_SUM, &c->err);
    c->took = ddph__now() - t0;
    c->world_works = c->n->world.nccl != NULL;
    t0 = ddph__now();
    ddph__nccl_finalize(c->n, 0);
    c->took += 100 * (ddph__now() - t0 > TIMEOUT_S); /* teardown blocked */
    c->live = fake_live_comms(c->rank);
}

START_TEST(stalled_enqueue_ends_within_timeout)
{
    int w = worlds[_i];
    team_expect(w, rank_stalled_enqueue, DDPH_ERR_TIMEOUT,
                "ncclAllReduce did not complete within timeout_s");
    for (int r = 0; r < w; r++) {
        ck_assert_msg(ranks[r].took >= TIMEOUT_S &&
                          ranks[r].took < TIMEOUT_S + 1,
                      "rank %d: %.2f s (timeout_s %.1f; +100: teardown "
                      "blocked)", r, ranks[r].took, TIMEOUT_S);
        ck_assert_msg(!ranks[r].world_works,
                      "rank %d: the communicator was not aborted", r);
        ck_assert_msg(ranks[r].live == 0, "rank %d: %d communicators left",
                      r, ranks[r].live);
    }
}
END_TEST

/* The fake holds the backend to NCCL's thread rule: a watchdog's
 * ncclCommAbort while the owner is inside a blocking call on the same
 * communicator (here ncclCommDestroy, waiting for work that never ends)
 * is counted. */
static ncclComm_t blocked_comm;

static void *owner_destroys(void *unused)
{
    (void)unused;
    ncclCommDestroy(blocked_comm);
    return NULL;
}

START_TEST(watchdog_abort_inside_a_call_is_caught)
{
    fake.fail_op = 1; /* the first collective never completes */
    fake.fail_comm = 0;
    ddph_nccl *n = started();
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_start_allreduce(n, &n->world, buf, 4,
                                                DDPH_F32, DDPH_SUM, &err),
                     DDPH_OK);
    blocked_comm = (ncclComm_t)n->world.nccl;
    pthread_t owner;
    ck_assert_int_eq(pthread_create(&owner, NULL, owner_destroys, NULL), 0);
    double give_up = ddph__now() + 2;
    /* Inside, and waiting: destroy counts itself under the fake's lock
     * just before it waits. */
    while (!(fake_comm_in_call(blocked_comm) &&
             __atomic_load_n(&fake_seen[0].destroy_unfinalized,
                             __ATOMIC_ACQUIRE)) &&
           ddph__now() < give_up)
        sched_yield();
    ck_assert_int_eq(ncclCommAbort(blocked_comm), ncclSuccess);
    pthread_join(owner, NULL);
    ck_assert_int_eq(fake_seen[0].concurrent_calls, 1);
    n->world.nccl = NULL;
    ddph__nccl_finalize(n, 1);
}
END_TEST

/* ---- the device table (device_cuda.c) over the fake CUDA runtime ---- */

static const ddph_dev_ops *const dev = &ddph__cuda_device_ops;

/* The fake's GPU is asynchronous: a copy moves nothing at the enqueue,
 * only when its stream is queried or synchronised. */
START_TEST(fake_streams_run_only_when_asked)
{
    cudaStream_t s;
    ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
    float a[2] = {1, 2}, b[2] = {0, 0};
    ck_assert_int_eq(cudaMemcpyAsync(b, a, sizeof a, cudaMemcpyDeviceToDevice,
                                     s),
                     cudaSuccess);
    ck_assert_msg(b[0] == 0, "the copy ran at the enqueue");
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
    ck_assert_msg(b[0] == 1 && b[1] == 2, "synchronised, b = %g %g", b[0],
                  b[1]);
}
END_TEST

/* A trainer's thread whose current GPU is another one (1) than the
 * rank's (0): every operation of the table that makes an event,
 * allocates or launches on the communication stream runs on the rank's
 * GPU (CUDA refuses a launch or an event record on another device's
 * stream), and the thread's GPU is put back. */
START_TEST(device_table_runs_on_the_ranks_gpu_from_any_thread)
{
    fake.device_count = 2;
    ddph_nccl *n = started();
    ck_assert_int_eq(n->device, 0);
    ddph__cuda_set_home(n->device);
    ck_assert_int_eq(cudaSetDevice(1), cudaSuccess);
    ddph_err err = {0};
    void *ev = NULL, *mem = NULL;
    ck_assert_int_eq(dev->event_create(&ev, &err), DDPH_OK);
    ck_assert_msg(dev->event_record(ev, n->stream, &err) == DDPH_OK,
                  "event_record from a thread on GPU 1: %s", err.msg);
    ck_assert_int_eq(dev->alloc(64, &mem, &err), DDPH_OK);
    ck_assert_msg(dev->check_on(mem, 0, &err) == DDPH_OK,
                  "alloc from a thread on GPU 1: %s", err.msg);
    float src[4] = {1, 2, 3, 4};
    void *dst[1] = {mem};
    const void *from[1] = {src};
    size_t bytes[1] = {sizeof src};
    ck_assert_msg(dev->copy_batch(dst, from, bytes, 1, n->stream, &err) ==
                      DDPH_OK,
                  "copy_batch from a thread on GPU 1: %s", err.msg);
    ck_assert_msg(dev->nonfinite_find(mem, DDPH_F32, 4, (uint64_t *)mem + 4,
                                      n->stream, &err) == DDPH_OK,
                  "nonfinite_find from a thread on GPU 1: %s", err.msg);
    int current = -1;
    cudaGetDevice(&current);
    ck_assert_msg(current == 1, "the thread's GPU is now %d, not 1", current);
    ck_assert_int_eq(dev->sync(n->stream, &err), DDPH_OK);
    ck_assert_msg(((float *)mem)[3] == 4, "the batch copied %g",
                  ((float *)mem)[3]);
    dev->event_destroy(ev);
    dev->free(mem);
    ddph__nccl_finalize(n, 0);
    ddph__cuda_set_home(-1);
}
END_TEST

/* round_stochastic, pack_bits and unpack_bits are in the GPU's table and
 * enqueued on the communication stream: nothing has run when they return
 * (no host wait), and once the stream is synchronised the results are
 * quant_ops.c's on the CPU, bit for bit. */
START_TEST(quantizing_ops_are_enqueued_and_give_the_cpus_bits)
{
    ddph_nccl *n = started();
    ck_assert_ptr_nonnull(dev->round_stochastic);
    ck_assert_ptr_nonnull(dev->pack_bits);
    ck_assert_ptr_nonnull(dev->unpack_bits);
    enum { N = 23, CHUNK = 5 };
    float x[N], scales[5] = {0.5f, 0.0f, 1.25f, NAN, 0.75f};
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 37) % 19) / 4.0f - 2.0f;
    x[3] = NAN;
    x[17] = -INFINITY;
    int8_t q[N], want_q[N];
    uint8_t packed[(N * 4 + 7) / 8], want_packed[sizeof packed];
    float y[N], want_y[N];
    memset(q, 0x55, sizeof q);
    memset(packed, 0x55, sizeof packed);
    for (int i = 0; i < N; i++)
        y[i] = want_y[i] = (float)i;
    const uint64_t seed = 0x0123456789abcdefull;
    ddph_err err = {0};
    ck_assert_int_eq(dev->round_stochastic(n, x, N, CHUNK, scales, 7, seed, q,
                                           &err),
                     DDPH_OK);
    ck_assert_int_eq(dev->pack_bits(n, q, N, 4, packed, &err), DDPH_OK);
    ck_assert_int_eq(dev->unpack_bits(n, packed, N, 4, CHUNK, scales, 1, 0,
                                      0.5f, y, &err),
                     DDPH_OK);
    ck_assert_msg(q[0] == 0x55 && packed[0] == 0x55 && y[1] == 1.0f,
                  "a quantizing operation ran before its stream was "
                  "synchronised (a host wait)");
    ck_assert_int_eq(dev->sync(n->stream, &err), DDPH_OK);
    ddph__cpu_round_stochastic(DDPH_SIMD_SCALAR, x, N, CHUNK, scales, 7, seed,
                               want_q);
    ddph__cpu_pack_bits(want_q, N, 4, want_packed);
    ddph__cpu_unpack_bits(DDPH_SIMD_SCALAR, want_packed, N, 4, CHUNK, scales,
                          1, 0, 0.5f, want_y);
    ck_assert_msg(memcmp(q, want_q, N) == 0, "round_stochastic's codes differ");
    ck_assert_msg(memcmp(packed, want_packed, sizeof packed) == 0,
                  "pack_bits's bytes differ");
    ck_assert_msg(memcmp(y, want_y, sizeof y) == 0, "unpack_bits's y differs");
    ddph__nccl_finalize(n, 0);
}
END_TEST

static float compute_src[FAKE_MAX_RANKS][4];

/* As the reducer does it: the gradient written on the trainer's stream,
 * the bucket's ready event recorded there and waited for by the
 * communication stream, then the allreduce; a missing wait sums stale
 * zeros. */
static void rank_event_ordered(rank_ctx *c)
{
    rank_init(c);
    if (c->st != DDPH_OK)
        return;
    ddph_nccl *n = c->n;
    float *in = compute_src[c->rank], out[4] = {0};
    for (int i = 0; i < 4; i++)
        in[i] = (float)((c->rank + 1) * (i + 1));
    cudaStream_t compute = NULL;
    void *grad = NULL, *ready = NULL;
    cudaStreamCreate(&compute);
    c->st = dev->alloc(sizeof out, &grad, &c->err);
    if (c->st == DDPH_OK)
        cudaMemcpyAsync(grad, in, sizeof out, cudaMemcpyHostToDevice,
                        compute);
    if (c->st == DDPH_OK)
        c->st = dev->event_create(&ready, &c->err);
    if (c->st == DDPH_OK)
        c->st = dev->event_record(ready, compute, &c->err);
    if (c->st == DDPH_OK)
        c->st = dev->event_wait(n->stream, ready, &c->err);
    if (c->st == DDPH_OK)
        c->st = ddph__nccl_start_allreduce(n, &n->world, grad, 4, DDPH_F32,
                                           DDPH_SUM, &c->err);
    if (c->st == DDPH_OK)
        c->st = ddph__nccl_copy(n, out, grad, sizeof out, DDPH_COPY_TO_HOST,
                                &c->err);
    int w = n->world.size;
    for (int i = 0; i < 4 && c->st == DDPH_OK; i++)
        if (out[i] != (float)((i + 1) * w * (w + 1) / 2))
            c->st = ddph__fail(&c->err, DDPH_ERR_BACKEND,
                               "rank %d: sum [%d] = %g, want %d", c->rank, i,
                               out[i], (i + 1) * w * (w + 1) / 2);
    if (ready)
        dev->event_destroy(ready);
    dev->free(grad);
    cudaStreamSynchronize(compute);
    ddph__nccl_finalize(n, 0);
}

START_TEST(comm_stream_waits_for_the_gradients_event)
{
    team_expect(worlds[_i], rank_event_ordered, DDPH_OK, NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl backend (fake NCCL)");
    TCase *tc = tcase_create("logic");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, init_is_nonblocking_and_clears_not_ready);
    tcase_add_test(tc, init_that_never_connects_times_out);
    tcase_add_test(tc, init_error_is_named);
    tcase_add_test(tc, no_device_is_unsupported);
    tcase_add_test(tc, unique_id_failure_stops_before_init);
    tcase_add_test(tc, blocking_environment_is_refused);
    tcase_add_test(tc, stuck_stream_times_out_and_aborts);
    tcase_add_test(tc, async_error_while_waiting_is_reported_at_once);
    tcase_add_test(tc, peer_failure_ends_the_wait);
    tcase_add_test(tc, enqueue_in_progress_is_settled);
    tcase_add_test(tc, enqueue_errors_are_named);
    tcase_add_test(tc, negative_colour_still_joins_the_split);
    tcase_add_test(tc, split_makes_a_communicator);
    tcase_add_test(tc, intra_node_splits_by_host);
    tcase_add_test(tc, split_failing_on_every_rank_calls_no_nccl);
    tcase_add_test(tc, split_that_never_completes_times_out);
    tcase_add_test(tc, fake_streams_run_only_when_asked);
    tcase_add_test(tc, watchdog_abort_inside_a_call_is_caught);
    tcase_add_test(tc, device_table_runs_on_the_ranks_gpu_from_any_thread);
    tcase_add_test(tc, quantizing_ops_are_enqueued_and_give_the_cpus_bits);
    suite_add_tcase(s, tc);
    TCase *ranks_tc = tcase_create("ranks");
    tcase_set_timeout(ranks_tc, 30);
    tcase_add_checked_fixture(ranks_tc, setup, NULL);
    int nw = (int)(sizeof worlds / sizeof worlds[0]);
    tcase_add_loop_test(ranks_tc, collectives_move_real_data, 0, nw);
    tcase_add_loop_test(ranks_tc, in_progress_inside_groups, 0, nw);
    tcase_add_loop_test(ranks_tc, comm_stream_waits_for_the_gradients_event,
                        0, nw);
    tcase_add_loop_test(ranks_tc, stalled_enqueue_ends_within_timeout, 0, nw);
    tcase_add_loop_test(ranks_tc, half_precision_sums, 0, nw);
    tcase_add_loop_test(ranks_tc, int8_averages_over_nccl, 0, nw);
    tcase_add_loop_test(ranks_tc, int8_sees_a_nan_on_one_rank, 0, nw);
    tcase_add_loop_test(ranks_tc, int8_reads_three_values_on_the_host, 0, nw);
    tcase_add_loop_test(ranks_tc, split_stall_aborts_the_parent_and_frees_the_child,
                        0, nw);
    tcase_add_loop_test(ranks_tc, split_failure_lands_on_the_parent, 0, nw);
    tcase_add_loop_test(ranks_tc, teardown_ends_by_the_deadline, 0, nw);
    tcase_add_loop_test(ranks_tc, teardown_finalizes_then_destroys, 0, nw);
    tcase_add_loop_test(ranks_tc, async_error_reaches_a_hooks_test, 0, nw);
    tcase_add_loop_test(ranks_tc, async_error_on_another_communicator_is_reported,
                        0, nw);
    tcase_add_loop_test(ranks_tc, more_ranks_than_gpus_is_named, 0, nw);
    tcase_add_loop_test(ranks_tc, one_gpu_per_rank_and_the_callers_device_kept,
                        0, nw);
    suite_add_tcase(s, ranks_tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
