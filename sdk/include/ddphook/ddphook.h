/* ddphook/ddphook.h: the trainer's API.
 *
 * A trainer opens a job (an INI file), creates one or more models, registers
 * each model's gradient tensors, finalizes the models (bucket layout, hook
 * instance, cross-rank agreement), and then, for every step:
 *
 *     ddph_step_begin(ctx, models, n)      before the backward pass
 *     ddph_grad_ready(model, i)            as each gradient is complete
 *     ddph_step_wait(ctx)                  all buckets reduced and averaged
 *     ... optimizer ...
 *     ddph_step_end(ctx)                   after the optimizer
 *
 * Threading: one context is used by one trainer thread at a time; the
 * runtime runs hooks on a communication thread of its own.
 *
 * Errors: every fallible call returns a ddph_status (0 = DDPH_OK, negative on
 * failure).  The detailed message of the most recent failure on a context is
 * returned by ddph_last_error(); it names the file and line (INI), the plugin
 * and symbol (loader), or the bucket, hook and rank (runtime).  Failures are
 * also logged to stderr.  Outputs through pointers are written only on
 * success.
 */
#ifndef DDPHOOK_DDPHOOK_H
#define DDPHOOK_DDPHOOK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <ddphook/status.h>
#include <ddphook/types.h>
#include <ddphook/version.h> /* DDPH_VERSION_MAJOR, _MINOR, _PATCH, _STRING */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddph_ctx ddph_ctx;     /* a job: one per process */
typedef struct ddph_model ddph_model; /* owned by its ctx */

/* Generic message for a status ("invalid job configuration"); never NULL.
 * Static storage. */
const char *ddph_strerror(ddph_status status);
/* Symbolic name of a status ("DDPH_ERR_CONFIG"); never NULL. */
const char *ddph_status_name(ddph_status status);

/* ---- context ------------------------------------------------------------ */

/* Reads the job INI at ini_path (NULL: all defaults), initialises MPI when
 * the trainer has not (with MPI_THREAD_MULTIPLE; argc/argv may be NULL),
 * and loads the configured hook plugin.  On failure nothing is returned
 * through *out and the message is logged to stderr. */
ddph_status ddph_open(const char *ini_path, int *argc, char ***argv,
                      ddph_ctx **out);
/* Ends the job and frees every model and hook.  Accepts NULL.  Never
 * blocks for much longer than timeout_s:
 *  - on a healthy job every rank meets in a barrier (within timeout_s),
 *    then MPI is finalized if ddph_open initialised it.  Returns the
 *    job's outcome on every rank: DDPH_OK when no call on any rank
 *    reported an error, else the status the lowest such rank reported
 *    first (a failed ddph_state_save, a refused ddph_join, a call out of
 *    order, ...; that rank is logged), so `return ddph_close(ctx) ==
 *    DDPH_OK ? 0 : 1` is a trainer's honest exit status.  Two errors do
 *    not count: DDPH_ERR_INVALID (an argument refused before anything
 *    happened) and DDPH_ERR_NONFINITE (a step the trainer may skip).
 *    MPI_Finalize runs under a watchdog: MPICH 4.0 can deadlock in it
 *    between hosts after a job that ended well, and if it has not
 *    returned after 10 s the process exits with status 0, saying so.
 *    Make ddph_close the trainer's last call;
 *  - when the job has failed (a collective failed or timed out, a peer
 *    rank reported a failure, the barrier found a dead peer, or this rank
 *    closes in the middle of a synchronising step) no collective is called
 *    and MPI is left unfinalized: the status of the failure is returned
 *    and its message logged, and the process should exit non-zero.
 * Closing with an accumulation window open (gradients accumulated but
 * never synchronised) logs a warning. */
ddph_status ddph_close(ddph_ctx *ctx);
/* Fails the job on every rank because of this rank, saying why (`reason`,
 * e.g. "interrupted (SIGINT)"): this rank's next calls fail, and each
 * peer's collective fails within about a second with "rank R failed: rank
 * R aborted the job: REASON", so no rank waits for timeout_s and none is
 * blamed for this one's departure.  Never blocks; ddph_close then returns
 * the failure (call it next, and exit non-zero).  Does nothing on a job
 * that has failed already.  Since 0.9.0 (library 9:0:8). */
ddph_status ddph_abort(ddph_ctx *ctx, const char *reason);
/* The detailed message of the most recent failure on ctx ("" if none).
 * Valid until the next call on ctx. */
