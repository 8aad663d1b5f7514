/* roll_call.h: the roll call that begins each synchronising step under
 * [runtime] join = true (join.h): taken by step_begin on a rank still
 * training and by ddph_join's loop on a joined one.  Apart from join.c,
 * which runs steps through context.c's step calls, so that context.c
 * need not call up into it. */
#ifndef DDPH_ROLL_CALL_H
#define DDPH_ROLL_CALL_H

#include "core/context.h"

/* Collective, at a synchronising step_begin (join = true): counts the
 * ranks still training (this one counts when `training`) into
 * ctx->join_active, checks that every rank steps models[0..n-1], and sets
 * the scale the reducer applies after each hook. */
ddph_status ddph__join_roll_call(ddph_ctx *ctx, int training,
                                 ddph_model *const *models, int n,
                                 ddph_err *err);

#endif
