/* hook.h: one hook instance, for one model: the loaded plugin, its
 * validated options, the plugin's state, the services table it is handed,
 * and the fp16/bf16 wrapper around it.  Also the per-call context the
 * services use to count bytes and carry the plugin's error message. */
#ifndef DDPH_HOOK_H
#define DDPH_HOOK_H

#include <stdio.h>

#include <ddphook/plugin.h>

#include "backends/comm.h"
#include "backends/gpu.h"
#include "support/config.h"
#include "plugin/loader.h"
#include "support/log.h"
#include "plugin/options.h"
#include "support/timeline.h"

typedef struct ddph_hook {
    ddph_plugin *plugin;
    ddph_options *options;
    void *state;
    ddph_wrapper wrapper;
    ddph_services services;
    /* The collectives: the backend its context chose (comm.h). */
    ddph_comm comm;
    ddph_gpu *gpu; /* with backend = nccl (CUDA buckets), else NULL */
    const ddph_gpu_ops *gpu_ops; /* the GPU module's table, with gpu */
    /* Its services' arithmetic and memory: the CPU's table, or with gpu
     * the module's (chosen once, by ddph__services_init). */
    const ddph_dev_ops *dev_ops;
    const ddph_logger *log;
    char *model;           /* for messages */
    int64_t model_id;      /* in the collectives' fingerprints: the
                              model's finalize order (-1 before) */
    ddph_timeline *timeline; /* the job's, for collective spans */
    int track;             /* its timeline track: DDPH_TRACK_COMM + lane */
    int is_lane_view;      /* a lane's view: shares plugin and state */
    char prefix[160];      /* "hook 'x' (model 'm'): " for its log lines */
    /* Per call: set by the runtime around each plugin call. */
    uint64_t call_bytes;   /* bytes this rank contributed to collectives */
    uint64_t call_recv_bytes; /* bytes it got from its peers */
    struct ddph_request *outstanding; /* nonblocking requests not ended */
    /* What the hook is working on, for the collectives' fingerprints:
     * the bucket's index (-1 in on_step_end) and the iteration or step. */
    int64_t call_bucket, call_iteration;
    /* The buffer on_bucket was handed (NULL outside it), for the offsets
     * in the fingerprints. */
    const char *call_buffer;
    size_t call_buffer_bytes;
    /* The host's stack just above the hook's frames during a call (NULL
     * outside): buffers between it and the stack pointer are the hook's
     * own locals (services.c refuses them for nonblocking collectives). */
    const char *frame_top;
    char message[DDPH__ERR_LEN]; /* from set_error or a failed service */
} ddph_hook;

/* Loads `name` (a name along plugin_path or a path, chosen on `line` of
 * the job file, 0 for the default), validates the [hook.NAME] options of
 * cfg and creates the instance.  `comm` is the backend of its collectives;
 * `gpu` (with its module's `gpu_ops`, or NULL) makes its arithmetic and
 * memory services act on GPU memory. */
ddph_status ddph__hook_create(const ddph_config *cfg, const char *name,
                              int line, ddph_wrapper wrapper, const char *model,
                              ddph_comm comm, ddph_gpu *gpu,
                              const ddph_gpu_ops *gpu_ops,
                              const ddph_logger *log, ddph_hook **out,
                              ddph_err *err);
void ddph__hook_destroy(ddph_hook *h);

/* Whether the plugin lets buckets run at once on several lanes
 * (DDPH_PLUGIN_CONCURRENT_BUCKETS, ABI minor 2). */
int ddph__hook_concurrent(const ddph_hook *h);
/* The hook as lane `lane` sees it: the same plugin, options and state,
 * with a services table of its own whose world is `world` and its own
 * per-call byte count and message.  Freed with ddph__hook_destroy (which
 * leaves what it shares alone). */
ddph_status ddph__hook_lane_view(const ddph_hook *h, int lane,
                                 struct ddph_group *world, ddph_hook **out,
                                 ddph_err *err);

/* Runs on_bucket on b (with the wrapper's casts when configured); `scratch`
 * is a buffer of b->numel half elements for the wrapper (NULL without).
 * Returns the plugin's status; the message is in err.  *sent and
 * *received get the bytes the call's collectives moved each way. */
/* A status a hook's `call` returned, as the host may pass it on: one the
 * ABI does not define (status.h) becomes DDPH_ERR_PLUGIN, with h->message
 * naming the hook, the call and the value. */
ddph_status ddph__hook_status(ddph_hook *h, const char *call, int st);

ddph_status ddph__hook_on_bucket(ddph_hook *h, ddph_bucket *b, void *scratch,
                                 uint64_t *sent, uint64_t *received,
                                 ddph_err *err);
/* A layout as a plugin built for an older minor reads it: `view` with
 * bucket_list (pointers into the host's buckets) and, when `stride` (the
 * plugin's sizeof(ddph_bucket)) is smaller than the host's, buckets[]
 * copied at that stride.  Free with ddph__layout_for_plugin_free. */
typedef struct ddph_plugin_layout {
    ddph_layout view;
    const ddph_bucket **list;
    unsigned char *packed;
} ddph_plugin_layout;
ddph_status ddph__layout_for_plugin(const ddph_layout *layout, size_t stride,
                                    ddph_plugin_layout *out);
void ddph__layout_for_plugin_free(ddph_plugin_layout *l);

/* Hands the bucket layout to the plugin's on_layout (ABI minor 2), if it
 * has one.  layout->buckets holds the host's own ddph_bucket; the plugin
 * gets them as its minor declared them, and bucket_list. */
ddph_status ddph__hook_on_layout(ddph_hook *h, const ddph_layout *layout,
                                 ddph_err *err);
ddph_status ddph__hook_on_step_end(ddph_hook *h, const ddph_step_info *info,
                                   ddph_err *err);

/* The dtype the plugin sees for a bucket of `dtype` under the wrapper. */
ddph_dtype ddph__hook_wire_dtype(const ddph_hook *h, ddph_dtype dtype);
/* The dtype a host bucket of `dtype` gradients is best kept in when the
 * host copies gradients in: the wrapper's, else the half type the plugin
 * asks for (DDPH_PLUGIN_BUCKETS_F16/BF16), else `dtype`. */
ddph_dtype ddph__hook_bucket_dtype(const ddph_hook *h, ddph_dtype dtype);
/* Whether the plugin lets the host divide buckets kept in store_dtype by
 * the world size as it copies gradients in (DDPH_PLUGIN_DIVIDES_FIRST, and
 * store_dtype is the half type the plugin asks for, if it asks for one). */
int ddph__hook_divides_first(const ddph_hook *h, ddph_dtype store_dtype);
/* Canonical text for the cross-rank digest: name, version, wrapper and
 * every option. */
void ddph__hook_describe(const ddph_hook *h, FILE *out);

#endif
