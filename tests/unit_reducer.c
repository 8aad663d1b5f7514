/* unit_reducer.c: the reducer (core/reducer.c) over the fake communicator
 * (tests/fake_comm.h): RANKS ranks as threads of this process, each with a
 * context of its own holding one model of four parameters, one bucket
 * each, reduced by the allreduce hook (the plugin the build made).  What
 * a job over MPI would do, without MPI: the order buckets are launched
 * in, the averages, steps that accumulate, a joined rank's shadow steps,
 * and a collective that fails; and the short time slice its
 * communication thread asks for. */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "core/context.h"
#include "fake_comm.h"
#include "unit.h"

#define RANKS 4
#define NPARAMS 4
#define MOST 16 /* elements of the largest parameter */

/* Parameter i's elements: distinct sizes, so the fake's log of counts
 * says which bucket each collective reduced. */
static const size_t numel[NPARAMS] = {5, 7, 11, 13};

typedef struct rank_run rank_run;
typedef void (*scenario_fn)(rank_run *r);

struct rank_run {
    fake_world *w;
    int rank;
    scenario_fn scenario;
    ddph_ctx *ctx;
    ddph_model *m;
    float grad[NPARAMS][MOST];
    /* What the scenario saw, asserted on by the test's thread. */
    ddph_status st;
    char msg[DDPH__ERR_LEN];
    int64_t calls_after_accumulating;
    int joined; /* join test: this rank shadows the others' step */
    int order[NPARAMS]; /* the order its backward marks parameters ready */
};

/* Rank r's gradient of parameter i at element k, on `pass` (1, 2...):
 * small multiples of 1/4, so sums and averages over 4 ranks are exact. */
static float grad_value(int r, int i, size_t k, int pass)
{
    return (float)((r + 1) * (i + 1) * pass) + 0.25f * (float)k;
}

static ddph_status open_rank(rank_run *r, ddph_err *e)
{
    ddph_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return ddph__fail(e, DDPH_ERR_NOMEM, "out of memory");
    r->ctx = ctx;
    ddph__logger_init(&ctx->log);
    ctx->log.rank = r->rank;
    ddph__timeline_init(&ctx->timeline, 0);
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_cond_init(&ctx->done, NULL);
    ddph_status st = ddph__config_defaults(&ctx->cfg, e);
    if (st != DDPH_OK)
        return st;
    free(ctx->cfg.plugin_path);
    ctx->cfg.plugin_path = ddph__strdup(unit_env("DDPH_TEST_PLUGIN_DIR"));
    ctx->cfg.lanes = 1;
    ctx->comm = fake_comm(r->w, r->rank);
    ctx->control = fake_control(r->w, r->rank);
    ctx->join_scale = 1.0;
    st = ddph__reducer_start(ctx, e);
    if (st != DDPH_OK)
        return st;
    /* One model, one bucket per parameter (caps of 1 byte). */
    if ((st = ddph_model_create(ctx, "unit", &r->m)) != DDPH_OK ||
        (st = ddph_model_set_bucket_caps(r->m, DDPH_CAP_MIN_MB,
                                         DDPH_CAP_MIN_MB)) != DDPH_OK)
        return ddph__fail(e, st, "%s", ctx->error);
    for (int i = 0; i < NPARAMS; i++) {
        char name[16];
        int64_t shape = (int64_t)numel[i];
        snprintf(name, sizeof name, "p%d", i);
        st = ddph_model_add_param(r->m, name, r->grad[i], &shape, 1, DDPH_F32,
                                  DDPH_CPU, NULL);
        if (st != DDPH_OK)
            return ddph__fail(e, st, "%s", ctx->error);
    }
    st = ddph__model_build(r->m, e);
    r->m->finalized = st == DDPH_OK;
    return st;
}

static void close_rank(rank_run *r)
{
    ddph_ctx *ctx = r->ctx;
    if (!ctx)
        return;
    ddph__reducer_stop(ctx);
    for (int i = 0; i < ctx->nmodels; i++)
        ddph__model_free(ctx->models[i]);
    free(ctx->models);
    ddph__config_free(&ctx->cfg);
    pthread_mutex_destroy(&ctx->mu);
    pthread_cond_destroy(&ctx->done);
    free(ctx);
    r->ctx = NULL;
}

static void fill(rank_run *r, int pass, int add)
{
    for (int i = 0; i < NPARAMS; i++)
        for (size_t k = 0; k < numel[i]; k++) {
            float v = r->joined ? 0.0f : grad_value(r->rank, i, k, pass);
            r->grad[i][k] = add ? r->grad[i][k] + v : v;
        }
}

