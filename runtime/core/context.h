/* context.h: the runtime's internal view of a job: the context (its
 * backend as a table and an opaque state), its models, their parameters
 * and buckets.  Shared by the files of core/: context.c (open, steps,
 * accumulation), model.c (registration, bucket layout, finalize),
 * reducer.c (readiness, launch order, the communication lanes), ranks/
 * (what the ranks agree on) and state/ (the hooks' state files). */
#ifndef DDPH_CONTEXT_H
#define DDPH_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <ddphook/ddphook.h>
#include <ddphook/plugin.h>

#include "backends/backend.h"
#include "backends/comm.h"
#include "backends/gpu.h"
#include "support/config.h"
#include "plugin/hook.h"
#include "support/log.h"
#include "support/timeline.h"
#include "support/util.h"

typedef struct ddph_param {
    char *name;
    void *grad;     /* caller's memory, or inside the bucket storage */
    void *data;     /* caller's parameter memory (optional) */
    int64_t *shape;
    int ndim;
    size_t numel;
    ddph_dtype dtype;
    ddph_device device;
    int bucket;     /* index of its bucket */
    size_t offset;  /* first element inside the bucket */
    int ready;      /* marked ready in the current step */
    /* gradient_as_bucket_view: the trainer gave memory of its own at
     * add_param and has not asked ddph_model_grad_ptr where the gradient
     * went (it would go on writing where the runtime no longer reads). */
    int grad_moved_unseen;
} ddph_param;

typedef enum {
    DDPH_BUCKET_IDLE = 0,     /* waiting for gradients */
    DDPH_BUCKET_QUEUED = 1,   /* handed to the communication thread */
    DDPH_BUCKET_DONE = 2,     /* hook finished (ok or not) */
} ddph_bucket_state;

typedef struct ddph_rt_bucket {
    int index;
    int *params; /* parameter indices, bucket order */
    int nparams;
    size_t numel;
    ddph_dtype dtype;        /* of its gradients */
    /* What storage holds: dtype, or with copies into host buckets the
     * wrapper's or the hook's half type (gradients cast in and back). */
    ddph_dtype store_dtype;
    /* Copies in divide by this (the world size) for a hook that divides
     * first (DDPH_PLUGIN_DIVIDES_FIRST); 0: plain copies. */
    double divided_by;
    ddph_device device;
    void *storage;           /* flat, numel elements of store_dtype */
    void *ready_event;       /* CUDA: recorded when the bucket is full */
    void *scratch;           /* wrapper's low-precision copy, or NULL */
    ddph_tensor_view *views; /* one per parameter */
    int pending;             /* parameters not yet ready this step */
    ddph_bucket_state state;
    ddph_status status;      /* hook result of this step */
    char *message;           /* detailed failure, or NULL */
    uint64_t hook_calls;
    uint64_t bytes_on_wire;  /* sent by this rank, all calls */
    uint64_t bytes_received; /* from its peers, all calls */
    int copied_back;         /* this step's results are in the trainer's
                                memory already (copied by the lane, for
                                the model's bucket callback) */
} ddph_rt_bucket;

/* A parameter's gradient or weight memory, for finding overlaps. */
typedef struct ddph_mem_range {
    ddph_device device;
    uintptr_t lo, hi; /* [lo, hi) */
    int index;
    int is_data; /* the weights (set_param_data), not the gradient */
} ddph_mem_range;