const char *ddph_last_error(const ddph_ctx *ctx);
/* What this rank knows now of the peers it waits for, `ranks` (n of
 * them; NULL and 0: every peer): DDPH_OK while no peer is known to have
 * failed and none of `ranks` to have closed the job; else the job's
 * failure (a peer that failed or aborted: "rank R failed: ..."), or
 * DDPH_ERR_STATE naming every one of `ranks` whose close notice
 * (ddph_close) came ("rank R closed the job (ddph_close) after S
 * synchronised steps, rank Q after T: ..."), its message in
 * ddph_last_error.  A rank outside the job: DDPH_ERR_INVALID.  This rank
 * alone, no collective, the job unchanged: for a trainer that waits on
 * its peers outside ddphook (the Python bridge's gathering state_dict)
 * and must not wait out its timeout for a rank that is gone, nor stop for
 * one that closed after it was done.  A rank killed outright (SIGKILL)
 * leaves no notice: it is found by the next collective that times out.
 * Since 0.9.0. */
ddph_status ddph_check_peers(ddph_ctx *ctx, const int *ranks, int n);
int ddph_rank(const ddph_ctx *ctx);
int ddph_world_size(const ddph_ctx *ctx);
/* With backend = nccl: this rank's GPU, as a CUDA device index of this
 * process.  The runtime chooses it: the rank's index among the ranks of
 * its host, modulo the GPUs the rank sees (so a rank that sees only its
 * own, through CUDA_VISIBLE_DEVICES, gets 0).  ddph_open leaves the
 * calling thread's current device alone: before allocating gradients,
 * call cudaSetDevice(ddph_cuda_device(ctx)) on each thread that makes
 * GPU memory or launches work for the runtime.  -1 on other backends.
 * Since 0.9.0 (library 9:0:8). */
int ddph_cuda_device(const ddph_ctx *ctx);

/* With backend = nccl: the trainer's compute stream (a cudaStream_t; NULL
 * = the legacy default stream; a trainer built with --default-stream
 * per-thread passes cudaStreamPerThread).  Gradient copies into the
 * buckets are enqueued on it, and each bucket's hook waits for an event
 * recorded on it, so the communication stream overlaps the rest of the
 * backward pass.  Returns DDPH_ERR_UNSUPPORTED on other backends. */
ddph_status ddph_set_stream(ddph_ctx *ctx, void *cuda_stream);

/* With backend = nccl: the communication stream (a cudaStream_t) the
 * hooks' kernels, collectives and the copies of the results back into the
 * trainer's gradients are enqueued on.  A bucket callback is called once
 * its bucket's results are enqueued there, not done: an event the callback
 * records on this stream completes when they are (ddphook.torch completes
 * PyTorch's CUDA futures so), and the trainer's own stream is never made
 * to wait mid-step.  NULL on other backends.  Since 0.9.0. */
void *ddph_cuda_comm_stream(const ddph_ctx *ctx);

/* ---- models ------------------------------------------------------------- */

/* Creates a model named `name` (used by [model.NAME] sections and in
 * messages).  The model belongs to ctx and is freed by ddph_close. */
ddph_status ddph_model_create(ddph_ctx *ctx, const char *name,
                              ddph_model **out);

/* Registers one gradient tensor, dense and row-major.  `grad` is the
 * caller's gradient memory of prod(shape) elements (it may be NULL when
 * gradient_as_bucket_view is on: fetch the runtime's pointer with
 * ddph_model_grad_ptr after finalize).  The caller keeps ownership.
 * Memory registered in two models: refused at the second finalize with
 * gradient_as_bucket_view, and at ddph_step_begin when both models are
 * given to one step (DDPH_ERR_INVALID).  The
 * parameter's index (registration order, from 0) goes to *index_out when it
 * is not NULL.  `name` is copied. */
ddph_status ddph_model_add_param(ddph_model *model, const char *name,
                                 void *grad, const int64_t *shape, int ndim,
                                 ddph_dtype dtype, ddph_device device,
                                 int *index_out);

/* Gives the runtime the parameter (weight) memory of parameter `index`
 * (prod(shape) elements of the gradient's dtype, on the same device).  The
 * caller keeps ownership.  Recommended for every parameter: with it,
 * ddph_model_finalize copies rank 0's values to every rank (as PyTorch DDP
 * does at construction; [runtime] broadcast_parameters), [runtime]
 * check_replicas_every = N compares the ranks' values every N synchronised
 * steps, and hooks that average parameters after the optimizer
 * (on_step_end) can see them.  Call it before ddph_model_finalize, with the
 * same parameters on every rank (after it: DDPH_ERR_STATE, the broadcast
 * is over).  Finalize refuses weights that overlap a parameter's gradient
 * memory (DDPH_ERR_INVALID); two parameters may share weights (tied).  In
 * GPU memory the values are handed to hooks but neither broadcast nor
 * compared. */