/* One step of the model: every parameter marked ready in r->order, then
 * the wait. */
static ddph_status step(rank_run *r, int syncs, ddph_err *e)
{
    ddph_ctx *ctx = r->ctx;
    ctx->step_models = &r->m;
    ctx->nstep_models = 1;
    ctx->syncs = syncs;
    ddph_status st = ddph__reducer_begin(r->m, e);
    for (int j = 0; j < NPARAMS && st == DDPH_OK; j++)
        st = ddph__reducer_ready(r->m, r->order[j], e);
    if (st == DDPH_OK)
        st = ddph__reducer_wait(ctx, e);
    ctx->step_models = NULL;
    ctx->nstep_models = 0;
    return st;
}

static void *rank_thread(void *arg)
{
    rank_run *r = arg;
    ddph_err e;
    e.msg[0] = '\0';
    r->st = open_rank(r, &e);
    if (r->st == DDPH_OK)
        r->scenario(r);
    else
        snprintf(r->msg, sizeof r->msg, "%s", e.msg);
    close_rank(r);
    return NULL;
}

/* Runs `scenario` on RANKS threads over one fake world; `plant`, when not
 * NULL, prepares the world first.  The ranks' results are in runs. */
static fake_world *run_ranks(scenario_fn scenario, rank_run runs[RANKS],
                             void (*prepare)(fake_world *w,
                                             rank_run runs[RANKS]))
{
    fake_world *w = fake_world_new(RANKS);
    ck_assert_ptr_nonnull(w);
    pthread_t threads[RANKS];
    for (int r = 0; r < RANKS; r++) {
        runs[r] = (rank_run){.w = w, .rank = r, .scenario = scenario};
        for (int j = 0; j < NPARAMS; j++)
            runs[r].order[j] = j; /* registration order */
    }
    if (prepare)
        prepare(w, runs);
    for (int r = 0; r < RANKS; r++)
        ck_assert_int_eq(pthread_create(&threads[r], NULL, rank_thread,
                                        &runs[r]), 0);
    for (int r = 0; r < RANKS; r++)
        pthread_join(threads[r], NULL);
    return w;
}

static void one_synced_step(rank_run *r)
{
    ddph_err e;
    fill(r, 1, 0);
    r->st = step(r, 1, &e);
    if (r->st != DDPH_OK)
        snprintf(r->msg, sizeof r->msg, "%s", e.msg);
}

/* The average over the ranks of pass 1 (and, with passes = 2, pass 2
 * added): what every rank's gradients must hold after a synced step. */
static float mean_value(int i, size_t k, int passes, int ranks, double by)
{
    double sum = 0;
    for (int r = 0; r < ranks; r++)
        for (int pass = 1; pass <= passes; pass++)
            sum += grad_value(r, i, k, pass);
    return (float)(sum / by);
}

static void assert_all_ok(const rank_run runs[RANKS])
{
    for (int r = 0; r < RANKS; r++)
        ck_assert_msg(runs[r].st == DDPH_OK, "rank %d: %s: %s", r,
                      ddph_status_name(runs[r].st), runs[r].msg);
}

static void assert_averaged(const rank_run runs[RANKS], int passes,
                            int ranks, double by)
{
    for (int r = 0; r < RANKS; r++)
        for (int i = 0; i < NPARAMS; i++)
            for (size_t k = 0; k < numel[i]; k++) {
                float want = mean_value(i, k, passes, ranks, by);
                ck_assert_msg(fabsf(runs[r].grad[i][k] - want) <=
                                  1e-6f * fabsf(want),
                              "rank %d p%d[%zu] = %g, the average is %g", r,
                              i, k, runs[r].grad[i][k], want);
            }
}

/* ---- bucket order -------------------------------------------------------- */

/* Each rank marks its parameters ready in an order of its own. */
static void shuffle_orders(fake_world *w, rank_run runs[RANKS])
{
    (void)w;
    static const int orders[RANKS][NPARAMS] = {
        {0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}};
    for (int r = 0; r < RANKS; r++)
        memcpy(runs[r].order, orders[r], sizeof orders[r]);
}

