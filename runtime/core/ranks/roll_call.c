/* roll_call.c: see roll_call.h. */
#include "build-config.h"

#include "core/ranks/roll_call.h"


/* Which models a step covers, as a number every rank can compare: the
 * models' creation indices, each mixed so that different sets differ. */
static int64_t models_digest(const ddph_ctx *ctx, ddph_model *const *models,
                             int n)
{
    int64_t d = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < ctx->nmodels; k++)
            if (ctx->models[k] == models[i])
                d += ddph__digest_term((size_t)k);
    return d;
}

ddph_status ddph__join_roll_call(ddph_ctx *ctx, int training,
                                 ddph_model *const *models, int n,
                                 ddph_err *err)
{
    /* One allreduce: the ranks still training, and the sum of the
     * digests and of their squares, equal on every rank exactly when
     * W * sum(d^2) = (sum d)^2 (no spread).  d < 2^20 keeps it exact. */
    int64_t d = models_digest(ctx, models, n);
    int64_t v[3] = {training ? 1 : 0, d, d * d};
    /* The roll call is a step's first collective: a peer that leaves the
     * steps meanwhile (a trainer collective, DDPH_STEP_LAST) is reported
     * at once, as in any step (backend_mpi.h). */
    int was = ddph__ctl_in_sync_step(ctx->control, 1);
    ddph_status st =
        ddph__ctl_allreduce_i64(ctx->control, v, 3, DDPH_SUM, err);
    ddph__ctl_in_sync_step(ctx->control, was);
    if (st != DDPH_OK) {
        ddph__err_prefix(err, "join: counting the ranks still training");
        return st;
    }
    int64_t w = ddph__size(ctx);
    if (w * v[2] != v[1] * v[1])
        return ddph__fail(err, DDPH_ERR_MISMATCH,
                          "join: the ranks step different models (with "
                          "[runtime] join = true every synchronising step "
                          "and ddph_join cover the same models on every "
                          "rank: all of the job's models)");
    ctx->join_active = (int)v[0];
    ctx->join_scale = 1.0;
    if (!ctx->cfg.divide_by_initial_world_size && v[0] > 0 && v[0] < w)
        ctx->join_scale = (double)w / (double)v[0];
    return DDPH_OK;
}
