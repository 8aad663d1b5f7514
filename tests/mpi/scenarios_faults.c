/* scenarios_faults.c: the scenarios of test_runtime's registry on failing hooks, leaked requests, timeouts and misuse. */
#include "build-config.h"

#include "scenario.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A job whose hook is tests/fake_plugins' NAME.so. */
static ddph_ctx *open_fake(const char *name)
{
    char hook[512];
    snprintf(hook, sizeof hook, "%s/%s.so", env("DDPH_TEST_FAKE_DIR"), name);
    return open_job("/nowhere", hook, NULL);
}

/* Every rank's hook fails on bucket 1 at iteration 1: every rank reports a
 * hook failure (its own or a peer's, whichever came first), the job is
 * broken from then on, and ddph_close says so without hanging. */
void run_hook_error(void)
{
    ddph_ctx *ctx = open_fake("failing");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    for (int s = 0; s < 2; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        mark_all_ready(ctx, fx.m);
        ddph_status st = ddph_step_wait(ctx);
        if (s == 0) {
            CHECK(st == DDPH_OK, "%s", ddph_last_error(ctx));
        } else {
            CHECK(st == DDPH_ERR_HOOK, "step %d: %s", s, ddph_status_name(st));
            const char *want[] = {"hook 'fake' failed on model 'net' bucket 1 (rank ",
                                  "DDPH_ERR_HOOK: fake failure on bucket 1 at "
                                  "iteration 1"};
            for (int k = 0; k < 2; k++)
                CHECK(strstr(ddph_last_error(ctx), want[k]), "'%s' lacks '%s'",
                      ddph_last_error(ctx), want[k]);
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    /* Broken: no more steps, and close returns the failure promptly. */
    CHECK(ddph_step_begin(ctx, &fx.m, 1) == DDPH_ERR_HOOK, "step after failure");
    CHECK(strstr(ddph_last_error(ctx), "step_begin: the job has failed"), "%s",
          ddph_last_error(ctx));
    double t0 = MPI_Wtime();
    CHECK(ddph_close(ctx) == DDPH_ERR_HOOK, "close of a failed job");
    CHECK(MPI_Wtime() - t0 < 1.0, "close took %.1f s", MPI_Wtime() - t0);
    fixture_free(&fx);
    end_failed_job("hook-error");
}

/* What a bucket callback heard: per bucket, the status and message. */
typedef struct heard {
    ddph_status status[16];
    char message[16][512];
    int calls[16];
} heard;

static void hear(void *user, ddph_model *m, int bucket, ddph_status status,
                 const char *message)
{
    (void)m;
    heard *h = user;
    if (bucket < 0 || bucket >= 16)
        return;
    h->calls[bucket]++;
    h->status[bucket] = status;
    snprintf(h->message[bucket], sizeof h->message[bucket], "%s",
             message ? message : "(null)");
}

/* failing.so fails bucket 1 at iteration 1 on every rank: its callback
 * hears the failure (this rank's or a peer's, whichever came first), each
 * later bucket a failure too, every bucket once; step_wait fails. */
void run_bucket_callback_error(void)
{
    ddph_ctx *ctx = open_fake("failing");
    model_fixture fx;
    setup(ctx, &fx, 0);
    heard h;
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m);
    CHECK(nb >= 3 && nb <= 16, "%d buckets", nb);
    /* Set after finalize this time, between steps. */
    CHECK_OK(ddph_model_set_bucket_callback(fx.m, hear, &h), ctx);
    for (int s = 0; s < 2; s++) {
        memset(&h, 0, sizeof h);
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        mark_all_ready(ctx, fx.m);
        ddph_status st = ddph_step_wait(ctx);
        for (int b = 0; b < nb; b++)
            CHECK(h.calls[b] == 1, "step %d: bucket %d called back %d times",
                  s, b, h.calls[b]);
        if (s == 0) {
            CHECK(st == DDPH_OK, "%s", ddph_last_error(ctx));
            for (int b = 0; b < nb; b++)
                CHECK(h.status[b] == DDPH_OK, "step 0 bucket %d: %s: %s", b,
                      ddph_status_name(h.status[b]), h.message[b]);
        } else {
            CHECK(st != DDPH_OK, "step 1 did not fail");
            /* Bucket 0 may hear of a peer's failure on bucket 1. */
            CHECK(h.status[0] == DDPH_OK ||
                      strcmp(h.message[0], "(null)") != 0,
                  "bucket 0 failed without a message");
            CHECK(h.status[1] != DDPH_OK &&
                      strstr(h.message[1], "fake failure on bucket 1") &&
                      strstr(h.message[1], "bucket 1 (rank "),
                  "bucket 1: %s: '%s'", ddph_status_name(h.status[1]),
                  h.message[1]);
            for (int b = 2; b < nb; b++)
                CHECK(h.status[b] != DDPH_OK &&
                          strcmp(h.message[b], "(null)") != 0,
                      "bucket %d after the failure: %s: '%s'", b,
                      ddph_status_name(h.status[b]), h.message[b]);
        }
        ddph_step_end(ctx);
    }
    ddph_close(ctx);
    fixture_free(&fx);
    end_failed_job("bucket-callback-error");
}

/* A hook that returns with a nonblocking request it never waited for:
 * the host waits for it (the bucket's memory is in flight) and fails the
 * bucket on every rank with DDPH_ERR_STATE, naming what happened. */
void run_leaked_request(void)
{
    ddph_ctx *ctx = open_fake("leaks_request");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    mark_all_ready(ctx, fx.m);
    ddph_status st = ddph_step_wait(ctx);
    CHECK(st == DDPH_ERR_STATE, "%s: %s", ddph_status_name(st),
          ddph_last_error(ctx));
    CHECK(strstr(ddph_last_error(ctx),
                 "on_bucket returned with 1 nonblocking request it never "
                 "waited for"),
          "%s", ddph_last_error(ctx));
    ddph_step_end(ctx);
    double t0 = MPI_Wtime();
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close of a failed job");
    CHECK(MPI_Wtime() - t0 < 1.0, "close took %.1f s", MPI_Wtime() - t0);
    fixture_free(&fx);
    end_failed_job("leaked-request");
}

/* The last rank is stuck (it sleeps through the others' timeout): the
 * others report within timeout_s, naming bucket, hook and rank, once for
 * the step however many buckets are in flight.  When the stuck rank wakes
 * up it hears of their failure at once, and every rank's ddph_close
 * returns the failure promptly.  extra: the job's [runtime] keys
 * (timeout_s = 1.5 at least); bump: rows added to p2. */
static void run_timeout(const char *hook_dir, const char *hook,
                        const char *extra, int bump, const char *want2,
                        const char *scenario)
{
    ddph_ctx *ctx = open_job(hook_dir, hook, extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, bump);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m);
    CHECK(nb > 2, "%d buckets: several must be in flight", nb);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    int stuck = check_rank == world - 1;
    if (stuck)
        sleep(4); /* well past timeout_s */
    double t0 = MPI_Wtime();
    mark_all_ready(ctx, fx.m);
    ddph_status st = ddph_step_wait(ctx);
    double took = MPI_Wtime() - t0;
    CHECK(st == DDPH_ERR_TIMEOUT, "%s: %s", ddph_status_name(st),
          ddph_last_error(ctx));
    const char *want = "failed on model 'net' bucket 0 (rank ";
    CHECK(strstr(ddph_last_error(ctx), want) &&
              strstr(ddph_last_error(ctx), want2),
          "'%s' lacks '%s' or '%s'", ddph_last_error(ctx), want, want2);
    if (stuck) {
        CHECK(strncmp(ddph_last_error(ctx), "rank ", 5) == 0 &&
                  strstr(ddph_last_error(ctx), " failed: "),
              "the stuck rank must name the rank that failed: %s",
              ddph_last_error(ctx));
        CHECK(took < 2.0, "the stuck rank heard it after %.1f s", took);
    } else {
        /* One timeout for the step, not one per bucket. */
        CHECK(took < 1.5 + 3, "reported after %.1f s", took);
    }
    CHECK_OK(ddph_step_end(ctx), ctx);
    double c0 = MPI_Wtime();
    CHECK(ddph_close(ctx) == DDPH_ERR_TIMEOUT, "close of a failed job");
    CHECK(MPI_Wtime() - c0 < 1.0, "close took %.1f s", MPI_Wtime() - c0);
    fixture_free(&fx);
    end_failed_job(scenario);
}