START_TEST(buckets_launch_in_index_order_on_every_rank)
{
    rank_run runs[RANKS];
    fake_world *w = run_ranks(one_synced_step, runs, shuffle_orders);
    assert_all_ok(runs);
    /* Bucket 0 holds the last parameter registered (a backward pass
     * finishes it first): the launches are p3, p2, p1, p0 whatever order
     * the gradients came in, the same on every rank. */
    for (int r = 0; r < RANKS; r++) {
        ck_assert_int_eq(fake_calls(w, r), NPARAMS);
        for (int b = 0; b < NPARAMS; b++) {
            fake_call c = fake_call_at(w, r, b);
            ck_assert_str_eq(c.what, "allreduce");
            ck_assert_msg(c.count == numel[NPARAMS - 1 - b],
                          "rank %d: collective %d reduced %zu elements, "
                          "bucket %d has %zu",
                          r, b, c.count, b, numel[NPARAMS - 1 - b]);
        }
    }
    assert_averaged(runs, 1, RANKS, RANKS);
    fake_world_free(w);
}
END_TEST

/* ---- accumulation -------------------------------------------------------- */

/* A step that does not synchronise (no_sync), then one that does: the
 * first leaves the gradients where the trainer accumulates them and calls
 * no collective; the second averages the sum of both passes. */
static void accumulate_then_sync(rank_run *r)
{
    ddph_err e;
    fill(r, 1, 0);
    r->st = step(r, 0, &e);
    r->calls_after_accumulating = fake_calls(r->w, r->rank);
    for (int i = 0; r->st == DDPH_OK && i < NPARAMS; i++)
        for (size_t k = 0; k < numel[i]; k++)
            if (r->grad[i][k] != grad_value(r->rank, i, k, 1)) {
                r->st = DDPH_ERR_STATE;
                snprintf(r->msg, sizeof r->msg,
                         "p%d[%zu] changed in a step that does not sync", i,
                         k);
                return;
            }
    if (r->st == DDPH_OK) {
        fill(r, 2, 1); /* the trainer's backward adds pass 2 */
        r->st = step(r, 1, &e);
    }
    if (r->st != DDPH_OK && !r->msg[0])
        snprintf(r->msg, sizeof r->msg, "%s", e.msg);
}

START_TEST(accumulated_steps_sync_their_sum)
{
    rank_run runs[RANKS];
    fake_world *w = run_ranks(accumulate_then_sync, runs, NULL);
    assert_all_ok(runs);
    for (int r = 0; r < RANKS; r++) {
        ck_assert_int_eq(runs[r].calls_after_accumulating, 0);
        ck_assert_int_eq(fake_calls(w, r), NPARAMS);
    }
    assert_averaged(runs, 2, RANKS, RANKS);
    fake_world_free(w);
}
END_TEST

/* ---- Join ---------------------------------------------------------------- */

/* The last rank has joined: it shadows the others' step with zeros
 * through every bucket.  By default the sum of the ranks still training
 * is divided by the initial world size; with divide_by_initial_world_size
 * = false the host scales each bucket by W / active (join.h). */
static double join_scale;

static void last_rank_joined(fake_world *w, rank_run runs[RANKS])
{
    (void)w;
    runs[RANKS - 1].joined = 1;
}

static void shadowed_step(rank_run *r)
{
    r->ctx->join_scale = join_scale;
    one_synced_step(r);
}

static void check_join(double scale, double divisor)
{
    join_scale = scale;
    rank_run runs[RANKS];
    fake_world *w = run_ranks(shadowed_step, runs, last_rank_joined);
    assert_all_ok(runs);
    /* The joined rank met every collective of the step. */
    for (int r = 0; r < RANKS; r++)
        ck_assert_int_eq(fake_calls(w, r), NPARAMS);
    assert_averaged(runs, 1, RANKS - 1, divisor);
    fake_world_free(w);
}

START_TEST(join_shadow_steps_average_over_the_initial_world)
{
    check_join(1.0, RANKS);
}
END_TEST

START_TEST(join_shadow_steps_average_over_the_ranks_training)
{
    check_join((double)RANKS / (RANKS - 1), RANKS - 1);
}
END_TEST

/* ---- a failing collective ------------------------------------------------ */

/* Rank 2's second collective (bucket 1) fails. */
static void fail_bucket_1_on_rank_2(fake_world *w, rank_run runs[RANKS])
{
    (void)runs;
    fake_fail_at(w, 2, 1, DDPH_ERR_BACKEND);
}