struct ddph_model {
    ddph_ctx *ctx;
    char *name;
    ddph_param *params;
    int nparams, capparams;
    int finalized;
    int64_t id;         /* finalize order, the same on every rank: the
                           model in fingerprints and step agreements */
    ddph_rt_bucket *buckets;
    int nbuckets;
    void *shared; /* the buckets' memory on one host (the backend's
                     handle of it), or NULL: each has its own */
    int next_launch;    /* lowest bucket not yet launched this step */
    ddph_hook *hook;
    /* The hook as each lane sees it (lane_hooks[0] = hook); only lane 0
     * unless the hook allows concurrent buckets. */
    ddph_hook *lane_hooks[DDPH__MAX_LANES];
    int nlanes;
    int accumulate_steps;
    double first_bucket_cap_mb, bucket_cap_mb; /* [runtime]'s, or the trainer's */
    int window;         /* backward passes accumulated since last sync */
    uint64_t iteration; /* synchronised steps so far */
    uint64_t steps;     /* optimizer steps so far */
    int in_step;
    char nonfinite[512]; /* check_finite: the first report of the step */
    uint64_t *gpu_nonfinite; /* check_finite on CUDA gradients: per
                                parameter, device memory (else NULL) */
    /* ddph_model_set_bucket_callback: called by the lane after each
     * bucket; set between steps only, so the lanes read it unlocked (the
     * queue's mutex orders the write before their reads). */
    ddph_bucket_callback bucket_callback;
    void *bucket_callback_user;
    /* The gradient memory the trainer registered, by device and address,
     * from finalize: for models stepped together (and, with
     * gradient_as_bucket_view, for models sharing it). */
    ddph_mem_range *grad_spans;
    int ngrad_spans;
};

/* One job of the queue a communication lane serves. */
typedef struct ddph_job {
    ddph_model *model;
    int bucket;
} ddph_job;

/* A communication lane: a thread that runs hooks, with a communicator of
 * its own, so that buckets on different lanes need no common order (lane 0
 * uses the world).  A model whose hook allows it (flag
 * DDPH_PLUGIN_CONCURRENT_BUCKETS) spreads its buckets over the lanes,
 * bucket b on lane b % nlanes; any other model uses lane 0 alone.  Each
 * lane serves its queue in order, the same on every rank. */
typedef struct ddph_lane {
    int index;
    struct ddph_group *group;
    struct ddph_ctx *ctx;
    pthread_t thread;
    int started;
    pthread_cond_t work; /* guarded by ctx->mu */
    ddph_job *queue;
    size_t qcap, qhead, qtail;
    /* The hook call in progress (guarded by ctx->mu), for the watchdog
     * of ddph__reducer_wait: a hook that never returns is reported. */
    ddph_job running;
    int in_hook;
    int in_callback;   /* in_hook, past the hook: in the bucket callback */
    double hook_since; /* ddph__now() when it was called */
    _Atomic long long active_us; /* the lane's activity clock (util.h) */
    int abandoned;     /* declared stuck: never joined, never freed */
} ddph_lane;

struct ddph_ctx {
    ddph_config cfg;
    ddph_logger log;
    /* The job backend (backend.h), chosen once at open; job_up once it
     * joined the ranks. */
    ddph_backend job;
    int job_up;
    ddph_comm host;      /* its host collectives (the trainer's calls) */
    int host_rank, host_size; /* this rank among the ranks of its host */
    double timeout_s;
    ddph_gpu *gpu; /* backend = nccl: the GPU module's state, else NULL */
    const ddph_gpu_ops *gpu_ops; /* the module's table, with gpu */
    /* The hooks' collectives: MPI's, or the GPU module's with gpu; chosen
     * once, when the context opens. */
    ddph_comm comm;
    /* The job's control plane, as the reducer reaches it (comm.h). */
    ddph_control control;
    void *compute_stream; /* the trainer's cudaStream_t (nccl backend) */
    void *comm_stream;    /* the hooks' stream (nccl backend), or NULL */
    int cuda_device;      /* this rank's GPU (nccl backend) */
    void *step_end_event; /* CUDA: orders on_step_end with the trainer */
    ddph_model **models;
    int nmodels;
    int64_t models_finalized;
    /* Random, the same on every rank, new each job: with the count of
     * this rank's ddph_state_save_to_memory calls, the id of such a save,
     * which a load compares across ranks (state_memory.c). */
    uint64_t job_token;
    uint64_t memory_saves;
    char error[DDPH__ERR_LEN];
    /* The first error any call reported on this rank: ddph_close returns
     * the job's outcome, every rank's errors included. */
    ddph_status outcome;
    ddph_timeline timeline;
    uint64_t step_count;  /* steps begun, for the timeline */
    double step_start;    /* timeline clock at step_begin */

