/* join.c: see join.h. */
#include "build-config.h"

#include "core/ranks/join.h"
#include "core/ranks/roll_call.h"

#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "core/ranks/replicas.h"

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
            st = ddph__grad_ready_zeroed(m, j);
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
    int64_t w = ddph__size(ctx);
    int64_t key = ctx->join_trained * w + ddph__rank(ctx);
    ddph_status st = ddph__ctl_allreduce_i64(ctx->control, &key, 1,
                                                 DDPH_MAX, err);
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
                 ddph__rank(ctx), m->window, m->window == 1 ? "" : "es",
                 m->name);
        ddph__ctl_fail(ctx->control, DDPH_ERR_STATE, msg);
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE, "%s", msg);
    }
    ctx->join_trained = ddph__ctl_syncs_done(ctx->control);
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
    ctx->join_active = ddph__size(ctx);
    ctx->join_scale = 1.0;
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}
