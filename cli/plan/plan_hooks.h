/* plan_hooks.h: the cost of the collectives a hook issued on a bucket
 * (recorded on a dry run, plan_record.h), priced by plan_model.h. */
#ifndef DDPH_CLI_PLAN_HOOKS_H
#define DDPH_CLI_PLAN_HOOKS_H

#include "plan_model.h"
#include "plan_record.h"

typedef struct plan_hook_cost {
    double comm_s;     /* the collectives, one after the other */
    double extra_s;    /* arithmetic that grows with the ranks: going
                          over what the peers' gathers brought */
    double sent_bytes; /* as the runtime counts them (bench's sent/step) */
    double link_bytes; /* per direction of the busiest host link */
} plan_hook_cost;

/* The cost of the recorded bucket b; scatter_s: seconds per 8 bytes a
 * rank receives from its peers by a gather (top-k's sum of a value and
 * index of every rank's selection). */
plan_hook_cost plan_hook_bucket(plan_model *m, const plan_rec_bucket *b,
                                double scatter_s);

#endif