    /* The current step. */
    ddph_model **step_models;
    int nstep_models;
    int in_step;
    int waited;  /* step_wait returned for this step */
    int warned_mixed_windows; /* warn_shared_schedule said it once */
    int last_step;  /* this step was flagged DDPH_STEP_LAST */
    int ends_data;  /* ...or END_OF_DATA: its window may be short (join) */
    int lanes_abandoned; /* a lane is stuck in a hook (reducer.c) */
    int data_ended; /* ...and has synchronised: no step may follow */
    int syncs;   /* this step synchronises */

    /* [runtime] join (join.h). */
    int joined;          /* in ddph_join, shadowing the others' steps */
    int join_active;     /* ranks still training, from the last roll call */
    double join_scale;   /* applied to each bucket after its hook: W /
                            join_active, or 1 */
    int64_t join_trained; /* synchronised steps this rank trained before
                             ddph_join */

    /* Communication lanes and their queues (guarded by mu). */
    ddph_lane lanes[DDPH__MAX_LANES];
    int nlanes;
    pthread_mutex_t mu;
    pthread_cond_t done;
    int stop;
};

/* This rank and the job's size, from the control plane's world (the one
 * way core/ reads them; it outlives a GPU backend's state). */
static inline int ddph__rank(const ddph_ctx *ctx)
{
    return ddph__ctl_world(ctx->control)->rank;
}

static inline int ddph__size(const ddph_ctx *ctx)
{
    return ddph__ctl_world(ctx->control)->size;
}

/* failure.c: records err as the context's last error, logs it, returns
 * st. */
ddph_status ddph__ctx_fail(ddph_ctx *ctx, ddph_status st, const ddph_err *err);
ddph_status ddph__ctx_failf(ddph_ctx *ctx, ddph_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* context.c: DDPH_OK when `index` names a parameter of m, else
 * DDPH_ERR_INVALID with "CALL: model 'M' has no parameter I (it has N)"
 * as the job's last error. */
ddph_status ddph__param_index(ddph_model *m, const char *call, int index);
/* context.c: ddph_grad_ready for a gradient the runtime zeroed itself (a
 * joined rank's shadow step, join.c): where the trainer writes is not
 * asked about, so a rank that joins before it ever trained and never
 * asked ddph_model_grad_ptr is not refused. */
ddph_status ddph__grad_ready_zeroed(ddph_model *m, int index);

/* model.c (and ddph__model_stats_line, in cli_internal.h) */
void ddph__model_free(ddph_model *m);
/* What finalize does on this rank alone: the hook (with ctx->comm), the
 * buckets, the layout handed to the hook, the lanes' views.  Finalize
 * then agrees across ranks; the reducer's unit tests use it as is. */
ddph_status ddph__model_build(ddph_model *m, ddph_err *err);

/* reducer.c */
ddph_status ddph__reducer_start(ddph_ctx *ctx, ddph_err *err);
void ddph__reducer_stop(ddph_ctx *ctx);
/* Resets the model's bucket state for a new step. */
ddph_status ddph__reducer_begin(ddph_model *m, ddph_err *err);
ddph_status ddph__reducer_ready(ddph_model *m, int index, ddph_err *err);
/* Waits for every bucket of the models of the step and copies back. */
ddph_status ddph__reducer_wait(ddph_ctx *ctx, ddph_err *err);

/* agreement.c */
/* Collective: every rank compares its description of the model with rank
 * 0's; local_status/local_err is this rank's finalize result so far, so
 * that a rank that failed alone still takes part and every rank learns. */
ddph_status ddph__agree(ddph_ctx *ctx, ddph_model *m, ddph_status local_status,
                        const ddph_err *local_err, ddph_err *err);

#endif