ddph_status ddph_model_set_param_data(ddph_model *model, int index,
                                      void *data);

/* This model's bucket size limits in MiB, as [runtime] first_bucket_cap_mb
 * and bucket_cap_mb give them for every model (docs/config.md); 0 keeps
 * the job file's value (which may be auto).  For a trainer that must
 * reproduce a given layout, e.g. the Python bridge giving a DDP module's
 * own caps.  Before ddph_model_finalize, the same on every rank (finalize
 * compares the buckets).  DDPH_ERR_INVALID for a cap outside
 * [2^-20, 65536] or NaN.  Since 0.7.0. */
ddph_status ddph_model_set_bucket_caps(ddph_model *model, double first_mb,
                                       double cap_mb);

/* Freezes the parameter list: assigns buckets, creates the model's hook
 * instance, and checks on every rank that all ranks agree on parameters,
 * buckets and hook configuration.  Collective over all ranks. */
ddph_status ddph_model_finalize(ddph_model *model);

/* With gradient_as_bucket_view = true: the address where parameter
 * `index`'s gradient lives (inside the runtime's flat bucket storage, owned
 * by the runtime, valid until ddph_close).  Without it: the caller's
 * pointer.  Only after finalize (before it: DDPH_ERR_STATE, a call out of
 * order, with a message).  With the option, a parameter registered
 * with memory of the caller's own is refused at ddph_grad_ready
 * (DDPH_ERR_STATE) until this was asked for it: the caller would go on
 * writing where the runtime no longer reads. */
ddph_status ddph_model_grad_ptr(ddph_model *model, int index, void **out);

/* What a trainer, a test or a benchmark may want to know about a bucket. */
typedef struct ddph_bucket_info {
    int index;              /* launch order, 0 first */
    int nparams;            /* parameters in the bucket */
    const int *params;      /* their indices, in bucket order */
    size_t numel;           /* elements */
    size_t bytes;           /* numel * element size */
    ddph_dtype dtype;
    ddph_device device;
    uint64_t hook_calls;    /* on_bucket calls started so far */
    uint64_t bytes_on_wire; /* bytes this rank sent, all calls (see
                             ddph_model_bucket_traffic) */
} ddph_bucket_info;

/* What the job file chose for this model ([model.NAME] over [accumulate]
 * and [hook]), from ddph_model_create on:
 *  - accumulate_steps: backward passes per synchronisation (N), e.g. to
 *    scale the loss by 1/N up front; -1 for a NULL model;
 *  - hook name: as the job file wrote it (a name, or a path) until
 *    finalize, then the name the loaded hook declares. */
int ddph_model_accumulate_steps(const ddph_model *model);
const char *ddph_model_hook_name(const ddph_model *model);

/* Prints the job as this rank runs it: the resolved configuration as an
 * INI (every default filled in, as `ddphook check` prints it), then for
 * each finalized model its hook, version, wrapper, options, accumulation
 * and buckets.  For a trainer's log; any rank may call it. */
ddph_status ddph_describe(const ddph_ctx *ctx, FILE *out);

int ddph_model_bucket_count(const ddph_model *model);
/* Fills *out for bucket `index`; the params array stays valid until
 * ddph_close. */
ddph_status ddph_model_bucket_info(ddph_model *model, int index,
                                   ddph_bucket_info *out);

/* The bytes bucket `index`'s hook calls moved so far, both ways: what
 * this rank contributed to collectives (*sent, as bytes_on_wire) and what
 * it got from its peers (*received): an allgather of n bytes sends n and
 * receives (W-1) n on W ranks.  Logical payloads, not the algorithm's
 * traffic (docs/plugin-guide.md, "Counting bytes").  Call between steps. */
ddph_status ddph_model_bucket_traffic(ddph_model *model, int index,
                                      uint64_t *sent, uint64_t *received);

/* The hook's own statistics for this model (e.g. PowerSGD's elements
 * before and after compression): up to max entries into out, the number
 * the hook has into *count.  A hook without statistics gives 0.  Call
 * between steps. */
