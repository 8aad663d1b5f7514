/* scenarios_reduce.c: the scenarios of test_runtime's registry on averages, views, lanes, overlap and shape mismatches. */
#include "build-config.h"

#include "scenario.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* lanes > 1: the allreduce hook allows concurrent buckets, so they spread
 * over that many communication lanes; the average must not change. */
static void run_average(int view, int lanes)
{
    char extra[128];
    snprintf(extra, sizeof extra, "%s\nlanes = %d",
             view ? "gradient_as_bucket_view = true" : "", lanes);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    /* The CPU backend chooses no GPU. */
    CHECK(ddph_cuda_device(ctx) == -1, "ddph_cuda_device = %d on the mpi "
          "backend, not -1", ddph_cuda_device(ctx));
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m);
    CHECK(nb >= 3, "expected several buckets, got %d", nb);
    float *g[NP];
    for (int i = 0; i < NP; i++) {
        void *p;
        CHECK_OK(ddph_model_grad_ptr(fx.m, i, &p), ctx);
        CHECK(view ? p != fx.grads[i] : p == fx.grads[i],
              "grad_ptr of p%d", i);
        g[i] = p;
    }
    const int steps = 3;
    for (int s = 0; s < steps; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        CHECK(ddph_step_syncs(ctx), "step %d should sync", s);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx.numel[i]; k++)
                g[i][k] = value(check_rank, s, i, k);
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int i = 0; i < NP; i++)
            for (size_t k = 0; k < fx.numel[i]; k++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += value(r, s, i, k) / (float)world;
                CHECK(g[i][k] == want, "p%d[%zu] = %g, want %g at step %d", i,
                      k, g[i][k], want, s);
            }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    for (int b = 0; b < nb; b++) {
        ddph_bucket_info info;
        CHECK_OK(ddph_model_bucket_info(fx.m, b, &info), ctx);
        CHECK(info.hook_calls == (uint64_t)steps,
              "bucket %d: %llu hook calls, want %d", b,
              (unsigned long long)info.hook_calls, steps);
        CHECK(info.bytes_on_wire == (uint64_t)steps * info.bytes,
              "bucket %d: %llu bytes on the wire, want %zu per step", b,
              (unsigned long long)info.bytes_on_wire, info.bytes);
    }
    ddph_close(ctx);
    fixture_free(&fx);
}

/* Several lanes: allreduce's buckets spread over 3 lanes (copies and
 * views); fp16, which does not allow it, stays on lane 0 of the same job;
 * a job file whose lanes differ between ranks fails on every rank. */
void run_lanes(void)
{
    run_average(0, 3);
    run_average(1, 3);
    ddph_ctx *ctx =
        open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                 "lanes = 3\n[model.half]\nhook = fp16\n[runtime]");
    model_fixture a, h;
    fx_named(ctx, &a, "net");
    fx_named(ctx, &h, "half");
    CHECK_OK(ddph_model_finalize(a.m), ctx);
    CHECK_OK(ddph_model_finalize(h.m), ctx);
    ddph_model *both[2] = {a.m, h.m};
    CHECK_OK(ddph_step_begin(ctx, both, 2), ctx);
    for (int i = NP - 1; i >= 0; i--) {
        CHECK_OK(ddph_grad_ready(a.m, i), ctx);
        CHECK_OK(ddph_grad_ready(h.m, i), ctx);
    }
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK(ddph_close(ctx) == DDPH_OK, "close");
    fixture_free(&a);
    fixture_free(&h);
    char mine[32];
    snprintf(mine, sizeof mine, "lanes = %d", check_rank == 0 ? 2 : 1);
    ddph_ctx *bad;
    ddph_status st = ddph_open(job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                                   mine),
                               NULL, NULL, &bad);
    CHECK(st == DDPH_ERR_CONFIG, "mismatched lanes opened (%s)",
          ddph_status_name(st));
}

void run_overlap(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    ddph_bucket_info b0;
    CHECK_OK(ddph_model_bucket_info(fx.m, 0, &b0), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    /* Backward reaches bucket 0's parameters first... */
    for (int j = 0; j < b0.nparams; j++)
        CHECK_OK(ddph_grad_ready(fx.m, b0.params[j]), ctx);
    /* ...and its hook must start while parameter 0 is still not ready. */
    double waited = 0;
    for (;;) {
        ddph_bucket_info now;
        CHECK_OK(ddph_model_bucket_info(fx.m, 0, &now), ctx);
        if (now.hook_calls >= 1)
            break;
        CHECK(waited < 10.0, "bucket 0's hook did not start within 10 s "
                             "while backward was still running");
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        waited += 1e-3;
    }
    for (int i = NP - 1; i >= 0; i--) {
        int in_b0 = 0;
        for (int j = 0; j < b0.nparams; j++)
            in_b0 |= b0.params[j] == i;
        if (!in_b0)
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    }
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    ddph_close(ctx);
    fixture_free(&fx);
}

void run_mismatch(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, check_rank == world - 1 ? 1 : 0); /* the last rank differs */
    ddph_status st = ddph_model_finalize(fx.m);
    CHECK(st == DDPH_ERR_MISMATCH, "finalize returned %s",
          ddph_status_name(st));
    const char *msg = ddph_last_error(ctx);
    char want[200];
    snprintf(want, sizeof want,
             "ranks disagree on the configuration: rank 0 has 'param 2 p2 "
             "f32 cpu shape 64x32' where rank %d has 'param 2 p2 f32 cpu "
             "shape 65x32'",
             world - 1);
    CHECK(strstr(msg, want), "message '%s' lacks '%s'", msg, want);
    ddph_close(ctx);
    fixture_free(&fx);
}


