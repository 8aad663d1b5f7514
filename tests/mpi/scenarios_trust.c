/* scenarios_trust.c: no step returns DDPH_OK unless every rank did the
 * same step (step_check.h): models stepped in different orders, a
 * NO_SYNC on one rank, trainer calls that differ, Join's traps, and
 * ddph_close returning the job's outcome.  The hooks that skip, add or
 * reorder collectives are in tests/step_agreement.sh. */
#include "build-config.h"

#include "scenario.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int my_rank(void)
{
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

static int world(void)
{
    int w;
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    return w;
}

static void fill(model_fixture *fx, int rank, int step, int salt)
{
    for (int p = 0; p < NP; p++)
        for (size_t i = 0; i < fx->numel[p]; i++)
            fx->grads[p][i] = value(rank, step, p + salt, i);
}

/* The exact average over the ranks of fill()'s values. */
static void check_average(const model_fixture *fx, int step, int salt,
                          const char *what)
{
    int w = world();
    for (int p = 0; p < NP; p++)
        for (size_t i = 0; i < fx->numel[p]; i++) {
            double want = 0;
            for (int r = 0; r < w; r++)
                want += value(r, step, p + salt, i);
            want /= w;
            CHECK(fabs(fx->grads[p][i] - want) < 1e-5,
                  "%s: step %d param %d [%zu] = %g, want %g", what, step, p,
                  i, fx->grads[p][i], want);
        }
}

/* Two models of the same shapes stepped together, their backward passes
 * reaching them in an order that depends on the rank (as in multi-task
 * trainers): each model's buckets launch in finalize order on every rank,
 * so each is averaged with itself. */
void run_models_crossing(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture a, b;
    fx_named(ctx, &a, "a");
    fx_named(ctx, &b, "b");
    CHECK_OK(ddph_model_finalize(a.m), ctx);
    CHECK_OK(ddph_model_finalize(b.m), ctx);
    int rank = my_rank();
    for (int step = 0; step < 4; step++) {
        /* Odd ranks list them the other way round too. */
        ddph_model *both[2] = {rank % 2 ? b.m : a.m, rank % 2 ? a.m : b.m};
        CHECK_OK(ddph_step_begin(ctx, both, 2), ctx);
        fill(&a, rank, step, 0);
        fill(&b, rank, step, 100);
        mark_all_ready(ctx, both[0]);
        mark_all_ready(ctx, both[1]);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
        check_average(&a, step, 0, "model a");
        check_average(&b, step, 100, "model b");
    }
    CHECK_OK(ddph_close(ctx), NULL);
    fixture_free(&a);
    fixture_free(&b);
}

/* The step on which the last rank differs: step_wait (or the trainer call
 * before it) fails on every rank, with a message containing `want`. */
static void expect_failed_step(ddph_ctx *ctx, ddph_status st,
                               const char *want)
{
    CHECK(st == DDPH_ERR_MISMATCH, "want DDPH_ERR_MISMATCH, got %s: %s",
          ddph_status_name(st), ddph_last_error(ctx));
    CHECK(strstr(ddph_last_error(ctx), want), "'%s' does not say '%s'",
          ddph_last_error(ctx), want);
    st = ddph_close(ctx);
    CHECK(st == DDPH_ERR_MISMATCH, "close: %s", ddph_status_name(st));
}

/* The last rank flags step 2 DDPH_STEP_NO_SYNC that the others
 * synchronise, and synchronises one step later: the others' step 2 met
 * its step 3 (the same iteration, the same collectives) with one backward
 * pass against two. */
void run_no_sync_one_rank(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int odd = my_rank() == world() - 1;
    for (int step = 0; step < 5; step++) {
        unsigned flags = odd && step == 2 ? DDPH_STEP_NO_SYNC : 0;
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1, flags), ctx);
        fill(&fx, my_rank(), step, 0);
        mark_all_ready(ctx, fx.m);
        ddph_status st = ddph_step_wait(ctx);
        if (st != DDPH_OK) {
            CHECK(step == (odd ? 3 : 2), "failed at step %d", step);
            expect_failed_step(ctx, st, "synchronised different backward "
                                        "passes");
            fixture_free(&fx);
            return;
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    CHECK(0, "every step returned DDPH_OK");
}

/* One synchronised step, then the trainer call `kind` with per-rank
 * arguments (the last rank's differ), which fails on every rank. */
static void helper_mismatch(const char *kind, const char *want)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    int rank = my_rank(), last = world() - 1, odd = rank == last;
    double v[2] = {(double)rank, 10.0 * rank};
    CHECK_OK(ddph_average_f64(ctx, v, 2), ctx); /* the same on every rank */
    ddph_status st = DDPH_OK;
    char text[64] = "";
    if (strcmp(kind, "root") == 0)
        st = ddph_broadcast(ctx, text, sizeof text, odd ? last : 0);
    else if (strcmp(kind, "size") == 0)
        st = ddph_broadcast(ctx, text, odd ? 32 : 64, 0);
    else if (strcmp(kind, "op") == 0)
        st = ddph_allreduce_f64(ctx, v, 2, odd ? DDPH_MAX : DDPH_SUM);
    else if (strcmp(kind, "count") == 0)
        st = ddph_average_f64(ctx, v, odd ? 1 : 2);
    else if (strcmp(kind, "kind") == 0)
        st = odd ? ddph_barrier(ctx) : ddph_average_f64(ctx, v, 2);
    expect_failed_step(ctx, st, want);
}

