/* trainer_calls.c: the everyday cross-rank calls of ddphook.h (barrier,
 * scalar reductions, broadcast), so that trainers need not call MPI.  They
 * run on the job backend's trainer group (backend.h), between steps. */
#include "build-config.h"

#include <stdint.h>

#include <ddphook/ddphook.h>

#include "core/context.h"

/* Refused inside a step; a failed job fails at once (in the helpers).
 * The peers hear of the call: one still in a step this rank has left
 * reports it at once (backend_mpi.h, departures).  Then every rank's call
 * is compared (kind, count, dtype, op, root): calls that differ fail on
 * every rank before their collectives meet. */
static ddph_status usable(ddph_ctx *ctx, const char *what, ddph_dtype dtype,
                          size_t count, int op, int root)
{
    if (ctx->in_step)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "%s between ddph_step_begin and ddph_step_end "
                               "(call it between steps, on every rank)",
                               what);
    ddph__ctl_depart(ctx->control, DDPH__DEPART_TRAINER_CALL, what);
    ddph_err e;
    const ddph_backend *job = &ctx->job;
    ddph_status st = DDPH_OK;
    if (job->ops->trainer_call)
        st = job->ops->trainer_call(job->state, what, dtype, count, op, root,
                                    &e);
    if (st != DDPH_OK) {
        ddph__err_prefix(&e, "%s (rank %d)", what, ddph__rank(ctx));
        return ddph__ctx_fail(ctx, st, &e);
    }
    return DDPH_OK;
}

static struct ddph_group *trainer_group(ddph_ctx *ctx)
{
    return ctx->job.ops->trainer_group(ctx->job.state);
}

ddph_status ddph_barrier(ddph_ctx *ctx)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    ddph_status st = usable(ctx, "ddph_barrier", DDPH_U8, 0, -1, -1);
    ddph_err e;
    if (st == DDPH_OK &&
        (st = ctx->job.ops->barrier(ctx->job.state, trainer_group(ctx),
                                    "ddph_barrier", &e)) != DDPH_OK)
        return ddph__ctx_fail(ctx, st, &e);
    return st;
}

static ddph_status reduce_f64(ddph_ctx *ctx, double *values, int n,
                              ddph_redop op, const char *what)
{
    if (!ctx || (n > 0 && !values) || n < 0 ||
        (op != DDPH_SUM && op != DDPH_MAX && op != DDPH_MIN))
        return DDPH_ERR_INVALID;
    ddph_status st = usable(ctx, what, DDPH_F64, (size_t)n, (int)op, -1);
    ddph_err e;
    if (st == DDPH_OK &&
        (st = ctx->host.ops->allreduce(ctx->host.self, trainer_group(ctx),
                                       values, (size_t)n, DDPH_F64, op,
                                       &e)) != DDPH_OK)
        return ddph__ctx_fail(ctx, st, &e);
    return st;
}

ddph_status ddph_allreduce_f64(ddph_ctx *ctx, double *values, int n,
                               ddph_redop op)
{
    return reduce_f64(ctx, values, n, op, "ddph_allreduce_f64");
}

ddph_status ddph_average_f64(ddph_ctx *ctx, double *values, int n)
{
    ddph_status st = reduce_f64(ctx, values, n, DDPH_SUM, "ddph_average_f64");
    for (int i = 0; st == DDPH_OK && i < n; i++)
        values[i] /= (double)ddph__size(ctx);
    return st;
}

ddph_status ddph_broadcast(ddph_ctx *ctx, void *data, size_t bytes, int root)
{
    if (!ctx || (bytes && !data))
        return DDPH_ERR_INVALID;
    if (root < 0 || root >= ddph__size(ctx))
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                               "ddph_broadcast: root %d is not a rank of "
                               "this job (0 to %d)",
                               root, ddph__size(ctx) - 1);
    ddph_status st = usable(ctx, "ddph_broadcast", DDPH_U8, bytes, -1, root);
    ddph_err e;
    if (st == DDPH_OK &&
        (st = ctx->host.ops->broadcast(ctx->host.self, trainer_group(ctx),
                                       data, bytes, DDPH_U8, root, &e)) !=
            DDPH_OK)
        return ddph__ctx_fail(ctx, st, &e);
    return st;
}