ddph_status ddph_model_hook_stats(ddph_model *model, ddph_stat *out,
                                  size_t max, size_t *count);

/* ---- steps -------------------------------------------------------------- */

/* Flags for ddph_step_begin_flags. */
enum {
    DDPH_STEP_DEFAULT = 0,
    DDPH_STEP_NO_SYNC = 1 << 0,     /* accumulate locally, like no_sync() */
    DDPH_STEP_FORCE_SYNC = 1 << 1,  /* sync now (trigger_sync_in_backward) */
    DDPH_STEP_END_OF_DATA = 1 << 2, /* last batch: sync the partial window */
    DDPH_STEP_LAST = 1 << 3,        /* this rank's last step of the job:
                                       END_OF_DATA, and the peers are told
                                       that no step follows (a peer still
                                       stepping fails at once, naming this
                                       rank: uneven inputs) */
};

/* Starts a backward pass for models[0..n-1] (each finalized).  The models
 * share one decision, synchronise or accumulate, taken from [accumulate]
 * steps and the flags.  On a step that does not synchronise, grad_ready
 * only counts: the trainer's gradients accumulate in its own memory. */
ddph_status ddph_step_begin(ddph_ctx *ctx, ddph_model *const *models, int n);
ddph_status ddph_step_begin_flags(ddph_ctx *ctx, ddph_model *const *models,
                                  int n, unsigned flags);
/* 1 when the current step synchronises, 0 when it only accumulates. */
int ddph_step_syncs(const ddph_ctx *ctx);

/* Marks parameter `index` of `model` as holding its complete gradient for
 * this step.  When its bucket becomes full and every lower-index bucket of
 * the model has been launched, the bucket is handed to the communication
 * thread at once, overlapping the rest of the backward pass. */
ddph_status ddph_grad_ready(ddph_model *model, int index);

/* Waits until every bucket of the step has been reduced and copies the
 * averaged results into the gradients.  A parameter never marked ready, a
 * hook error or a timeout is reported here (with model, bucket, hook and
 * rank). */
ddph_status ddph_step_wait(ddph_ctx *ctx);

/* Told as each bucket of a synchronising step is done, before
 * ddph_step_wait returns: for a trainer that hands each bucket's result on
 * at once (ddphook.torch completes PyTorch DDP's per-bucket futures with
 * it).  Called once per bucket per synchronising step (never on a step
 * that only accumulates), in each lane's launch order:
 *  - status DDPH_OK: the bucket's averaged gradients are in the trainer's
 *    gradient memory of its parameters (ddph_model_bucket_info lists
 *    them), as ddph_step_wait would leave them; message is NULL;
 *  - otherwise the hook failed or the job broke: message says which hook,
 *    bucket and rank (valid during the call only); ddph_step_wait reports
 *    the failure too.
 * Threading: it runs on one of the runtime's communication threads (not
 * the trainer's), holding no lock of the runtime, and that thread runs no
 * other bucket until it returns, so it must be fast (hand the news on; no
 * heavy work), and it must not call any function of this API nor block on
 * anything the trainer thread holds while it is inside this API (the
 * trainer's ddph_step_wait waits for the callback to return; a callback
 * that has not returned after timeout_s is reported as a stuck hook).
 * Calls into an interpreter that take its global lock are safe when the
 * trainer's calls into this API release that lock (Python's ctypes does).
 * ddph_step_wait returns only after the step's every callback has
 * returned.
 * With backend = nccl (GPU buckets), status DDPH_OK means the results are
 * enqueued on ddph_cuda_comm_stream (the hook's work, then the copies into
 * the gradient memory), not finished: order what reads them after that
 * stream (record an event on it in the callback).  ddph_step_wait returns
 * with them finished.
 * Set or cleared (fn = NULL) before ddph_model_finalize or between steps;
 * DDPH_ERR_STATE inside a step.  Since 0.7.0; GPU buckets since 0.9.0. */
typedef void (*ddph_bucket_callback)(void *user, ddph_model *model,
                                     int bucket, ddph_status status,
                                     const char *message);
ddph_status ddph_model_set_bucket_callback(ddph_model *model,
                                           ddph_bucket_callback fn,
                                           void *user);

/* Ends the step after the optimizer: runs the hooks' on_step_end (parameter
 * averaging) for synchronised steps. */
ddph_status ddph_step_end(ddph_ctx *ctx);