/* The same with a hook that polls its nonblocking allreduce with test():
 * test() ends it at timeout_s after its start, as a wait would.  Without
 * collective fingerprints, whose exchange before the start would time out
 * first (and is what the plain timeout scenario sees). */
void run_timeout_polled(void)
{
    char hook[512];
    snprintf(hook, sizeof hook, "%s/polls.so", env("DDPH_TEST_FAKE_DIR"));
    run_timeout("/nowhere", hook, "timeout_s = 1.5\ncheck_collectives = false",
                0,
                "DDPH_ERR_TIMEOUT: allreduce did not complete within "
                "timeout_s = 1.5 s of its start",
                "timeout-polled");
}


void run_misuse(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK(ddph_step_begin(ctx, &fx.m, 1) == DDPH_ERR_STATE, "before finalize");
    CHECK(strstr(ddph_last_error(ctx), "model 'net' is not finalized"), "%s",
          ddph_last_error(ctx));
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK(ddph_grad_ready(fx.m, 0) == DDPH_ERR_STATE, "outside a step");
    CHECK(strstr(ddph_last_error(ctx), "grad_ready on model 'net' outside its "
                                       "step"),
          "%s", ddph_last_error(ctx));
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    /* The first rank to find unready parameters ends the job for all:
     * every rank must be inside this step before that. */
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(ddph_grad_ready(fx.m, 99) == DDPH_ERR_INVALID, "bad index");
    CHECK(strstr(ddph_last_error(ctx), "model 'net' has no parameter 99"),
          "%s", ddph_last_error(ctx));
    /* Every rank skips p0 and p1 (the last bucket), consistently. */
    for (int i = NP - 1; i >= 2; i--)
        CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    CHECK(ddph_grad_ready(fx.m, 5) == DDPH_ERR_STATE, "twice");
    CHECK(strstr(ddph_last_error(ctx), "parameter 5 'p5' marked ready twice in "
                                       "one step"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_step_wait(ctx) == DDPH_ERR_STATE, "unready parameters");
    CHECK(strstr(ddph_last_error(ctx), "2 parameters were never marked ready "
                                       "in this step: 'p1', 'p0'"),
          "%s", ddph_last_error(ctx));
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* Unready buckets never launched here: the job is over. */
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close after unready parameters");
    fixture_free(&fx);
    end_failed_job("misuse");
}



/* A slice of one array registered for two parameters (an offset one
 * tensor off): refused at finalize, naming both, on every rank. */
void run_overlapping_grads(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    static float flat[300];
    int64_t shape[1] = {100};
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "flat", &m), ctx);
    CHECK_OK(ddph_model_add_param(m, "a", flat, shape, 1, DDPH_F32, DDPH_CPU,
                                  NULL),
             ctx);
    CHECK_OK(ddph_model_add_param(m, "b", flat + 200, shape, 1, DDPH_F32,
                                  DDPH_CPU, NULL),
             ctx);
    CHECK_OK(ddph_model_add_param(m, "c", flat + 60, shape, 1, DDPH_F32,
                                  DDPH_CPU, NULL),
             ctx);
    finalize_refused(ctx, m, "model 'flat': parameters 'a' and 'c' were "
                             "registered with overlapping gradient memory "
                             "(160 bytes in common)");
}

