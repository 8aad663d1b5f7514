/* replicas_trainer.c: replicas start equal and stay equal, and the
 * trainer's own cross-rank calls (ddph_barrier, ddph_average_f64,
 * ddph_allreduce_f64, ddph_broadcast), on any number of ranks.
 *
 *   replicas_trainer PLUGIN_DIR
 *
 * - every rank seeds its weights with its own rank (as a careless trainer
 *   does); after ddph_model_finalize every rank holds rank 0's values;
 * - 4 synchronised SGD steps with check_replicas_every = 2: every
 *   ddph_step_end returns DDPH_OK;
 * - the last rank then nudges one weight of parameter 'b': the next check
 *   fails ddph_step_end on every rank with DDPH_ERR_MISMATCH naming
 *   parameter 1 ('b') and that rank;
 * - the last step is flagged DDPH_STEP_LAST (a healthy job: nobody
 *   fails), and a step after it is refused;
 * - the scalar calls give hand-computed results, and are refused inside a
 *   step.
 * Prints "ok replicas" on rank 0 when every check passed; exits 1 on the
 * first failed check. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "rank_check.h"


enum { NW = 96, NB = 8 };

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: replicas_trainer PLUGIN_DIR\n");
        return 2;
    }
    char job[] = "/tmp/ddph-replicas-XXXXXX.ini";
    int fd = mkstemps(job, 4);
    CHECK(fd >= 0, "mkstemps");
    FILE *f = fdopen(fd, "w");
    fprintf(f, "[runtime]\nplugin_path = %s\ntimeout_s = 30\n"
               "check_replicas_every = 2\n",
            argv[1]);
    fclose(f);
    ddph_ctx *ctx;
    ddph_status st = ddph_open(job, &argc, &argv, &ctx);
    unlink(job);
    CHECK(st == DDPH_OK, "ddph_open: %s", ddph_status_name(st));
    int rank = ddph_rank(ctx);
    check_rank = rank;
    int world = ddph_world_size(ctx);

    static float w[NW], b[NB], gw[NW], gb[NB];
    for (int k = 0; k < NW; k++)
        w[k] = (float)rank + 0.5f * (float)k;
    for (int k = 0; k < NB; k++)
        b[k] = -(float)rank - (float)k;
    ddph_model *m;
    int64_t sw[2] = {12, 8}, sb[1] = {NB};
    CHECK(ddph_model_create(ctx, "net", &m) == DDPH_OK, "model_create");
    CHECK(ddph_model_add_param(m, "w", gw, sw, 2, DDPH_F32, DDPH_CPU, NULL) ==
              DDPH_OK,
          "add w");
    CHECK(ddph_model_add_param(m, "b", gb, sb, 1, DDPH_F32, DDPH_CPU, NULL) ==
              DDPH_OK,
          "add b");
    CHECK(ddph_model_set_param_data(m, 0, w) == DDPH_OK, "data w");
    CHECK(ddph_model_set_param_data(m, 1, b) == DDPH_OK, "data b");
    CHECK(ddph_model_finalize(m) == DDPH_OK, "finalize: %s",
          ddph_last_error(ctx));
    for (int k = 0; k < NW; k++)
        CHECK(w[k] == 0.5f * (float)k, "w[%d] = %g, not rank 0's", k, w[k]);
    for (int k = 0; k < NB; k++)
        CHECK(b[k] == -(float)k, "b[%d] = %g, not rank 0's", k, b[k]);

    for (int step = 0; step < 6; step++) {
        if (step == 4 && rank == world - 1)
            b[3] += 1e-3f; /* this replica drifts */
        /* The last step says so: the peers hear that no step follows. */
        CHECK(ddph_step_begin_flags(ctx, &m, 1,
                                    step == 5 ? DDPH_STEP_LAST : 0) == DDPH_OK,
              "step_begin");
        if (step == 0) {
            CHECK(ddph_barrier(ctx) == DDPH_ERR_STATE &&
                      strstr(ddph_last_error(ctx), "between ddph_step_begin"),
                  "barrier inside a step: %s", ddph_last_error(ctx));
        }
        for (int k = 0; k < NB; k++)
            gb[k] = (float)(rank + 1) * 0.25f;
        CHECK(ddph_grad_ready(m, 1) == DDPH_OK, "grad_ready b");
        for (int k = 0; k < NW; k++)
            gw[k] = (float)((rank + k) % 5) - 2.0f;
        CHECK(ddph_grad_ready(m, 0) == DDPH_OK, "grad_ready w");
        CHECK(ddph_step_wait(ctx) == DDPH_OK, "step_wait: %s",
              ddph_last_error(ctx));
        for (int k = 0; k < NW; k++)
            w[k] -= 0.125f * gw[k];
        for (int k = 0; k < NB; k++)
            b[k] -= 0.125f * gb[k];
        st = ddph_step_end(ctx);
        if (step < 5) {
            CHECK(st == DDPH_OK, "step %d: step_end: %s", step,
                  ddph_last_error(ctx));
        } else {
            char want[128];
            snprintf(want, sizeof want,
                     "parameter 1 ('b') on rank %d is not rank 0's",
                     world - 1);
            CHECK(st == DDPH_ERR_MISMATCH && strstr(ddph_last_error(ctx), want),
                  "step 5: want DDPH_ERR_MISMATCH with '%s', got %s: %s", want,
                  ddph_status_name(st), ddph_last_error(ctx));
        }
    }

    CHECK(ddph_step_begin(ctx, &m, 1) == DDPH_ERR_STATE &&
              strstr(ddph_last_error(ctx), "DDPH_STEP_LAST"),
          "a step after DDPH_STEP_LAST: %s", ddph_last_error(ctx));
    double v[2] = {(double)rank, -(double)rank};
    CHECK(ddph_average_f64(ctx, v, 2) == DDPH_OK, "average");
    CHECK(v[0] == (world - 1) / 2.0 && v[1] == -(world - 1) / 2.0,
          "average %g %g", v[0], v[1]);
    double mx = (double)rank;
    CHECK(ddph_allreduce_f64(ctx, &mx, 1, DDPH_MAX) == DDPH_OK &&
              mx == world - 1,
          "max %g", mx);
    char text[32] = "";
    if (rank == world - 1)
        snprintf(text, sizeof text, "from rank %d", rank);
    CHECK(ddph_broadcast(ctx, text, sizeof text, world - 1) == DDPH_OK,
          "broadcast");
    char want[32];
    snprintf(want, sizeof want, "from rank %d", world - 1);
    CHECK(strcmp(text, want) == 0, "broadcast gave '%s'", text);
    CHECK(ddph_broadcast(ctx, text, 1, world) == DDPH_ERR_INVALID,
          "a root past the last rank");
    CHECK(ddph_barrier(ctx) == DDPH_OK, "barrier: %s", ddph_last_error(ctx));
    /* The job's outcome: rank 0's first error, the barrier refused inside
     * a step, reported by ddph_close on every rank. */
    st = ddph_close(ctx);
    CHECK(st == DDPH_ERR_STATE, "close: %s", ddph_status_name(st));
    if (rank == 0)
        printf("ok replicas\n");
    return 0;
}
