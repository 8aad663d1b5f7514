/* join.c: see join.h. */
#include "build-config.h"

#include "core/join.h"

#include <stdio.h>
#include <string.h>

#include "comm/backend_mpi.h"
#include "device/device.h"
#include "core/replicas.h"

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
    int was = atomic_exchange(&ctx->mpi.in_sync_step, 1);
    ddph_status st = ddph__mpi_allreduce_i64(&ctx->mpi, v, 3, DDPH_SUM, err);
    atomic_store(&ctx->mpi.in_sync_step, was);
    if (st != DDPH_OK) {
        ddph__err_prefix(err, "join: counting the ranks still training");
        return st;
    }
    int64_t w = ctx->mpi.world.size;
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

/* Zeros a gradient wherever it lives (host, or device through the hook's
 * services, done before the step reads it). */
static ddph_status zero_grad(ddph_model *m, ddph_param *p, ddph_err *err)
{
    size_t bytes = p->numel * ddph__dtype_size(p->dtype);
    if (p->device == DDPH_CPU) {
        memset(p->grad, 0, bytes);
        return DDPH_OK;
    }
    const ddph_services *s = &m->hook->services;
    ddph_status st = s->zero(s, p->grad, bytes);
    if (st != DDPH_OK)
        return ddph__fail(err, st, "join: zeroing '%s' on the device",
                          p->name);
    return ddph__dev_sync(m->ctx->comm_stream, err);
}

/* One synchronising step of the others, shadowed: zeros through every
 * model's hooks, then on_step_end, as a step of theirs does. */
static ddph_status shadow_step(ddph_ctx *ctx)
{
    /* (A joined rank's step_begin takes no roll call: ddph_join's loop
     * has just taken it.) */
    ddph_status st = ddph_step_begin_flags(ctx, ctx->models, ctx->nmodels,
                                           DDPH_STEP_FORCE_SYNC);
    for (int i = 0; st == DDPH_OK && i < ctx->nmodels; i++) {
        ddph_model *m = ctx->models[i];
        for (int j = m->nparams - 1; st == DDPH_OK && j >= 0; j--) {
            ddph_err e;
            st = zero_grad(m, &m->params[j], &e);
            if (st != DDPH_OK)
                return ddph__ctx_fail(ctx, st, &e);
            st = ddph_grad_ready(m, j);
        }
    }
    if (st == DDPH_OK)
        st = ddph_step_wait(ctx);
    if (st == DDPH_OK)
        st = ddph_step_end(ctx);
    return st;
}

/* Every rank has joined: the last to join (the one that trained longest;
 * the highest rank among equals) has the parameters every rank keeps. */
static ddph_status sync_final_model(ddph_ctx *ctx, ddph_err *err)
{
    int64_t w = ctx->mpi.world.size;
    int64_t key = ctx->join_trained * w + ctx->mpi.world.rank;
    ddph_status st = ddph__mpi_allreduce_i64(&ctx->mpi, &key, 1, DDPH_MAX,
                                             err);
    if (st != DDPH_OK) {
        ddph__err_prefix(err, "join: finding the last rank to join");
        return st;
    }
    int root = (int)(key % w);
    for (int i = 0; st == DDPH_OK && i < ctx->nmodels; i++)
        st = ddph__replicas_broadcast(ctx->models[i], root, err);
    return st;
}

ddph_status ddph_join(ddph_ctx *ctx)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    if (!ctx->cfg.join)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "ddph_join: %s has no [runtime] join = true "
                               "(every rank must run the same number of "
                               "synchronising steps without it)",
                               ctx->cfg.path);
    if (ctx->in_step)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "ddph_join inside a step (end it with "
                               "ddph_step_wait and ddph_step_end first)");
    if (ctx->data_ended)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "ddph_join after a step flagged "
                               "DDPH_STEP_LAST (its peers were told that no "
                               "step follows; under join, end with "
                               "ddph_join alone)");
    for (int i = 0; i < ctx->nmodels; i++)
        if (!ctx->models[i]->finalized)
            return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                                   "ddph_join: model '%s' is not finalized",
                                   ctx->models[i]->name);
    /* Passes accumulated since the last synchronisation would be lost,
     * or kept out of step with the peers' windows into the next epoch:
     * refused on every rank (the peers wait in this step's roll call). */
    for (int i = 0; i < ctx->nmodels; i++) {
        const ddph_model *m = ctx->models[i];
        if (m->window == 0)
            continue;
        char msg[512];
        snprintf(msg, sizeof msg,
                 "ddph_join on rank %d with %d accumulated backward pass%s "
                 "of model '%s' not synchronised: flag the last batch's step "
                 "DDPH_STEP_END_OF_DATA, so that it synchronises, before "
                 "ddph_join",
                 ctx->mpi.world.rank, m->window, m->window == 1 ? "" : "es",
                 m->name);
        ddph__mpi_fail_job(&ctx->mpi, DDPH_ERR_STATE, msg);
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE, "%s", msg);
    }
    ctx->join_trained = (int64_t)atomic_load(&ctx->mpi.syncs_done);
    ctx->joined = 1;
    ddph_status st = DDPH_OK;
    ddph_err e;
    for (;;) {
        st = ddph__join_roll_call(ctx, 0, ctx->models, ctx->nmodels, &e);
        if (st != DDPH_OK)
            break;
        if (ctx->join_active == 0)
            break;
        st = shadow_step(ctx);
        if (st != DDPH_OK) {
            ctx->joined = 0;
            return st; /* its message is the context's already */
        }
    }
    if (st == DDPH_OK)
        st = sync_final_model(ctx, &e);
    /* The shadowed steps left the others' last average in this rank's
     * gradient memory: zeros, so that a next epoch's first step adds
     * nothing stale (as after a trainer's zero_grad). */
    for (int i = 0; st == DDPH_OK && i < ctx->nmodels; i++) {
        ddph_model *m = ctx->models[i];
        for (int j = 0; st == DDPH_OK && j < m->nparams; j++)
            st = zero_grad(m, &m->params[j], &e);
    }
    ctx->joined = 0;
    ctx->join_active = ctx->mpi.world.size;
    ctx->join_scale = 1.0;
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}