void run_timeout_plain(void)
{
    run_timeout(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", "timeout_s = 1.5", 0,
                "DDPH_ERR_TIMEOUT: allreduce did not complete within "
                "timeout_s = 1.5 s",
                "timeout");
}

/* Bucket 0 (p5..p2, 267 KB) is summed in shared memory, p1 and p0 go
 * through MPI. */
void run_timeout_shared(void)
{
    run_timeout(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                "timeout_s = 1.5\nfirst_bucket_cap_mb = 0.2\n"
                "bucket_cap_mb = 0.0001",
                2000,
                "DDPH_ERR_TIMEOUT: allreduce did not complete within "
                "timeout_s = 1.5 s",
                "timeout-shared");
}

/* Polls ddph_check_peers(ctx, ranks, n) for up to 5 s until it says
 * `want` (the notices come one by one). */
static void check_peers_name(ddph_ctx *ctx, const int *ranks, int n,
                             const char *want)
{
    double asked = MPI_Wtime();
    ddph_status st = ddph_check_peers(ctx, ranks, n);
    while ((st == DDPH_OK || !strstr(ddph_last_error(ctx), want)) &&
           MPI_Wtime() - asked < 5) {
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
        st = ddph_check_peers(ctx, ranks, n);
    }
    CHECK(st == DDPH_ERR_STATE && strstr(ddph_last_error(ctx), want),
          "check_peers %.1f s after the close, wanting '%s': %s, '%s'",
          MPI_Wtime() - asked, want, ddph_status_name(st),
          ddph_last_error(ctx));
}