void run_helper_root(void)
{
    helper_mismatch("root", "ddph_broadcast(64 x u8, root ");
}

void run_helper_size(void)
{
    helper_mismatch("size", "the broadcast sizes differ");
}

void run_helper_op(void)
{
    helper_mismatch("op", "ddph_allreduce_f64(2 x f64, max)");
}

void run_helper_count(void)
{
    helper_mismatch("count", "ddph_average_f64(1 x f64, sum)");
}

void run_helper_kind(void)
{
    helper_mismatch("kind", "ddph_barrier(0 x u8)");
}

/* The last rank averages one value more, right before the loss average
 * every rank makes: no rank's next step_wait returns DDPH_OK. */
void run_helper_extra(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int rank = my_rank(), odd = rank == world() - 1;
    ddph_status st = DDPH_OK;
    for (int step = 0; step < 3 && st == DDPH_OK; step++) {
        double loss = rank + step;
        if (odd && step == 1)
            st = ddph_average_f64(ctx, &loss, 1);
        if (st == DDPH_OK)
            st = ddph_average_f64(ctx, &loss, 1);
        if (st == DDPH_OK)
            st = ddph_step_begin(ctx, &fx.m, 1);
        if (st == DDPH_OK) {
            fill(&fx, rank, step, 0);
            mark_all_ready(ctx, fx.m);
            st = ddph_step_wait(ctx);
        }
        if (st == DDPH_OK)
            st = ddph_step_end(ctx);
        CHECK(st == DDPH_OK || step == 1, "step %d failed: %s", step,
              ddph_last_error(ctx));
    }
    CHECK(st != DDPH_OK, "every call returned DDPH_OK");
    CHECK(ddph_close(ctx) != DDPH_OK, "close returned DDPH_OK");
    fixture_free(&fx);
}

static ddph_ctx *join_job(const char *extra)
{
    char text[256];
    snprintf(text, sizeof text, "join = true\n%s", extra);
    return open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", text);
}

/* Rank 0 runs out of data after one step and joins while the others take
 * two more: its gradient memory is zero after ddph_join (the shadowed
 * steps' averages would otherwise enter its next epoch's first step), and
 * a next epoch on every rank averages what each rank gives. */