START_TEST(a_failed_collective_names_its_bucket_and_rank_everywhere)
{
    rank_run runs[RANKS];
    fake_world *w = run_ranks(one_synced_step, runs, fail_bucket_1_on_rank_2);
    const char *why;
    ck_assert(fake_broken(w, &why));
    for (int r = 0; r < RANKS; r++) {
        ck_assert_msg(runs[r].st == DDPH_ERR_BACKEND, "rank %d: %s: %s", r,
                      ddph_status_name(runs[r].st), runs[r].msg);
        ck_assert_msg(strstr(runs[r].msg,
                             "hook 'allreduce' failed on model 'unit' "
                             "bucket 1 (rank 2)"),
                      "rank %d was told: %s", r, runs[r].msg);
        ck_assert_msg(strstr(runs[r].msg, "planted by the test"),
                      "rank %d was told: %s", r, runs[r].msg);
    }
    /* Bucket 0 was reduced before the failure, on every rank. */
    for (int r = 0; r < RANKS; r++)
        ck_assert_int_ge(fake_calls(w, r), 1);
    fake_world_free(w);
}
END_TEST

/* ---- the communication thread's time slice (support/util.c) ------------ */

/* The calling thread's scheduling flags and slice. */
static int own_slice(uint64_t *flags, uint64_t *runtime)
{
    ddph__sched_attr a;
    memset(&a, 0, sizeof a);
    if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0) != 0)
        return -1;
    *flags = a.flags;
    *runtime = a.runtime;
    return 0;
}

static void *child_slice(void *arg)
{
    uint64_t flags, *runtime = arg;
    if (own_slice(&flags, runtime) != 0)
        *runtime = 0;
    return NULL;
}

typedef struct slice_seen {
    int rc, got;
    uint64_t flags, runtime, child_runtime;
} slice_seen;

/* What reducer.c's lane thread does first, on a thread of its own. */
static void *ask_for_slice(void *arg)
{
    slice_seen *s = arg;
    s->rc = ddph__thread_short_slice();
    s->got = own_slice(&s->flags, &s->runtime) == 0;
    pthread_t t;
    if (pthread_create(&t, NULL, child_slice, &s->child_runtime) == 0)
        pthread_join(t, NULL);
    return NULL;
}

START_TEST(the_communication_thread_asks_for_a_short_slice)
{
    slice_seen s = {0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, ask_for_slice, &s), 0);
    pthread_join(t, NULL);
    /* Refused (seccomp, an old libc's headers) is allowed, and logged by
     * the runtime; any other failure is a bug in the request. */
    ck_assert_msg(s.rc == 0 || s.rc == EPERM || s.rc == ENOSYS,
                  "ddph__thread_short_slice: %s", strerror(s.rc));
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof u.release, "unknown");
    if (s.rc != 0 || !s.got ||
        sscanf(u.release, "%d.%d", &major, &minor) != 2 ||
        major * 100 + minor < 612) {
        printf("short slice: not checked (request %s, kernel %s: custom "
               "slices need Linux 6.12)\n",
               s.rc ? strerror(s.rc) : "accepted", u.release);
        return;
    }
    ck_assert_uint_eq(s.runtime, DDPH__SHORT_SLICE_NS);
    ck_assert_msg(s.flags & DDPH__SCHED_RESET_ON_FORK,
                  "reset-on-fork not set: flags %#llx",
                  (unsigned long long)s.flags);
    /* Threads it starts (CUDA's, UCX's, a hook's) keep the default. */
    ck_assert_uint_ne(s.child_runtime, DDPH__SHORT_SLICE_NS);
    ck_assert_uint_ne(s.child_runtime, 0);
}
END_TEST

Suite *reducer_suite(void)
{
    Suite *s = suite_create("reducer");
    TCase *tc = tcase_create("fake communicator");
    /* A rank that never comes fails the fake's collectives after
     * FAKE_COMM_WAIT_S: the test fails rather than hangs. */
    tcase_set_timeout(tc, 3 * FAKE_COMM_WAIT_S);
    tcase_add_test(tc, buckets_launch_in_index_order_on_every_rank);
    tcase_add_test(tc, accumulated_steps_sync_their_sum);
    tcase_add_test(tc, join_shadow_steps_average_over_the_initial_world);
    tcase_add_test(tc, join_shadow_steps_average_over_the_ranks_training);
    tcase_add_test(tc, a_failed_collective_names_its_bucket_and_rank_everywhere);
    tcase_add_test(tc, the_communication_thread_asks_for_a_short_slice);
    suite_add_tcase(s, tc);
    return s;
}