void run_average_copies(void)
{
    run_average(0, 1);
}

void run_view(void)
{
    run_average(1, 1);
}

/* What the bucket callback saw, checked by the trainer after step_wait. */
typedef struct callback_log {
    ddph_ctx *ctx;
    pthread_t trainer;
    model_fixture *fx;
    float *g[NP];
    int world, step, nbuckets;
    int bucket_of[NP];  /* the layout, read before the steps (the
                           callback may not call the API) */
    int calls[64];      /* per bucket, this step */
    atomic_int returned; /* callbacks that have returned, this step */
    int on_trainer;     /* calls made on the trainer's thread */
    int wrong_status;
    char first_wrong[200]; /* the first gradient not yet averaged */
} callback_log;

static void on_bucket_done(void *user, ddph_model *m, int bucket,
                           ddph_status status, const char *message)
{
    callback_log *log = user;
    if (pthread_equal(pthread_self(), log->trainer))
        log->on_trainer++;
    if (status != DDPH_OK || message != NULL || m != log->fx->m)
        log->wrong_status++;
    if (bucket >= 0 && bucket < 64)
        log->calls[bucket]++;
    for (int i = 0; i < NP; i++) {
        if (log->bucket_of[i] != bucket)
            continue;
        for (size_t k = 0; k < log->fx->numel[i]; k++) {
            float want = 0;
            for (int r = 0; r < log->world; r++)
                want += value(r, log->step, i, k) / (float)log->world;
            if (log->g[i][k] != want && !log->first_wrong[0])
                snprintf(log->first_wrong, sizeof log->first_wrong,
                         "bucket %d: p%d[%zu] = %g, want %g at step %d",
                         bucket, i, k, log->g[i][k], want, log->step);
        }
    }
    /* The last bucket's callback is slow: step_wait must wait for it. */
    if (bucket == log->nbuckets - 1) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&log->returned, 1);
}

static void run_callback(int view, int lanes)
{
    char extra[128];
    snprintf(extra, sizeof extra, "%s\nlanes = %d",
             view ? "gradient_as_bucket_view = true" : "", lanes);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    model_fixture fx;
    setup(ctx, &fx, 0);
    callback_log log = {.ctx = ctx, .trainer = pthread_self(), .fx = &fx,
                        .world = ddph_world_size(ctx)};
    /* Set before finalize, as ddphook.torch does. */
    CHECK_OK(ddph_model_set_bucket_callback(fx.m, on_bucket_done, &log), ctx);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    log.nbuckets = ddph_model_bucket_count(fx.m);
    CHECK(log.nbuckets >= 3 && log.nbuckets <= 64, "%d buckets", log.nbuckets);
    for (int b = 0; b < log.nbuckets; b++) {
        ddph_bucket_info info;
        CHECK_OK(ddph_model_bucket_info(fx.m, b, &info), ctx);
        for (int j = 0; j < info.nparams; j++)
            log.bucket_of[info.params[j]] = b;
    }
    for (int i = 0; i < NP; i++) {
        void *p;
        CHECK_OK(ddph_model_grad_ptr(fx.m, i, &p), ctx);
        log.g[i] = p;
    }
    const int steps = 3;
    for (int s = 0; s < steps; s++) {
        log.step = s;
        atomic_store(&log.returned, 0);
        memset(log.calls, 0, sizeof log.calls);
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        /* A call out of order: ddph_close then reports it (views run). */
        CHECK(!view || ddph_model_set_bucket_callback(fx.m, NULL, NULL) ==
                           DDPH_ERR_STATE,
              "set_bucket_callback accepted inside a step");
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx.numel[i]; k++)
                log.g[i][k] = value(check_rank, s, i, k);
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        int returned = atomic_load(&log.returned);
        CHECK(returned == log.nbuckets,
              "step %d: step_wait returned after %d of %d callbacks", s,
              returned, log.nbuckets);
        for (int b = 0; b < log.nbuckets; b++)
            CHECK(log.calls[b] == 1, "step %d: bucket %d called back %d times",
                  s, b, log.calls[b]);
        CHECK(!log.first_wrong[0], "at the callback, %s", log.first_wrong);
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    CHECK(log.on_trainer == 0, "%d callbacks on the trainer's thread",
          log.on_trainer);
    CHECK(log.wrong_status == 0, "%d callbacks with a failure status",
          log.wrong_status);
    /* Not on a step that only accumulates, nor once cleared. */
    atomic_store(&log.returned, 0);
    CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1, DDPH_STEP_NO_SYNC), ctx);
    mark_all_ready(ctx, fx.m);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK(atomic_load(&log.returned) == 0,
          "callbacks on a step that accumulates");
    CHECK_OK(ddph_model_set_bucket_callback(fx.m, NULL, NULL), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    mark_all_ready(ctx, fx.m);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK(atomic_load(&log.returned) == 0, "callbacks once cleared");
    CHECK(ddph_close(ctx) == (view ? DDPH_ERR_STATE : DDPH_OK), "close");
    fixture_free(&fx);
}

/* The bucket callback: on a communication thread, once per bucket per
 * synchronising step, the averages already in the trainer's memory (with
 * copies, one lane; with views, three lanes), step_wait after the last
 * callback has returned; refused inside a step. */
void run_bucket_callback(void)
{
    run_callback(0, 1);
    run_callback(1, 3);
}