void run_join_stale(void)
{
    ddph_ctx *ctx = join_job("");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int rank = my_rank(), batches = rank == 0 ? 1 : 3;
    for (int step = 0; step < batches; step++) {
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1,
                                       step == batches - 1
                                           ? DDPH_STEP_END_OF_DATA
                                           : 0),
                 ctx);
        fill(&fx, rank, step, 0);
        mark_all_ready(ctx, fx.m);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
        for (int p = 0; p < NP; p++) /* the trainer's zero_grad */
            memset(fx.grads[p], 0, fx.numel[p] * sizeof(float));
    }
    CHECK_OK(ddph_join(ctx), ctx);
    for (int p = 0; p < NP; p++)
        for (size_t i = 0; i < fx.numel[p]; i++)
            CHECK(fx.grads[p][i] == 0, "after ddph_join: param %d [%zu] = %g",
                  p, i, fx.grads[p][i]);
    /* The next epoch accumulates into zeros: its average is exact. */
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    for (int p = 0; p < NP; p++)
        for (size_t i = 0; i < fx.numel[p]; i++)
            fx.grads[p][i] += value(rank, 7, p, i);
    mark_all_ready(ctx, fx.m);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    check_average(&fx, 7, 0, "the next epoch");
    CHECK_OK(ddph_close(ctx), NULL);
    fixture_free(&fx);
}

/* Accumulating 4 passes a synchronisation, the last rank joins with its
 * window open (its last batch not flagged DDPH_STEP_END_OF_DATA): refused
 * on every rank, saying what to do. */
void run_join_open_window(void)
{
    ddph_ctx *ctx = join_job("[accumulate]\nsteps = 4\n");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int rank = my_rank(), odd = rank == world() - 1;
    ddph_status st = DDPH_OK;
    for (int step = 0; step < (odd ? 6 : 8) && st == DDPH_OK; step++) {
        st = ddph_step_begin(ctx, &fx.m, 1);
        if (st == DDPH_OK) {
            fill(&fx, rank, step, 0);
            mark_all_ready(ctx, fx.m);
            st = ddph_step_wait(ctx);
        }
        if (st == DDPH_OK)
            st = ddph_step_end(ctx);
    }
    if (st == DDPH_OK)
        st = ddph_join(ctx);
    CHECK(st == DDPH_ERR_STATE, "want DDPH_ERR_STATE, got %s: %s",
          ddph_status_name(st), ddph_last_error(ctx));
    CHECK(strstr(ddph_last_error(ctx), "accumulated backward passes of "
                                       "model 'net' not synchronised"),
          "%s", ddph_last_error(ctx));
    CHECK(strstr(ddph_last_error(ctx), "DDPH_STEP_END_OF_DATA"), "%s",
          ddph_last_error(ctx));
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close");
    fixture_free(&fx);
}

/* Under join the last rank flags step 2 DDPH_STEP_NO_SYNC where the
 * others synchronise (run_no_sync_one_rank's misstep): the others' step 2
 * meets its step 3, and every rank fails there, naming it.  With
 * `early_joiner`, rank 0 has one batch and has joined by then: its shadow
 * step meets the mismatch too, and ddph_join fails.  With `odd_batches`
 * 4, the last rank's step 3 ends its data (a window that may be shorter
 * than the others', never longer). */
static void join_extra_no_sync(int early_joiner, int odd_batches)
{
    ddph_ctx *ctx = join_job("");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int rank = my_rank(), last = world() - 1, odd = rank == last;
    int batches = early_joiner && rank == 0 ? 1 : odd ? odd_batches : 5;
    char want[64];
    snprintf(want, sizeof want, "rank %d called the end of its step", last);
    ddph_status st = DDPH_OK;
    int step = 0;
    for (; step < batches && st == DDPH_OK; step++) {
        unsigned flags = odd && step == 2          ? DDPH_STEP_NO_SYNC
                         : step == batches - 1 ? DDPH_STEP_END_OF_DATA
                                                   : 0;
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1, flags), ctx);
        fill(&fx, rank, step, 0);
        mark_all_ready(ctx, fx.m);
        st = ddph_step_wait(ctx);
        if (st == DDPH_OK)
            CHECK_OK(ddph_step_end(ctx), ctx);
    }
    if (st == DDPH_OK) {
        CHECK(early_joiner && rank == 0, "every step returned DDPH_OK");
        st = ddph_join(ctx);
    } else {
        CHECK(step - 1 == (odd ? 3 : 2), "failed at step %d", step - 1);
    }
    CHECK(strstr(ddph_last_error(ctx), "synchronised different backward "
                                       "passes"),
          "%s", ddph_last_error(ctx));
    expect_failed_step(ctx, st, want);
    fixture_free(&fx);
}