/* ddph_check_peers: DDPH_OK while every rank is in the job; once the last
 * rank closes it, every other rank names it within seconds, with no
 * collective, and its own job goes on (told, not failed), while a check
 * of the ranks still in the job stays DDPH_OK.  At 3 ranks and more the
 * next rank closes too: both are named. */
void run_check_peers(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    int world = ddph_world_size(ctx), last = world - 1;
    CHECK(ddph_check_peers(ctx, NULL, 0) == DDPH_OK, "check_peers with "
          "every rank in the job: %s", ddph_last_error(ctx));
    int outside = world;
    CHECK(ddph_check_peers(ctx, &outside, 1) == DDPH_ERR_INVALID &&
              strstr(ddph_last_error(ctx), "is not a rank of this job"),
          "check_peers of rank %d: '%s'", world, ddph_last_error(ctx));
    CHECK(ddph_check_peers(ctx, NULL, 2) == DDPH_ERR_INVALID,
          "check_peers of 2 ranks at NULL");
    /* ddph_close waits for every rank's: the ranks still in the job
     * order their steps among themselves. */
    MPI_Comm staying;
    MPI_Comm_split(MPI_COMM_WORLD, check_rank < last ? 0 : MPI_UNDEFINED, 0,
                   &staying);
    MPI_Barrier(MPI_COMM_WORLD);
    if (check_rank == last) {
        CHECK(ddph_close(ctx) == DDPH_OK, "close of the last rank");
        return;
    }
    char want[128];
    snprintf(want, sizeof want, "rank %d closed the job (ddph_close)", last);
    check_peers_name(ctx, NULL, 0, want);
    int others[64], n = 0;
    for (int r = 0; r < last && n < 64; r++)
        others[n++] = r;
    CHECK(ddph_check_peers(ctx, others, n) == DDPH_OK,
          "check_peers of the ranks still in the job: %s",
          ddph_last_error(ctx));
    MPI_Barrier(staying);
    MPI_Comm_free(&staying);
    if (world >= 3 && check_rank < last - 1) {
        snprintf(want, sizeof want,
                 "rank %d closed the job (ddph_close) after 0 synchronised "
                 "steps, rank %d after 0: they will join nothing more",
                 last - 1, last);
        check_peers_name(ctx, NULL, 0, want);
    }
    CHECK(ddph_close(ctx) == DDPH_OK, "close of rank %d", check_rank);
}
