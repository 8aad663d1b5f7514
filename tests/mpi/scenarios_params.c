/* scenarios_params.c: the parameter (weight) memory a trainer gives with
 * ddph_model_set_param_data, and where it must not be. */
#include "build-config.h"

#include "scenario.h"

#include <stdlib.h>
#include <string.h>

/* set_param_data after finalize: finalize has broadcast rank 0's values
 * of the memory given by then, so memory given later would start unequal
 * on every rank and the job end OK with different weights.  Refused,
 * naming model and parameter; a call out of order, so the job's outcome. */
void run_param_data_late(void)
{
    model_fixture fx;
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    setup(ctx, &fx, 0);
    float *w[2];
    for (int p = 0; p < 2; p++) {
        w[p] = malloc(fx.numel[p] * sizeof(float));
        CHECK(w[p], "out of memory");
        for (size_t i = 0; i < fx.numel[p]; i++)
            w[p][i] = (float)(check_rank + 1);
    }
    CHECK_OK(ddph_model_set_param_data(fx.m, 0, w[0]), ctx);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK(w[0][0] == 1.0f && w[0][fx.numel[0] - 1] == 1.0f,
          "p0's weights are not rank 0's after finalize: %g", w[0][0]);
    CHECK(ddph_model_set_param_data(fx.m, 1, w[1]) == DDPH_ERR_STATE,
          "set_param_data after finalize");
    CHECK(strstr(ddph_last_error(ctx), "ddph_model_set_param_data on model "
                                       "'net' (parameter 'p1') after "
                                       "ddph_model_finalize"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_model_set_param_data(fx.m, NP, w[1]) == DDPH_ERR_INVALID &&
              strstr(ddph_last_error(ctx), "model 'net' has no parameter 6"),
          "set_param_data past the last parameter: %s",
          ddph_last_error(ctx));
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close after a call out of order");
    for (int p = 0; p < 2; p++)
        free(w[p]);
    fixture_free(&fx);
    end_failed_job("param-data-late");
}

/* A model of two parameters of `numel` f32 each, gradients g0 and g1,
 * weights w0 and w1 (NULL: none). */
static ddph_model *pair_model(ddph_ctx *ctx, const char *name, size_t numel,
                              float *g0, float *g1, float *w0, float *w1)
{
    ddph_model *m;
    int64_t shape[1] = {(int64_t)numel};
    CHECK_OK(ddph_model_create(ctx, name, &m), ctx);
    CHECK_OK(ddph_model_add_param(m, "emb", g0, shape, 1, DDPH_F32, DDPH_CPU,
                                  NULL),
             ctx);
    CHECK_OK(ddph_model_add_param(m, "head", g1, shape, 1, DDPH_F32,
                                  DDPH_CPU, NULL),
             ctx);
    if (w0)
        CHECK_OK(ddph_model_set_param_data(m, 0, w0), ctx);
    if (w1)
        CHECK_OK(ddph_model_set_param_data(m, 1, w1), ctx);
    return m;
}

/* Weights given over gradient memory (a gradient passed to
 * set_param_data): finalize would broadcast and check_replicas_every
 * compare the gradients, never the trainer's weights.  Refused at
 * finalize on every rank, naming both parameters; weights shared by two
 * parameters (tied) are taken, broadcast once, and compared. */
void run_param_data_on_grad(void)
{
    enum { N = 64 };
    static float g[4][N], tied[N], w[N];
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                             "check_replicas_every = 1");
    for (size_t i = 0; i < N; i++)
        tied[i] = w[i] = (float)(check_rank + 1);
    ddph_model *ok = pair_model(ctx, "tied", N, g[0], g[1], tied, tied);
    CHECK_OK(ddph_model_finalize(ok), ctx);
    CHECK(tied[0] == 1.0f && tied[N - 1] == 1.0f,
          "tied weights are not rank 0's after finalize: %g", tied[0]);
    CHECK_OK(ddph_step_begin(ctx, &ok, 1), ctx);
    for (size_t i = 0; i < N; i++)
        g[0][i] = g[1][i] = (float)check_rank;
    CHECK_OK(ddph_grad_ready(ok, 1), ctx);
    CHECK_OK(ddph_grad_ready(ok, 0), ctx);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* The second parameter's weights start half-way into the first's
     * gradient (a flat array, an offset wrong). */
    ddph_model *bad = pair_model(ctx, "flat", N / 2, g[2], g[3], w,
                                 g[2] + N / 4);
    finalize_refused(ctx, bad, "model 'flat': the weights of parameter "
                               "'head' (ddph_model_set_param_data) overlap "
                               "the gradient memory of parameter 'emb' (64 "
                               "bytes in common)");
}
