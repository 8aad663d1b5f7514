/* plan_hooks.h: the collectives each shipped hook issues on one bucket,
 * as the plugins in plugins/ issue them, priced by plan_model.h. */
#ifndef DDPH_CLI_PLAN_HOOKS_H
#define DDPH_CLI_PLAN_HOOKS_H

#include <stddef.h>

#include "plan_model.h"

/* A bucket as a hook sees it: f32 elements, and each tensor as a matrix
 * of rows x (numel / rows) (its first dimension: PowerSGD's view). */
typedef struct plan_bucket {
    size_t numel;
    int ntensors;
    const size_t *rows;  /* ntensors */
    const size_t *numels; /* ntensors */
} plan_bucket;

/* The hook options the byte counts depend on. */
typedef struct plan_hook_options {
    int psgd_rank;        /* matrix_approximation_rank */
    double psgd_min_rate; /* min_compression_rate */
    double topk_ratio;    /* ratio */
} plan_hook_options;

typedef struct plan_hook_cost {
    double comm_s;     /* the collectives, one after the other */
    double extra_s;    /* arithmetic that grows with the ranks (top-k's
                          scatter of every rank's selection) */
    double sent_bytes; /* as the runtime counts them (bench's sent/step) */
    double link_bytes; /* per direction of the busiest host link */
} plan_hook_cost;

/* 1 for a hook the model knows: allreduce, fp16, bf16, powersgd,
 * batched_powersgd, topk, int8. */
int plan_hook_known(const char *name);

/* The cost of `hook` on bucket b; scatter_s: seconds per element of a
 * scatter-add (top-k's sum of the ranks' selections). */
plan_hook_cost plan_hook_bucket(plan_model *m, const char *hook,
                                const plan_hook_options *o,
                                const plan_bucket *b, double scatter_s);

#endif
