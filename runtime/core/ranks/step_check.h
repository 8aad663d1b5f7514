/* step_check.h: the end-of-step agreement.  No synchronising step returns
 * DDPH_OK from ddph_step_wait unless every rank did the same step: the
 * same collectives on every lane (their number; each one's fingerprint
 * was compared as it ran), the same models, the same backward passes
 * synchronised (under join: by the ranks still training; a rank whose
 * data ended may have fewer, a joined rank has none of its own), the
 * same hook builds and the same number of trainer calls so far.  One small exchange per lane per synchronising step, in the
 * lane's fingerprint sequence ([runtime] check_collectives, on by
 * default), so a rank that skipped a collective its peers are still
 * waiting in is found at once, not after timeout_s. */
#ifndef DDPH_STEP_CHECK_H
#define DDPH_STEP_CHECK_H

#include "core/context.h"

/* Collective, from ddph_step_wait after every bucket's hook returned, and
 * from ddph_step_end after the hooks' on_step_end (`after_optimizer`;
 * only when a hook of the step has one): DDPH_ERR_MISMATCH on every rank
 * (the job fails) when the ranks' steps differ, naming the rank and what
 * differed. */
ddph_status ddph__step_check(ddph_ctx *ctx, int after_optimizer,
                             ddph_err *err);

#endif
