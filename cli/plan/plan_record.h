/* plan_record.h: the collectives a hook issues, learnt by running it.
 *
 * Any hook (a shipped name or a path to a .so) is loaded through the
 * runtime's loader and run on one rank whose world is faked to W ranks:
 * its collectives go to a recording communicator that moves the data a
 * world of W identical ranks would (an allgather copies this rank's part
 * into every slot) and writes down each call's kind, type and size.  The
 * hook's on_layout, then its on_bucket on every bucket of the model, then
 * its on_step_end, run for DRY_STEPS steps; the last step is kept, so a
 * hook that warms up (PowerSGD compresses from its third step here, as
 * `ddphook bench hooks` configures it) is priced in its steady state. */
#ifndef DDPH_CLI_PLAN_RECORD_H
#define DDPH_CLI_PLAN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "cli/bench_common.h"

#define PLAN_DRY_STEPS 4
/* The largest world a dry run fakes: a gathering hook allocates and goes
 * over every rank's part. */
#define PLAN_DRY_MAX_WORLD 4096

typedef enum plan_rec_kind {
    PLAN_REC_ALLREDUCE,
    PLAN_REC_ALLGATHER,  /* count: what each rank contributes */
    PLAN_REC_ALLGATHERV, /* count: the largest contribution */
    PLAN_REC_ALLTOALL,   /* count: what each rank sends each peer */
    PLAN_REC_BROADCAST,
    PLAN_REC_REDUCE_SCATTER, /* count: what each rank gets */
} plan_rec_kind;

typedef struct plan_rec_call {
    plan_rec_kind kind;
    size_t count;
    size_t elem_bytes;
    int half;         /* an f16 or bf16 sum */
    int sum;          /* the reduction is DDPH_SUM */
    int whole_bucket; /* an allreduce of the bucket's own buffer, whole */
} plan_rec_call;

typedef struct plan_rec_bucket {
    plan_rec_call *calls;
    int ncalls;
    double sent_bytes; /* as the runtime counts them (bench's sent/step) */
} plan_rec_bucket;

/* A model's buckets: bucket b holds tensors [first[b], first[b]+count[b])
 * of `shapes` (ndim[i] extents each) and numel[b] elements. */
typedef struct plan_rec_model {
    int nbuckets;
    const size_t *numel;
    const int *first, *count;
    int ntensors;
    const char *const *names;
    const int *ndim;
    const int64_t *const *shapes;
} plan_rec_model;

typedef struct plan_recording {
    int nbuckets;
    plan_rec_bucket *buckets; /* the last dry step's, bucket by bucket */
    char hook_name[128];      /* as the plugin names itself */
} plan_recording;

/* Dry-runs `hook` with `opts` (and PowerSGD's rank `psgd_rank`, as bench
 * does) on `model` in a world of `world` ranks.  Returns 1, or 0 with the
 * cause in msg. */
int plan_record(const char *hook, const char *plugin_path,
                const bench_options *opts, int psgd_rank, int world,
                const plan_rec_model *model, plan_recording *out, char *msg,
                size_t cap);
void plan_recording_free(plan_recording *r);

#endif
