/* join_trainer.c: uneven inputs evened out ([runtime] join = true), checked
 * against averages computed by hand, on any number of ranks.
 *
 *   join_trainer PLUGIN_DIR HOOK DIVIDE_BY_INITIAL(0|1) ACCUMULATE
 *                [average|private]
 *
 * Rank r has 3 + r batches; each synchronises after ACCUMULATE backward
 * passes (the last window synchronises whatever it holds,
 * DDPH_STEP_END_OF_DATA), then the rank calls ddph_join.  At each
 * synchronising step every rank still training checks each gradient
 * against the sum over the ranks still training of their (accumulated)
 * gradients, divided by the world size (DIVIDE_BY_INITIAL = 1) or by the
 * number of those ranks (0).  Every rank runs SGD on parameters given
 * with ddph_model_set_param_data; after ddph_join every rank must hold
 * the parameters of the last rank to join (computed by hand too).  Then
 * one more step on every rank (a new epoch) averages over all of them.
 * Also: ddph_join inside a step is refused.  With `average`, the last rank
 * calls ddph_average_f64 after its 4th batch, while rank 0 has joined: both
 * must fail at once, naming that rank and the call (a joined rank never
 * takes part in a trainer collective); each rank then exits 0 (MPI left
 * unfinalized, as after any failed job), rank 0 printing "ok join-average".
 * With `private`, buckets stay in private memory (shared_buckets = false):
 * every sum goes through MPI instead of the one-host shared segment.
 * Prints "ok join" on rank 0 when every check passed; exits 1 on the
 * first failed check. */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "rank_check.h"


enum { NW = 1000, NB = 37 };
#define LR 0.125

static int batches(int r) { return 3 + r; }

/* The gradient rank r computes for element k of parameter p at its
 * backward pass t (counted from 0 over the whole run). */
static double grad(int r, int p, int k, int t)
{
    return (double)(r + 1) * (t + 1) * (p ? -0.5 : 1.0) + (double)(k % 5) * 0.25;
}

/* What rank r holds in element k of parameter p at the window of passes
 * [t0, t1): the sum of its gradients (accumulation). */
static double window_sum(int r, int p, int k, int t0, int t1)
{
    double s = 0;
    for (int t = t0; t < t1; t++)
        s += grad(r, p, k, t);
    return s;
}

