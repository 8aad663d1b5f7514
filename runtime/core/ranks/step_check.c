/* step_check.c: see step_check.h. */
#include "build-config.h"

#include "core/ranks/step_check.h"

static int64_t mix(int64_t h, uint64_t v)
{
    return (int64_t)ddph__mix64((uint64_t)h, v);
}

/* The hook as built: two builds of one name and version differ here. */
static int64_t hook_identity(const ddph_hook *h)
{
    const ddph_plugin *p = h->plugin;
    int64_t d = mix(0, p->file_crc);
    d = mix(d, p->file_size);
    return mix(d, (uint64_t)h->wrapper);
}

ddph_status ddph__step_check(ddph_ctx *ctx, int after_optimizer,
                             ddph_err *err)
{
    if (!ctx->cfg.check_collectives || ddph__size(ctx) < 2)
        return DDPH_OK;
    if (after_optimizer) {
        int any = 0; /* only hooks with on_step_end issue collectives then */
        for (int k = 0; k < ctx->nstep_models; k++)
            any |= ctx->step_models[k]->hook->plugin->api.on_step_end != NULL;
        if (!any)
            return DDPH_OK;
    }
    /* Under join the ranks' passes may differ legitimately (a joined
     * rank's shadow, a window cut short by the end of a rank's data):
     * each rank says which it is, and the exchange compares the passes of
     * the ranks still training (backend_mpi.h). */
    ddph_step_summary s = {0};
    ddph_model *first = ctx->step_models[0];
    s.first_model = first->id;
    s.iteration = (int64_t)first->iteration;
    s.passes = first->window + 1;
    s.trainer_calls = ddph__ctl_trainer_calls(ctx->control);
    s.digest = after_optimizer ? 1 : 0;
    s.join_role = !ctx->cfg.join ? DDPH__STEP_PLAIN
                  : ctx->joined  ? DDPH__STEP_JOINED
                  : ctx->ends_data ? DDPH__STEP_DATA_ENDED
                                   : DDPH__STEP_TRAINING;
    for (int k = 0; k < ctx->nstep_models; k++) {
        const ddph_model *m = ctx->step_models[k];
        if (m->id < 63 && s.models >= 0)
            s.models |= (int64_t)1 << m->id;
        else /* past 62 models: a digest, marked by the sign bit */
            s.models = mix(s.models, (uint64_t)m->id) | INT64_MIN;
        s.digest = mix(s.digest, (uint64_t)m->id);
        s.digest = mix(s.digest, (uint64_t)hook_identity(m->hook));
        s.passes_digest = mix(s.passes_digest, (uint64_t)m->window + 1);
    }
    struct ddph_group *groups[DDPH__MAX_LANES];
    for (int i = 0; i < ctx->nlanes; i++)
        groups[i] = ctx->lanes[i].group;
    ddph_status st = ddph__ctl_step_agree(ctx->control, groups,
                                              ctx->nlanes, &s, err);
    if (st != DDPH_OK)
        ddph__err_prefix(err, "%s (rank %d)",
                         after_optimizer ? "step_end" : "step_wait",
                         ddph__rank(ctx));
    return st;
}