void run_join_no_sync_one_rank(void)
{
    join_extra_no_sync(0, 5);
}

void run_join_no_sync_beside_joined(void)
{
    join_extra_no_sync(1, 5);
}

void run_join_no_sync_data_end(void)
{
    join_extra_no_sync(0, 4);
}

/* Rank r's batches in run_join_accumulate. */
static int accumulate_batches(int r)
{
    return 3 + 2 * r;
}

/* Uneven inputs under join, accumulating through DDPH_STEP_NO_SYNC the
 * same way on every rank (PyTorch's no_sync() with Join): rank r has
 * 3 + 2r batches and synchronises every second pass, its last window of
 * one pass at the end of its data, where the ranks still training sum
 * two.  Each synchronising step averages the windows of the ranks still
 * training over the world size. */
void run_join_accumulate(void)
{
    ddph_ctx *ctx = join_job("");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int rank = my_rank(), w = world(), batches = accumulate_batches(rank);
    for (int p = 0; p < NP; p++)
        memset(fx.grads[p], 0, fx.numel[p] * sizeof(float));
    for (int t = 0; t < batches; t++) {
        unsigned flags = t == batches - 1 ? DDPH_STEP_END_OF_DATA
                         : t % 2 == 0     ? DDPH_STEP_NO_SYNC
                                          : 0;
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1, flags), ctx);
        for (int p = 0; p < NP; p++)
            for (size_t i = 0; i < fx.numel[p]; i++)
                fx.grads[p][i] += value(rank, t, p, i);
        mark_all_ready(ctx, fx.m);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        int synced = ddph_step_syncs(ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
        if (!synced)
            continue;
        int from = t - t % 2; /* the window's first pass */
        for (int p = 0; p < NP; p++)
            for (size_t i = 0; i < fx.numel[p]; i++) {
                double want = 0;
                for (int r = 0; r < w; r++)
                    for (int u = from; u < from + 2 &&
                                       u < accumulate_batches(r); u++)
                        want += value(r, u, p, i);
                want /= w;
                CHECK(fabs(fx.grads[p][i] - want) < 1e-5,
                      "window from pass %d: param %d [%zu] = %g, want %g",
                      from, p, i, fx.grads[p][i], want);
                fx.grads[p][i] = 0;
            }
    }
    CHECK_OK(ddph_join(ctx), ctx);
    CHECK_OK(ddph_close(ctx), NULL);
    fixture_free(&fx);
}

/* ddph_close returns the job's outcome on every rank: after a model the
 * ranks disagree on (a clean refusal that leaves the job usable), and
 * after an error only the last rank's call reported. */
void run_close_outcome(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, my_rank() == world() - 1 ? 1 : 0);
    CHECK(ddph_model_finalize(fx.m) == DDPH_ERR_MISMATCH, "finalize");
    ddph_status st = ddph_close(ctx);
    CHECK(st == DDPH_ERR_MISMATCH, "close after a disagreement: %s",
          ddph_status_name(st));
    fixture_free(&fx);

    ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    if (my_rank() == world() - 1)
        CHECK(ddph_barrier(ctx) == DDPH_ERR_STATE, "barrier inside a step");
    mark_all_ready(ctx, fx.m);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    st = ddph_close(ctx);
    CHECK(st == DDPH_ERR_STATE, "close after the last rank's refused call: "
                                "%s",
          ddph_status_name(st));
    fixture_free(&fx);
}