/* The windows rank r synchronises: passes [start[i], start[i+1]). */
static int windows(int r, int acc, int *start)
{
    int n = 0;
    for (int t = 0; t < batches(r); t += acc)
        start[n++] = t;
    start[n] = batches(r);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: join_trainer PLUGIN_DIR HOOK "
                        "DIVIDE_BY_INITIAL(0|1) ACCUMULATE "
                        "[average|private]\n");
        return 2;
    }
    int divide_initial = atoi(argv[3]), acc = atoi(argv[4]);
    int misuse = argc == 6 && strcmp(argv[5], "average") == 0;
    int private = argc == 6 && strcmp(argv[5], "private") == 0;
    char job[] = "/tmp/ddph-join-XXXXXX.ini";
    int fd = mkstemps(job, 4);
    CHECK(fd >= 0, "mkstemps");
    FILE *f = fdopen(fd, "w");
    fprintf(f, "[runtime]\nplugin_path = %s\ntimeout_s = 30\njoin = true\n"
               "divide_by_initial_world_size = %s\nbucket_cap_mb = 0.002\n"
               "first_bucket_cap_mb = 0.002\nshared_buckets = %s\n"
               "[accumulate]\nsteps = %d\n[hook]\nname = %s\n",
            argv[1], divide_initial ? "true" : "false",
            private ? "false" : "true", acc, argv[2]);
    fclose(f);
    ddph_ctx *ctx;
    ddph_status st = ddph_open(job, &argc, &argv, &ctx);
    unlink(job);
    CHECK(st == DDPH_OK, "ddph_open: %s", ddph_status_name(st));
    int rank = ddph_rank(ctx);
    check_rank = rank;
    int world = ddph_world_size(ctx);
    /* fp16 sends halves: about 11 bits. */
    double tol = strcmp(argv[2], "fp16") == 0 ? 2e-3 : 1e-6;

    static float w[NW], b[NB], gw[NW], gb[NB];
    static double want_w[NW], want_b[NB];
    for (int k = 0; k < NW; k++)
        w[k] = want_w[k] = 0.01 * k;
    for (int k = 0; k < NB; k++)
        b[k] = want_b[k] = -0.5 * k;
    ddph_model *m;
    int64_t sw[1] = {NW}, sb[1] = {NB};
    CHECK(ddph_model_create(ctx, "net", &m) == DDPH_OK, "model_create");
    CHECK(ddph_model_add_param(m, "w", gw, sw, 1, DDPH_F32, DDPH_CPU, NULL) ==
              DDPH_OK,
          "add w");
    CHECK(ddph_model_add_param(m, "b", gb, sb, 1, DDPH_F32, DDPH_CPU, NULL) ==
              DDPH_OK,
          "add b");
    CHECK(ddph_model_set_param_data(m, 0, w) == DDPH_OK, "data w");
    CHECK(ddph_model_set_param_data(m, 1, b) == DDPH_OK, "data b");
    CHECK(ddph_model_finalize(m) == DDPH_OK, "finalize: %s",
          ddph_last_error(ctx));

    /* The synchronising windows of every rank, for the expected sums. */
    int (*start)[64] = calloc((size_t)world, sizeof *start);
    int *nwin = calloc((size_t)world, sizeof *nwin);
    CHECK(start && nwin, "out of memory");
    for (int r = 0; r < world; r++)
        nwin[r] = windows(r, acc, start[r]);

    memset(gw, 0, sizeof gw);
    memset(gb, 0, sizeof gb);
    int sync = 0;
    int failed = 0; /* with `average`: a step call failed (reported) */
    for (int t = 0; t < batches(rank) && !failed; t++) {
        int last = t == batches(rank) - 1;
        st = ddph_step_begin_flags(ctx, &m, 1,
                                   last ? DDPH_STEP_END_OF_DATA : 0);
        if (misuse && st != DDPH_OK) {
            failed = 1;
            break;
        }
        CHECK(st == DDPH_OK, "step_begin: %s", ddph_last_error(ctx));
        if (t == 0)
            CHECK(ddph_join(ctx) == DDPH_ERR_STATE &&
                      strstr(ddph_last_error(ctx), "inside a step"),
                  "join inside a step: %s", ddph_last_error(ctx));
        for (int k = 0; k < NB; k++)
            gb[k] += (float)grad(rank, 1, k, t);
        CHECK(ddph_grad_ready(m, 1) == DDPH_OK, "grad_ready b");
        for (int k = 0; k < NW; k++)
            gw[k] += (float)grad(rank, 0, k, t);
        CHECK(ddph_grad_ready(m, 0) == DDPH_OK, "grad_ready w");
        st = ddph_step_wait(ctx);
        if (misuse && st != DDPH_OK) {
            failed = 1;
            break;
        }
        CHECK(st == DDPH_OK, "step_wait: %s", ddph_last_error(ctx));
        int synced = ddph_step_syncs(ctx);
        CHECK(ddph_step_end(ctx) == DDPH_OK, "step_end: %s",
              ddph_last_error(ctx));
        if (!synced)
            continue;
        /* The sum over the ranks that still have window `sync`. */
        int active = 0;
        for (int r = 0; r < world; r++)
            active += nwin[r] > sync;
        double div = divide_initial ? world : active;
        for (int p = 0; p < 2; p++) {
            int n = p ? NB : NW;
            float *g = p ? gb : gw;
            float *x = p ? b : w;
            for (int k = 0; k < n; k++) {
                double sum = 0;
                for (int r = 0; r < world; r++)
                    if (nwin[r] > sync)
                        sum += window_sum(r, p, k, start[r][sync],
                                          start[r][sync + 1]);
                double want = sum / div;
                CHECK(fabs(g[k] - want) <= tol * (fabs(want) + 1),
                      "window %d (%d ranks training): %s[%d] = %.9g, want "
                      "%.9g",
                      sync, active, p ? "b" : "w", k, g[k], want);
                x[k] -= (float)(LR * g[k]);
                g[k] = 0;
            }
        }
        sync++;
        if (misuse && rank == world - 1 && t == 3) {
            double v[1] = {1};
            CHECK(ddph_average_f64(ctx, v, 1) == DDPH_ERR_STATE,
                  "a trainer collective while rank 0 has joined: %s",
                  ddph_last_error(ctx));
            failed = 1;
        }
    }
    if (misuse) {
        /* Ranks out of data join, and hear of it there. */
        if (!failed)
            CHECK(ddph_join(ctx) == DDPH_ERR_STATE, "join: %s",
                  ddph_last_error(ctx));
        char want[96];
        snprintf(want, sizeof want, "rank %d called ddph_average_f64 after",
                 world - 1);
        CHECK(strstr(ddph_last_error(ctx), want), "'%s' does not say '%s'",
              ddph_last_error(ctx), want);
        ddph_close(ctx);
        /* Every rank has passed its checks before "ok" (the job failed,
         * and MPI is left unfinalized: the world is still there). */
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("ok join-average\n");
        fflush(NULL);
        _exit(0);
    }
    /* The last rank to join trains every window there is: its parameters
     * are the ones every rank keeps. */
    int longest = world - 1;
    for (int s = 0; s < nwin[longest]; s++) {
        int active = 0;
        for (int r = 0; r < world; r++)
            active += nwin[r] > s;
        double div = divide_initial ? world : active;
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < (p ? NB : NW); k++) {
                double sum = 0;
                for (int r = 0; r < world; r++)
                    if (nwin[r] > s)
                        sum += window_sum(r, p, k, start[r][s],
                                          start[r][s + 1]);
                (p ? want_b : want_w)[k] -= LR * (sum / div);
            }
    }
    st = ddph_join(ctx);
    CHECK(st == DDPH_OK, "ddph_join: %s", ddph_last_error(ctx));
    for (int k = 0; k < NW; k++)
        CHECK(fabs(w[k] - want_w[k]) <= tol * (fabs(want_w[k]) + 1),
              "after join: w[%d] = %.9g, want the last joiner's %.9g", k, w[k],
              want_w[k]);
    for (int k = 0; k < NB; k++)
        CHECK(fabs(b[k] - want_b[k]) <= tol * (fabs(want_b[k]) + 1),
              "after join: b[%d] = %.9g, want the last joiner's %.9g", k, b[k],
              want_b[k]);

    /* A new epoch: every rank trains again, the average is over all. */
    CHECK(ddph_step_begin_flags(ctx, &m, 1, DDPH_STEP_FORCE_SYNC) == DDPH_OK,
          "step_begin after join: %s", ddph_last_error(ctx));
    for (int k = 0; k < NB; k++)
        gb[k] = (float)(rank + 1);
    for (int k = 0; k < NW; k++)
        gw[k] = (float)(2 * rank);
    CHECK(ddph_grad_ready(m, 1) == DDPH_OK && ddph_grad_ready(m, 0) == DDPH_OK,
          "grad_ready after join");
    CHECK(ddph_step_wait(ctx) == DDPH_OK && ddph_step_end(ctx) == DDPH_OK,
          "step after join: %s", ddph_last_error(ctx));
    CHECK(fabs(gb[0] - (world + 1) / 2.0) < 1e-3 &&
              fabs(gw[0] - (world - 1)) < 1e-3,
          "after join, the average over every rank: %g %g", gb[0], gw[0]);
    free(start);
    free(nwin);
    /* The job's outcome: the refused ddph_join inside a step (above) on
     * rank 0, reported by ddph_close on every rank. */
    st = ddph_close(ctx);
    CHECK(st == DDPH_ERR_STATE, "close: %s", ddph_status_name(st));
    if (rank == 0)
        printf("ok join\n");
    return 0;
}
