/* scenarios_params.c: the memory a trainer gives, weights
 * (ddph_model_set_param_data) and gradients, and where it must not be. */
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

/* Two models over one shared gradient tensor (an encoder registered in
 * both, each with a head of its own): stepped in turns, each reduces it
 * in its own step, exactly; given to one step, it would be reduced twice
 * and one model's result written over the other's (wrong where a bucket
 * callback copies back early): refused on every rank, naming both. */
void run_models_shared_grads(void)
{
    enum { N = 4096 };
    static float enc[N], head[2][N];
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    int world = ddph_world_size(ctx);
    ddph_model *task[2];
    task[0] = pair_model(ctx, "task0", N, enc, head[0], NULL, NULL);
    task[1] = pair_model(ctx, "task1", N, enc, head[1], NULL, NULL);
    for (int t = 0; t < 2; t++)
        CHECK_OK(ddph_model_finalize(task[t]), ctx);
    for (int t = 0; t < 2; t++) {
        CHECK_OK(ddph_step_begin(ctx, &task[t], 1), ctx);
        for (size_t i = 0; i < N; i++)
            enc[i] = head[t][i] = (float)(check_rank + t);
        CHECK_OK(ddph_grad_ready(task[t], 1), ctx);
        CHECK_OK(ddph_grad_ready(task[t], 0), ctx);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
        float want = (float)(world - 1) / 2 + (float)t;
        CHECK(enc[N - 1] == want && head[t][0] == want,
              "task%d stepped alone: enc %g, head %g, not %g", t,
              enc[N - 1], head[t][0], want);
    }
    /* Each rank refuses it; one that comes later may hear of a peer's
     * refusal first ("rank R failed: step_begin (rank R): ..."). */
    CHECK(ddph_step_begin(ctx, task, 2) != DDPH_OK,
          "two models over one gradient tensor given to one step");
    CHECK(strstr(ddph_last_error(ctx),
                 "models 'task0' and 'task1' are given to one step, and "
                 "their parameters 'emb' and 'emb' share gradient memory "
                 "(16384 bytes)"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_close(ctx) != DDPH_OK, "close after the refused step");
    end_failed_job("models-shared-grads");
}

/* The same two models with gradient_as_bucket_view: each model's
 * gradients move into its own buckets, so the shared tensor would get two
 * gradients and the model whose copy the trainer does not write would
 * reduce a stale one every step (stepped in turns, the job ended OK with
 * the encoder unsynchronised).  The second finalize is refused on every
 * rank, naming both parameters and the first model. */
void run_view_shared_grads(void)
{
    enum { N = 4096 };
    static float enc[N], head[2][N];
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                             "gradient_as_bucket_view = true");
    ddph_model *task0 = pair_model(ctx, "task0", N, enc, head[0], NULL, NULL);
    CHECK_OK(ddph_model_finalize(task0), ctx);
    ddph_model *task1 = pair_model(ctx, "task1", N, enc, head[1], NULL, NULL);
    finalize_refused(ctx, task1, "model 'task1': parameter 'emb' was "
                                 "registered with gradient memory that "
                                 "parameter 'emb' of model 'task0' has too "
                                 "(16384 bytes in common)");
}