/* Uneven inputs, as PyTorch's Join: with [runtime] join = true, a rank
 * whose data has ended calls ddph_join (between steps) instead of another
 * step.  Until every rank has called it, it takes part in each
 * synchronising step of the others with zero gradients (every model of
 * the job, through its hook, then on_step_end; its gradient memory is
 * overwritten).  Averages are over the initial world size, or over the
 * ranks still training with divide_by_initial_world_size = false.  When
 * every rank has joined, the parameters given with
 * ddph_model_set_param_data are broadcast from the last rank to join, and
 * ddph_join returns on every rank; training may then go on (a new epoch)
 * on every rank.  Under join, each synchronising step must cover all of
 * the job's models, and the trainer collectives below must wait until
 * ddph_join has returned everywhere. */
ddph_status ddph_join(ddph_ctx *ctx);

/* ---- everyday cross-rank calls for the trainer ---------------------------
 * So that a trainer need not call MPI itself: every rank calls them, in
 * the same order, between steps (inside a step they are refused with
 * DDPH_ERR_STATE).  They run on a communicator of their own, never matched
 * with a step's collectives, and end within timeout_s like every other
 * collective, with the same messages; on a failed job they fail at once. */

/* Waits until every rank has called it. */
ddph_status ddph_barrier(ddph_ctx *ctx);
/* values[0..n) combined over the ranks, in place: DDPH_SUM, DDPH_MAX or
 * DDPH_MIN (every rank gets the same bits). */
ddph_status ddph_allreduce_f64(ddph_ctx *ctx, double *values, int n,
                               ddph_redop op);
/* values[0..n) averaged over the ranks, in place (the loss, an accuracy). */
ddph_status ddph_average_f64(ddph_ctx *ctx, double *values, int n);
/* `bytes` bytes of host memory from rank `root` to every rank. */
ddph_status ddph_broadcast(ddph_ctx *ctx, void *data, size_t bytes, int root);

/* ---- hook state --------------------------------------------------------- */

/* Saves every model's hook state (e.g. PowerSGD's error feedback and Q
 * memories) to `path`, atomically; loads it back into a job with the same
 * models and hooks.  Collective: a NULL path on one rank fails the call
 * on every rank (DDPH_ERR_INVALID), naming that rank. */
ddph_status ddph_state_save(ddph_ctx *ctx, const char *path);
ddph_status ddph_state_load(ddph_ctx *ctx, const char *path);
/* Whether ddph_state_save(ctx, path) would pass its first check on this
 * rank (the folder of PATH.rank<R> and those above it, by the owner and
 * mode rule a load applies): DDPH_OK, or the refusal, its message in
 * ddph_last_error.  This rank alone, no collective, nothing written, the
 * job unchanged: for a trainer that defers its saves (the Python bridge's
 * state.save) and must refuse a path at once.  Since 0.9.0 (library
 * 9:0:8). */
ddph_status ddph_state_check(ddph_ctx *ctx, const char *path);
/* This rank's hook state as bytes, for a trainer that keeps it in its own
 * checkpoint: *data (*len bytes, freed with ddph_state_free) holds what
 * ddph_state_save writes into PATH.rank<R> (the same format, checksum,
 * world size and rank).  This rank alone, no collective, between steps.
 * ddph_state_load_from_memory loads such bytes, each rank its own:
 * collective, with every check and the all-or-nothing of ddph_state_load
 * (bytes of another rank, world size, model or hook, damaged bytes, and
 * parts of different saves: another job's, or another call or step on
 * some rank, and NULL data with len > 0, are refused on every rank,
 * naming the rank and the cause).  Since 0.9.0. */
ddph_status ddph_state_save_to_memory(ddph_ctx *ctx, void **data,
                                      size_t *len);
void ddph_state_free(void *data);
ddph_status ddph_state_load_from_memory(ddph_ctx *ctx, const void *data,
                                        size_t len);
/* The save id in such bytes, the same in every rank's part of one call of
 * ddph_state_save_to_memory and different between calls: for a trainer
 * that gathers the ranks' parts and must tell whether they belong
 * together before it keeps them.  DDPH_OK and *id, or DDPH_ERR_IO (and
 * *id = 0) where the bytes are not an intact hook state (another format,
 * too short, or a checksum that does not match); DDPH_ERR_INVALID for a
 * NULL argument.  No job needed: no ctx, no collective, nothing kept.
 * Since 0.9.0. */
ddph_status ddph_state_save_id(const void *data, size_t len, uint64_t *id);

#ifdef __cplusplus
}
#endif
#endif /* DDPHOOK_DDPHOOK_H */
