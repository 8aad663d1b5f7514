/* failure.c: a failure on a context (context.h): its message kept for
 * ddph_last_error, the job's outcome for ddph_close, the log, and the
 * peers told when a collective broke the job.  Apart from context.c
 * because every part of core reports through it. */
#include "build-config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"

ddph_status ddph__ctx_fail(ddph_ctx *ctx, ddph_status st, const ddph_err *err)
{
    memcpy(ctx->error, err->msg, sizeof ctx->error);
    /* The job's outcome (ddph_close): every error but an argument refused
     * before anything happened and a non-finite gradient, which a trainer
     * may answer by skipping the step (as AMP's loss scaling does). */
    if (ctx->outcome == DDPH_OK && st != DDPH_ERR_INVALID &&
        st != DDPH_ERR_NONFINITE)
        ctx->outcome = st;
    ddph__log(&ctx->log, DDPH_LOG_ERROR, "%s", ctx->error);
    /* A collective broke the job on this rank and no one told the peers
     * yet: they get this, the fullest message. */
    if (ctx->job_up && ddph__ctl_broken(ctx->control))
        ddph__ctl_fail(ctx->control, st, ctx->error);
    return st;
}

ddph_status ddph__ctx_failf(ddph_ctx *ctx, ddph_status st, const char *fmt, ...)
{
    ddph_err e;
    va_list ap;
    va_start(ap, fmt);
    ddph__vfail(&e, st, fmt, ap);
    va_end(ap);
    return ddph__ctx_fail(ctx, st, &e);
}

ddph_status ddph_abort(ddph_ctx *ctx, const char *reason)
{
    if (!ctx || !reason)
        return DDPH_ERR_INVALID;
    if (ctx->job_up && ddph__ctl_broken(ctx->control))
        return DDPH_OK; /* the first failure stays the job's */
    char msg[sizeof ctx->error];
    snprintf(msg, sizeof msg, "rank %d aborted the job: %s",
             ddph__rank(ctx), reason);
    /* The peers first: they may be waiting on this rank right now. */
    if (ctx->job_up)
        ddph__ctl_fail(ctx->control, DDPH_ERR_STATE, msg);
    ddph__ctx_failf(ctx, DDPH_ERR_STATE, "%s", msg);
    return DDPH_OK;
}

/* For a trainer that waits on its peers outside ddphook (the Python
 * bridge's gathering state_dict): what the peers' notices say now, so
 * that it stops at once for a rank that will never come. */
ddph_status ddph_check_peers(ddph_ctx *ctx)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    if (!ctx->job_up)
        return DDPH_OK;
    ddph_err e;
    ddph_status st = ddph__ctl_fault(ctx->control, &e);
    int64_t after = 0;
    int peer = st == DDPH_OK ? ddph__ctl_closed_peer(ctx->control, &after)
                             : -1;
    if (peer >= 0)
        st = ddph__fail(&e, DDPH_ERR_STATE,
                        "rank %d closed the job (ddph_close) after %lld "
                        "synchronised step%s: it will join nothing more",
                        peer, (long long)after, after == 1 ? "" : "s");
    /* Told, not failed: the trainer decides what the peer's absence
     * means (a failed peer has broken the job already). */
    if (st != DDPH_OK)
        memcpy(ctx->error, e.msg, sizeof ctx->error);
    return st;
}
