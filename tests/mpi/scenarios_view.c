/* scenarios_view.c: gradient_as_bucket_view = true, where the gradients
 * live in the runtime's buckets and the trainer writes where
 * ddph_model_grad_ptr says. */
#include "build-config.h"

#include "scenario.h"

#include <stdio.h>
#include <string.h>

/* An allreduce job with gradient_as_bucket_view (and `extra` in
 * [runtime]), the fixture registered with its own arrays; finalized
 * when `finalize`. */
static ddph_ctx *view_job(const char *extra, model_fixture *fx, int finalize)
{
    char keys[256];
    snprintf(keys, sizeof keys, "gradient_as_bucket_view = true\n%s", extra);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", keys);
    setup(ctx, fx, 0);
    if (finalize)
        CHECK_OK(ddph_model_finalize(fx->m), ctx);
    return ctx;
}

/* ddph_model_grad_ptr before finalize and past the last parameter: the
 * status, and a message naming the model and what to do (a trainer's
 * "failed: " + ddph_last_error said nothing); the first is a call out of
 * order, so the job's outcome. */
void run_view_grad_ptr_misuse(void)
{
    model_fixture fx;
    ddph_ctx *ctx = view_job("", &fx, 0);
    void *p = NULL;
    CHECK(ddph_model_grad_ptr(fx.m, 0, &p) == DDPH_ERR_STATE && !p,
          "grad_ptr before finalize");
    CHECK(strstr(ddph_last_error(ctx), "ddph_model_grad_ptr on model 'net' "
                                       "before ddph_model_finalize"),
          "%s", ddph_last_error(ctx));
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK(ddph_model_grad_ptr(fx.m, NP, &p) == DDPH_ERR_INVALID && !p,
          "grad_ptr of parameter %d", NP);
    CHECK(strstr(ddph_last_error(ctx), "ddph_model_grad_ptr: model 'net' has "
                                       "no parameter 6 (it has 6)"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close after a call out of order");
    fixture_free(&fx);
    end_failed_job("view-grad-ptr-misuse");
}

/* gradient_as_bucket_view with a trainer that registered gradient memory
 * of its own and writes there: a parameter whose new address it never
 * asked for is refused at grad_ready (the bucket would hold the memory's
 * first contents every step), and the job is over, as after any misuse;
 * one it asked for is taken. */
void run_view_unfetched(void)
{
    model_fixture fx;
    ddph_ctx *ctx = view_job("", &fx, 1);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    void *p;
    CHECK_OK(ddph_model_grad_ptr(fx.m, NP - 1, &p), ctx);
    CHECK(p != fx.grads[NP - 1], "p5's gradient did not move to its bucket");
    CHECK_OK(ddph_grad_ready(fx.m, NP - 1), ctx);
    CHECK(ddph_grad_ready(fx.m, NP - 2) == DDPH_ERR_STATE,
          "grad_ready of a parameter whose new address was never asked for");
    CHECK(strstr(ddph_last_error(ctx), "model 'net' parameter 'p4': with "
                                       "[runtime] gradient_as_bucket_view = "
                                       "true") &&
              strstr(ddph_last_error(ctx), "never asked ddph_model_grad_ptr"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close after the refusal");
    fixture_free(&fx);
    end_failed_job("view-unfetched");
}

/* The fixture's gradients as the trainer writes them: inside the buckets
 * (the fixture keeps its own arrays, freed at the end). */
static void ask_views(ddph_ctx *ctx, model_fixture *fx, float **where)
{
    for (int p = 0; p < NP; p++) {
        void *at;
        CHECK_OK(ddph_model_grad_ptr(fx->m, p, &at), ctx);
        where[p] = at;
    }
}

/* The sum over ranks [0, ranks) of value(), divided by the world size:
 * exact for small integers on 2 and 4 ranks. */
static void check_sum_over(float *const *where, const size_t *numel,
                           int step, int ranks, int world, const char *what)
{
    for (int p = 0; p < NP; p++)
        for (size_t i = 0; i < numel[p]; i++) {
            float want = 0;
            for (int r = 0; r < ranks; r++)
                want += value(r, step, p, i) / (float)world;
            CHECK(where[p][i] == want, "%s: param %d [%zu] = %g, want %g",
                  what, p, i, where[p][i], want);
        }
}

/* Under join, the last rank has no data at all: it registered gradient
 * memory of its own, never asked ddph_model_grad_ptr (it never trains in
 * this epoch) and calls ddph_join at once.  Its shadow steps give zeros
 * the runtime writes into its buckets itself: taken, not refused as a
 * trainer writing where the runtime no longer reads.  The others' two
 * steps average their gradients over the world; in the next epoch the
 * last rank asks, and every rank's gradients are averaged. */
void run_view_join_idle(void)
{
    model_fixture fx;
    ddph_ctx *ctx = view_job("join = true", &fx, 1);
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    int idle = rank == world - 1;
    float *where[NP];
    if (!idle)
        ask_views(ctx, &fx, where);
    for (int step = 0; step < (idle ? 0 : 2); step++) {
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1,
                                       step == 1 ? DDPH_STEP_END_OF_DATA : 0),
                 ctx);
        for (int p = 0; p < NP; p++)
            for (size_t i = 0; i < fx.numel[p]; i++)
                where[p][i] = value(rank, step, p, i);
        mark_all_ready(ctx, fx.m);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        check_sum_over(where, fx.numel, step, world - 1, world, "under join");
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    CHECK_OK(ddph_join(ctx), ctx);
    if (idle)
        ask_views(ctx, &fx, where);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    for (int p = 0; p < NP; p++)
        for (size_t i = 0; i < fx.numel[p]; i++)
            where[p][i] = value(rank, 5, p, i);
    mark_all_ready(ctx, fx.m);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    check_sum_over(where, fx.numel, 5, world, world, "the next epoch");
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK_OK(ddph_close(ctx), NULL);
    fixture_free(&fx);
}
