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

/* Appends ", rank R after S" (the first: "rank R closed the job ...")
 * for a closed peer to the message at out, of cap bytes. */
static void name_closed(char *out, size_t cap, int count, int rank,
                        int64_t after)
{
    size_t used = strlen(out);
    if (used + 1 >= cap)
        return;
    if (count == 0)
        snprintf(out + used, cap - used,
                 "rank %d closed the job (ddph_close) after %lld "
                 "synchronised step%s",
                 rank, (long long)after, after == 1 ? "" : "s");
    else
        snprintf(out + used, cap - used, ", rank %d after %lld", rank,
                 (long long)after);
}

/* For a trainer that waits on its peers outside ddphook (the Python
 * bridge's gathering state_dict): what the peers' notices say now, so
 * that it stops at once for a rank that will never come.  Told, not
 * failed: the trainer decides what a peer's absence means (a failed
 * peer has broken the job already). */
ddph_status ddph_check_peers(ddph_ctx *ctx, const int *ranks, int n)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    if (!ctx->job_up)
        return DDPH_OK;
    int world = ddph__size(ctx);
    if (n < 0 || (n > 0 && !ranks))
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                               "check_peers: %d ranks at %p", n,
                               (const void *)ranks);
    for (int i = 0; ranks && i < n; i++)
        if (ranks[i] < 0 || ranks[i] >= world)
            return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                                   "check_peers: rank %d is not a rank of "
                                   "this job (0 to %d)",
                                   ranks[i], world - 1);
    ddph_err e;
    ddph_status st = ddph__ctl_fault(ctx->control, &e);
    if (st == DDPH_OK) {
        char msg[sizeof ctx->error] = "";
        int closed = 0;
        for (int i = 0; i < (ranks ? n : world); i++) {
            int peer = ranks ? ranks[i] : i;
            int64_t after = 0;
            if (peer != ddph__rank(ctx) &&
                ddph__ctl_peer_closed(ctx->control, peer, &after))
                name_closed(msg, sizeof msg, closed++, peer, after);
        }
        if (closed)
            st = ddph__fail(&e, DDPH_ERR_STATE,
                            "%s: %s will join nothing more", msg,
                            closed == 1 ? "it" : "they");
    }
    if (st != DDPH_OK)
        memcpy(ctx->error, e.msg, sizeof ctx->error);
    return st;
}
