/* context.c: opening and closing a job, the step protocol and the
 * accumulation decision, hook state checkpoints. */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/cli_internal.h"
#include "core/context.h"
#include "core/exit_guard.h"
#include "core/trainer_memory.h"
#include "device/cpu_ops.h"
#include "device/device.h"
#include "plugin/job_check.h"
#include "core/ranks/roll_call.h"
#include "core/ranks/replicas.h"
#include "core/state/state_file.h"
#include "core/state/state_memory.h"
#include "core/ranks/step_check.h"
#include "backends/registry.h"

/* Warnings about the job file come from rank 0 only: every rank reads the
 * same file, one report is enough. */
static void warn_rank0(void *user, const char *msg)
{
    ddph_ctx *ctx = user;
    if (ddph__rank(ctx) == 0)
        ddph__log(&ctx->log, DDPH_LOG_WARN, "%s", msg);
}

/* Every rank makes the same number of lane communicators (a collective
 * each): a job file whose [runtime] lanes differs between ranks is an
 * error on every rank, not a hang.  The same exchange gives every rank
 * rank 0's random job token. */
static ddph_status agree_lanes(ddph_ctx *ctx, ddph_err *err)
{
    uint64_t token = 0;
    if (ddph__rank(ctx) == 0 && getrandom(&token, sizeof token, 0) !=
                                    sizeof token)
        token = (uint64_t)(ddph__now() * 1e9) ^ ((uint64_t)getpid() << 32);
    int64_t v[3] = {ctx->cfg.lanes, -(int64_t)ctx->cfg.lanes,
                    (int64_t)(token >> 2)};
    ddph_status st =
        ddph__ctl_allreduce_i64(ctx->control, v, 3, DDPH_MAX, err);
    ctx->job_token = (uint64_t)v[2];
    if (st == DDPH_OK && v[0] != -v[1])
        st = ddph__fail(err, DDPH_ERR_CONFIG,
                        "%s: [runtime] lanes differs between ranks (%lld on "
                        "some, %lld on others; this rank has %d)",
                        ctx->cfg.path, (long long)-v[1], (long long)v[0],
                        ctx->cfg.lanes);
    return st;
}

/* OpenBLAS threads from the ranks on this host, so that the ranks of a
 * host do not oversubscribe its cores with GEMM threads (cpu_ops.h). */
/* backend = nccl: loads the GPU module (every rank agrees on whether it
 * loaded, so that none waits in NCCL's bootstrap alone), starts it
 * (collective), and the event that orders on_step_end. */
static ddph_status start_gpu(ddph_ctx *ctx, const ddph_backend_entry *device,
                             ddph_err *err)
{
    const ddph_gpu_ops *ops = NULL;
    ddph_err load_err;
    load_err.msg[0] = '\0';
    ddph_status st = ddph__backend_load_device(device, &ops, &load_err);
    st = ddph__ctl_agree(ctx->control, st, load_err.msg, err);
    /* The module bootstraps and splits over the job backend's tables. */
    const ddph_gpu_job job = {
        .control = ctx->control,
        .host = ctx->host,
        .timeout_s = ctx->timeout_s,
        .node_rank = ctx->host_rank,
        .node_size = ctx->host_size,
        .activity_touch = ddph__activity_touch,
    };
    if (st == DDPH_OK)
        st = ops->init(&job, &ctx->gpu, err);
    if (st == DDPH_OK) {
        ctx->gpu_ops = ops;
        ctx->comm = (ddph_comm){ops->comm, ctx->gpu};
        ctx->comm_stream = ops->stream(ctx->gpu);
        ctx->cuda_device = ops->device(ctx->gpu);
        st = ddph__dev_event_create(&ctx->step_end_event, err);
    }
    if (st != DDPH_OK)
        ddph__err_prefix(err, "%s: [runtime] backend = %s", ctx->cfg.path,
                         device->name);
    return st;
}

/* The job backend [runtime] backend names (for a device backend, the
 * launcher's job backend under it), or with "auto" the launcher's.  When
 * it cannot be used the built-in MPI backend opens the job all the same
 * (and the failure is the job file's), so that the ranks hear of it. */
static ddph_status choose_backend(const ddph_config *cfg,
                                  const ddph_backend_ops **job,
                                  const ddph_backend_entry **device,
                                  ddph_err *err)
{
    const ddph_backend_entry *e = ddph__backend_launched();
    ddph_status st = DDPH_OK;
    *device = NULL;
    if (cfg && strcmp(cfg->backend, "auto") != 0) {
        const ddph_backend_entry *named = ddph__backend_find(cfg->backend);
        if (!named) {
            char names[256];
            ddph__backend_names(names, sizeof names);
            st = ddph__fail(err, DDPH_ERR_CONFIG,
                            "[runtime] backend = '%s' is not a backend this "
                            "ddphook knows (auto, %s)",
                            cfg->backend, names);
        } else if (named->kind == DDPH__BACKEND_DEVICE)
            *device = named;
        else
            e = named;
    }
    if (st == DDPH_OK)
        st = ddph__backend_load_job(e, job, err);
    if (st != DDPH_OK) {
        if (cfg)
            ddph__err_prefix(err, "%s:%d", cfg->path, cfg->backend_line);
        ddph_err ignored;
        *device = NULL;
        ddph__backend_load_job(ddph__backend_find("mpi"), job, &ignored);
    }
    return st;
}

static void size_blas(ddph_ctx *ctx)
{
    int ranks = ctx->host_size;
    int n = ddph__cpu_blas_threads(ranks);
    ddph__log(&ctx->log, DDPH_LOG_DEBUG,
              "OpenBLAS: %d thread%s per rank (%d rank%s on this host; "
              "OPENBLAS_NUM_THREADS overrides)",
              n, n == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
}

ddph_status ddph_open(const char *ini_path, int *argc, char ***argv,
                      ddph_ctx **out)
{
    if (!out)
        return DDPH_ERR_INVALID;
    ddph_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return DDPH_ERR_NOMEM;
    ddph__logger_init(&ctx->log);
    ddph__timeline_init(&ctx->timeline, 0);
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_cond_init(&ctx->done, NULL);
    ddph_err e, cfg_err;
    ddph_status cfg_st = ini_path ? ddph__config_load(ini_path, &ctx->cfg, &cfg_err)
                                  : ddph__config_defaults(&ctx->cfg, &cfg_err);
    /* The job comes up even when the job file is bad, so that every rank
     * learns which rank failed and why instead of waiting in MPI_Init. */
    double timeout_s = cfg_st == DDPH_OK && ctx->cfg.timeout_s > 0
                           ? ctx->cfg.timeout_s
                           : DDPH__DEFAULT_TIMEOUT_S;
    const ddph_backend_entry *device = NULL;
    if (cfg_st == DDPH_OK)
        cfg_st = choose_backend(&ctx->cfg, &ctx->job.ops, &device, &cfg_err);
    else
        choose_backend(NULL, &ctx->job.ops, &device, &e);
    const ddph_backend_args args = {
        .argc = argc,
        .argv = argv,
        .timeout_s = timeout_s,
        .check_collectives = cfg_st == DDPH_OK && ctx->cfg.check_collectives,
        .activity_touch = ddph__activity_touch,
    };
    ctx->timeout_s = timeout_s;
    ddph_status st = ctx->job.ops->open(&args, &ctx->job.state, &e);
    ctx->job_up = st == DDPH_OK;
    /* The hooks' collectives are the job backend's unless a device
     * backend starts. */
    ctx->host = ctx->job.ops->comm(ctx->job.state);
    ctx->comm = ctx->host;
    ctx->control = ctx->job.ops->control(ctx->job.state);
    ctx->log.rank = ddph__rank(ctx);
    ctx->join_active = ddph__size(ctx);
    ctx->join_scale = 1.0;
    if (cfg_st == DDPH_OK && ini_path)
        cfg_st = ddph__job_check_hook_sections(&ctx->cfg, warn_rank0, ctx,
                                               &cfg_err);
    if (ctx->job_up)
        st = ddph__ctl_agree(ctx->control, cfg_st, cfg_err.msg, &e);
    else if (cfg_st != DDPH_OK)
        st = cfg_st, e = cfg_err;
    /* The ranks of this host: the GPU, OpenBLAS's threads, shared buckets. */
    if (st == DDPH_OK)
        st = ctx->job.ops->find_host(ctx->job.state, &ctx->host_rank,
                                     &ctx->host_size, &e);
    if (st == DDPH_OK && device)
        st = start_gpu(ctx, device, &e);
    if (st == DDPH_OK)
        size_blas(ctx);
    if (st == DDPH_OK && ddph__rank(ctx) == 0 && ctx->job.ops->close_hazard) {
        char msg[512];
        if (ctx->job.ops->close_hazard(ctx->job.state, msg, sizeof msg))
            ddph__log(&ctx->log, DDPH_LOG_WARN, "%s", msg);
    }
    ctx->timeline.enabled = st == DDPH_OK && ctx->cfg.trace != NULL;
    if (st == DDPH_OK)
        st = agree_lanes(ctx, &e);
    if (st == DDPH_OK)
        st = ddph__reducer_start(ctx, &e);
    if (st != DDPH_OK) {
        ddph__log(&ctx->log, DDPH_LOG_ERROR, "%s", e.msg);
        ddph_close(ctx);
        return st;
    }
    ddph__exit_guard_arm(ctx);
    *out = ctx;
    return DDPH_OK;
}

/* [runtime] log_stats: one line of the model's hook statistics, shown
 * whatever DDPHOOK_LOG says (the key asked for it). */
static void log_hook_stats(const ddph_ctx *ctx, ddph_model *m)
{
    char line[2048];
    ddph__model_stats_line(m, line, sizeof line);
    if (!line[0])
        return; /* not finalized */
    ddph_logger lg = ctx->log;
    if (lg.level > DDPH_LOG_INFO)
        lg.level = DDPH_LOG_INFO;
    ddph__log(&lg, DDPH_LOG_INFO, "model '%s', hook '%s': %s", m->name,
              ddph_model_hook_name(m), line);
}

/* Collective: every rank's timeline, gathered on rank 0, which writes
 * the trace (one time axis: each rank's clock from the earliest origin). */
static ddph_status write_timeline(ddph_ctx *ctx, ddph_err *err)
{
    double first = ctx->timeline.origin;
    ddph_status st = ctx->host.ops->allreduce(
        ctx->host.self, ctx->host.ops->world(ctx->host.self), &first, 1,
        DDPH_F64, DDPH_MIN, err);
    if (st != DDPH_OK)
        return st;
    size_t len = 0;
    char *mine = ddph__timeline_part(&ctx->timeline, ddph__rank(ctx), first,
                                     &len);
    if (!mine)
        return ddph__fail(err, DDPH_ERR_NOMEM, "trace: out of memory");
    char *all = NULL;
    size_t total = 0;
    st = ctx->job.ops->gather_bytes(ctx->job.state, mine, len, &all, &total,
                                    err);
    free(mine);
    if (st == DDPH_OK && ddph__rank(ctx) == 0)
        st = ddph__timeline_write_parts(ctx->cfg.trace, all, total, err);
    free(all);
    return st;
}

ddph_status ddph_close(ddph_ctx *ctx)
{
    if (!ctx)
        return DDPH_OK;
    ddph__exit_guard_disarm(ctx);
    const ddph_backend_ops *job = ctx->job.ops;
    int rank = ddph__rank(ctx);
    /* The peers wait for this step's collectives: tell them now rather
     * than let them wait for timeout_s. */
    if (ctx->job_up && ctx->in_step && ctx->syncs && !ctx->waited) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "rank %d closed the job (ddph_close) in the middle of a "
                 "synchronising step",
                 rank);
        ddph__ctl_fail(ctx->control, DDPH_ERR_STATE, msg);
    }
    /* The peers learn that this rank does no more steps: one waiting on a
     * later step's collective fails at once instead of after timeout_s. */
    if (ctx->job_up)
        ddph__ctl_closing(ctx->control);
    /* Returns promptly even on a broken job: every collective then fails
     * at once. */
    ddph__reducer_stop(ctx);
    int broken = ctx->job_up && ddph__ctl_broken(ctx->control);
    if (ctx->timeline.enabled && ctx->job_up && !broken) {
        ddph_err e;
        if (write_timeline(ctx, &e) != DDPH_OK)
            ddph__log(&ctx->log, DDPH_LOG_ERROR, "%s", e.msg);
        else if (rank == 0)
            ddph__log(&ctx->log, DDPH_LOG_INFO, "timeline written to %s",
                      ctx->cfg.trace);
    }
    if (ctx->timeline.enabled && ctx->job_up && broken) {
        /* When it is needed most: each rank's own events, alone. */
        ddph_err fault, e;
        ddph__ctl_fault(ctx->control, &fault);
        if (ddph__timeline_write_failed(&ctx->timeline, rank,
                                        ctx->cfg.trace, fault.msg, &e) !=
            DDPH_OK)
            ddph__log(&ctx->log, DDPH_LOG_ERROR, "%s", e.msg);
        else
            ddph__log(&ctx->log, DDPH_LOG_ERROR,
                      "the job failed: this rank's timeline written to "
                      "%s.rank%d",
                      ctx->cfg.trace, rank);
    }
    /* A lane stuck in a hook (abandoned) may still use what it was
     * given: the timeline and the configuration stay. */
    if (!ctx->lanes_abandoned)
        ddph__timeline_free(&ctx->timeline);
    /* Every rank meets here within timeout_s, or the job has failed (a
     * peer died after its last step): decided before anything is freed. */
    /* ...and learns whether any rank's calls reported an error: the job's
     * outcome is what ddph_close returns on every rank. */
    ddph_status outcome = ctx->outcome;
    if (ctx->job_up && !broken) {
        ddph_err e;
        int worst_rank;
        broken = job->leave(ctx->job.state, ctx->outcome, &outcome,
                            &worst_rank, &e) != DDPH_OK;
        if (!broken && outcome != DDPH_OK)
            ddph__log(&ctx->log, DDPH_LOG_ERROR,
                      "ddph_close: the job failed: rank %d reported %s "
                      "(its message is in that rank's log%s)",
                      worst_rank, ddph_status_name(outcome),
                      worst_rank == rank ? ", above" : "");
    }
    if (broken) {
        /* Collectives abandoned on the failure cannot be cancelled, and a
         * late peer may still write into their buffers: the buckets, the
         * hooks' state and this context.  They are left allocated (the
         * process is about to exit); only the configuration goes. */
        ddph_err e;
        if (ctx->gpu)
            ctx->gpu_ops->finalize(ctx->gpu, 1);
        ddph_status st = job->close(ctx->job.state, &e);
        ddph__log(&ctx->log, DDPH_LOG_ERROR,
                  "ddph_close: the job failed, so the %s backend is left "
                  "unfinalized (exit non-zero): %s",
                  job->name, e.msg);
        if (!ctx->lanes_abandoned)
            ddph__config_free(&ctx->cfg);
        return st;
    }
    for (int i = 0; i < ctx->nmodels; i++) {
        ddph_model *m = ctx->models[i];
        if (ctx->cfg.log_stats)
            log_hook_stats(ctx, m);
        if (m->window > 0)
            ddph__log(&ctx->log, DDPH_LOG_WARN,
                      "closing with %d accumulated backward pass%s of model "
                      "'%s' never synchronised (end the epoch with "
                      "DDPH_STEP_END_OF_DATA)",
                      m->window, m->window == 1 ? "" : "es", m->name);
        ddph__model_free(m);
    }
    free(ctx->models);
    free(ctx->step_models);
    ddph__dev_event_destroy(ctx->step_end_event);
    if (ctx->gpu)
        ctx->gpu_ops->finalize(ctx->gpu, 0);
    ddph_status st = DDPH_OK;
    if (ctx->job_up) {
        ddph_err e;
        st = job->close(ctx->job.state, &e);
        if (st != DDPH_OK)
            ddph__log(&ctx->log, DDPH_LOG_ERROR,
                      "ddph_close: the job failed, so the %s backend is "
                      "left unfinalized (exit non-zero): %s",
                      job->name, e.msg);
    }
    ddph__config_free(&ctx->cfg);
    pthread_cond_destroy(&ctx->done);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
    return st != DDPH_OK ? st : outcome;
}

const char *ddph_last_error(const ddph_ctx *ctx)
{
    return ctx ? ctx->error : "no context";
}

int ddph_rank(const ddph_ctx *ctx)
{
    return ddph__rank(ctx);
}

int ddph_world_size(const ddph_ctx *ctx)
{
    return ddph__size(ctx);
}

int ddph_cuda_device(const ddph_ctx *ctx)
{
    return ctx && ctx->gpu ? ctx->cuda_device : -1;
}

void *ddph_cuda_comm_stream(const ddph_ctx *ctx)
{
    return ctx && ctx->gpu ? ctx->comm_stream : NULL;
}

ddph_status ddph_set_stream(ddph_ctx *ctx, void *cuda_stream)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    if (!ctx->gpu)
        return ddph__ctx_failf(ctx, DDPH_ERR_UNSUPPORTED,
                               "ddph_set_stream: only backend = nccl has "
                               "streams");
    ctx->compute_stream = cuda_stream;
    return DDPH_OK;
}

/* ---- steps ---------------------------------------------------------------- */

ddph_status ddph_step_begin(ddph_ctx *ctx, ddph_model *const *models, int n)
{
    return ddph_step_begin_flags(ctx, models, n, DDPH_STEP_DEFAULT);
}

/* One decision for every model of the step: synchronise when the flags
 * force it, when sync_each_batch is on, or when any model's window
 * reaches its accumulate_steps (models usually share one N). */
static int decide_sync(const ddph_ctx *ctx, ddph_model *const *models, int n,
                       unsigned flags)
{
    if (flags & DDPH_STEP_NO_SYNC)
        return 0;
    if (flags & (DDPH_STEP_FORCE_SYNC | DDPH_STEP_END_OF_DATA |
                 DDPH_STEP_LAST) ||
        ctx->cfg.sync_each_batch)
        return 1;
    for (int i = 0; i < n; i++)
        if (models[i]->window + 1 >= models[i]->accumulate_steps)
            return 1;
    return 0;
}

/* Models given together share one decision, so the smallest
 * accumulate_steps among them decides for all: said once per job, at the
 * first step that mixes them. */
static void warn_shared_schedule(ddph_ctx *ctx, ddph_model *const *models,
                                 int n)
{
    if (ctx->warned_mixed_windows)
        return;
    for (int i = 1; i < n; i++) {
        const ddph_model *a = models[0], *b = models[i];
        if (a->accumulate_steps == b->accumulate_steps)
            continue;
        const ddph_model *lo = a->accumulate_steps < b->accumulate_steps ? a : b;
        ctx->warned_mixed_windows = 1;
        if (ddph__rank(ctx) != 0)
            return;
        ddph__log(&ctx->log, DDPH_LOG_WARN,
                  "step_begin: models '%s' (accumulate_steps %d) and '%s' "
                  "(accumulate_steps %d) are given together, so they share "
                  "one decision: both synchronise every %d backward "
                  "pass%s while stepped together (the smallest "
                  "accumulate_steps decides; step them in separate "
                  "ddph_step_begin calls to keep each one's own)",
                  a->name, a->accumulate_steps, b->name, b->accumulate_steps,
                  lo->accumulate_steps, lo->accumulate_steps == 1 ? "" : "es");
        return;
    }
}

ddph_status ddph_step_begin_flags(ddph_ctx *ctx, ddph_model *const *models,
                                  int n, unsigned flags)
{
    if (!ctx || !models || n <= 0)
        return DDPH_ERR_INVALID;
    if (ctx->in_step)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "step_begin while a step is open (call "
                               "ddph_step_wait and ddph_step_end first)");
    ddph_err fault;
    ddph_status broken = ddph__ctl_fault(ctx->control, &fault);
    if (broken != DDPH_OK) {
        ddph__err_prefix(&fault, "step_begin: the job has failed (close it "
                                 "and exit)");
        return ddph__ctx_fail(ctx, broken, &fault);
    }
    if ((flags & DDPH_STEP_NO_SYNC) &&
        (flags & (DDPH_STEP_FORCE_SYNC | DDPH_STEP_END_OF_DATA |
                  DDPH_STEP_LAST)))
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                               "step_begin: DDPH_STEP_NO_SYNC contradicts "
                               "FORCE_SYNC / END_OF_DATA / LAST");
    if (ctx->data_ended)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "step_begin after this rank's step flagged "
                               "DDPH_STEP_LAST (its peers were told that no "
                               "step follows)");
    for (int i = 0; i < n; i++) {
        if (!models[i] || models[i]->ctx != ctx)
            return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                                   "step_begin: model %d is not of this job",
                                   i);
        if (!models[i]->finalized)
            return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                                   "step_begin: model '%s' is not finalized",
                                   models[i]->name);
        for (int j = 0; j < i; j++)
            if (models[j] == models[i])
                return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                                       "step_begin: model '%s' given twice",
                                       models[i]->name);
    }
    /* Refused here, the peers would wait in this step's collectives:
     * the job fails on every rank. */
    ddph_err apart;
    if (n > 1 && ddph__models_grads_apart(models, n, &apart) != DDPH_OK) {
        ddph__err_prefix(&apart, "step_begin (rank %d)", ddph__rank(ctx));
        ddph__ctl_fail(ctx->control, DDPH_ERR_INVALID, apart.msg);
        return ddph__ctx_fail(ctx, DDPH_ERR_INVALID, &apart);
    }
    /* The first step: every [model.X] section names a model by now. */
    if (ctx->step_count == 0) {
        const char **created = calloc((size_t)ctx->nmodels + 1,
                                      sizeof *created);
        if (!created)
            return DDPH_ERR_NOMEM;
        for (int i = 0; i < ctx->nmodels; i++)
            created[i] = ctx->models[i]->name;
        ddph_err e;
        ddph_status cst = ddph__job_check_models(&ctx->cfg, created,
                                                 (size_t)ctx->nmodels, &e);
        free(created);
        if (cst != DDPH_OK) {
            ddph__err_prefix(&e, "step_begin");
            return ddph__ctx_fail(ctx, cst, &e);
        }
    }
    warn_shared_schedule(ctx, models, n);
    ddph_model **list = realloc(ctx->step_models, (size_t)n * sizeof *list);
    if (!list)
        return DDPH_ERR_NOMEM;
    /* In finalize order (ids), the same on every rank: buckets launch in
     * this order (reducer.c), however the trainer lists the models. */
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && list[j - 1]->id > models[i]->id; j--)
            list[j] = list[j - 1];
        list[j] = models[i];
    }
    ctx->step_models = list;
    ctx->nstep_models = n;
    ctx->syncs = decide_sync(ctx, models, n, flags);
    /* Under join, each synchronising step counts the ranks still
     * training (a joined rank has just done so in ddph_join). */
    if (ctx->cfg.join && ctx->syncs && !ctx->joined) {
        ddph_err je;
        ddph_status js = ddph__join_roll_call(ctx, 1, models, n, &je);
        if (js != DDPH_OK)
            return ddph__ctx_fail(ctx, js, &je);
    }
    ctx->last_step = (flags & DDPH_STEP_LAST) != 0;
    ctx->ends_data = (flags & (DDPH_STEP_END_OF_DATA | DDPH_STEP_LAST)) != 0;
    ddph__ctl_in_sync_step(ctx->control, ctx->syncs);
    ctx->in_step = 1;
    ctx->step_start = ddph__timeline_now(&ctx->timeline);
    ctx->step_count++;
    ctx->waited = 0;
    ddph_status st = DDPH_OK;
    ddph_err e;
    for (int i = 0; i < n; i++) {
        models[i]->in_step = 1;
        ddph_err later; /* the first failure keeps its message */
        ddph_status bs = ddph__reducer_begin(models[i], st ? &later : &e);
        st = st ? st : bs;
    }
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

int ddph_step_syncs(const ddph_ctx *ctx)
{
    return ctx && ctx->in_step && ctx->syncs;
}

ddph_status ddph__param_index(ddph_model *m, const char *call, int index)
{
    if (index >= 0 && index < m->nparams)
        return DDPH_OK;
    return ddph__ctx_failf(m->ctx, DDPH_ERR_INVALID,
                           "%s: model '%s' has no parameter %d (it has %d)",
                           call, m->name, index, m->nparams);
}

/* by_trainer: the trainer wrote the gradient (ddph_grad_ready), not the
 * runtime itself (a joined rank's zeros, ddph__grad_ready_zeroed). */
static ddph_status grad_ready(ddph_model *m, int index, int by_trainer)
{
    if (!m)
        return DDPH_ERR_INVALID;
    ddph_ctx *ctx = m->ctx;
    if (!m->in_step || ctx->waited)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "grad_ready on model '%s' outside its step "
                               "(not in the models given to ddph_step_begin, "
                               "or after ddph_step_wait)",
                               m->name);
    ddph_status known = ddph__param_index(m, "grad_ready", index);
    if (known != DDPH_OK)
        return known;
    /* Otherwise the bucket would carry the memory's first contents every
     * step while the trainer steps on its own, unsynchronised gradient. */
    if (by_trainer && m->params[index].grad_moved_unseen)
        return ddph__ctx_failf(
            ctx, DDPH_ERR_STATE,
            "model '%s' parameter '%s': with [runtime] "
            "gradient_as_bucket_view = true (%s) its gradient lives in the "
            "bucket from ddph_model_finalize on, but the trainer gave "
            "memory of its own to ddph_model_add_param and never asked "
            "ddph_model_grad_ptr for the new address: it would train on "
            "its own, unsynchronised gradient. Write the gradients where "
            "ddph_model_grad_ptr says, or set gradient_as_bucket_view = "
            "false",
            m->name, m->params[index].name, ctx->cfg.path);
    ddph_err e;
    ddph_status st = ddph__reducer_ready(m, index, &e);
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

ddph_status ddph_grad_ready(ddph_model *m, int index)
{
    return grad_ready(m, index, 1);
}

ddph_status ddph__grad_ready_zeroed(ddph_model *m, int index)
{
    return grad_ready(m, index, 0);
}

ddph_status ddph_step_wait(ddph_ctx *ctx)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    if (!ctx->in_step)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "step_wait without a step_begin");
    if (ctx->waited)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "step_wait called twice in one step (the "
                               "step's results are in since the first; "
                               "ddph_step_end ends the step)");
    ctx->waited = 1;
    if (!ctx->syncs) {
        for (int i = 0; i < ctx->nstep_models; i++)
            ctx->step_models[i]->window++;
        return DDPH_OK;
    }
    ddph_err e;
    double wait_start = ddph__timeline_now(&ctx->timeline);
    ddph_status st = ddph__reducer_wait(ctx, &e);
    if (st == DDPH_OK)
        st = ddph__step_check(ctx, 0, &e);
    ddph__timeline_record(&ctx->timeline, DDPH_TRACK_COMPUTE, wait_start,
                          "step_wait");
    ddph__timeline_record(&ctx->timeline, DDPH_TRACK_COMPUTE, ctx->step_start,
                          "step %llu (synchronised)",
                          (unsigned long long)ctx->step_count - 1);
    /* An abandoned lane (a stuck hook) may still hold the models: the job
     * is over, and they are left as they are. */
    for (int i = 0; i < ctx->nstep_models && !ctx->lanes_abandoned; i++) {
        ctx->step_models[i]->window = 0;
        ctx->step_models[i]->iteration++;
    }
    ddph__ctl_step_synced(ctx->control);
    if (ctx->last_step && st == DDPH_OK) {
        ctx->data_ended = 1;
        ddph__ctl_depart(ctx->control, DDPH__DEPART_DATA_END,
                             "its last step");
    }
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

ddph_status ddph_step_end(ddph_ctx *ctx)
{
    if (!ctx)
        return DDPH_ERR_INVALID;
    if (!ctx->in_step || !ctx->waited)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "step_end without step_begin and step_wait");
    ddph_status st = DDPH_OK;
    ddph_err e;
    for (int i = 0; i < ctx->nstep_models; i++) {
        ddph_model *m = ctx->step_models[i];
        m->in_step = 0;
        m->steps++;
        if (st != DDPH_OK || !m->hook->plugin->api.on_step_end)
            continue;
        /* On the GPU the hook's copies (on the communication stream) must
         * see what the optimizer wrote on the trainer's stream. */
        if (ctx->step_end_event &&
            (st = ddph__dev_stream_after(ctx->comm_stream, ctx->compute_stream,
                                         ctx->step_end_event, &e)) != DDPH_OK)
            continue;
        ddph_param_view *views = calloc((size_t)(m->nparams ? m->nparams : 1),
                                        sizeof *views);
        if (!views) {
            st = ddph__fail(&e, DDPH_ERR_NOMEM, "out of memory");
            continue;
        }
        for (int j = 0; j < m->nparams; j++)
            views[j] = (ddph_param_view){m->params[j].name, m->params[j].data,
                                         m->params[j].numel,
                                         m->params[j].dtype,
                                         m->params[j].device};
        ddph_step_info info = {
            .struct_size = sizeof info,
            .step = m->steps,
            .iteration = m->iteration,
            .synced = ctx->syncs,
            .nparams = (size_t)m->nparams,
            .params = views,
            .model = m->name,
        };
        st = ddph__hook_on_step_end(m->hook, &info, &e);
        free(views);
        /* ...and the trainer's next kernels must see what the hook wrote
         * (device operations return before they are done). */
        if (st == DDPH_OK && ctx->step_end_event)
            st = ddph__dev_stream_after(ctx->compute_stream, ctx->comm_stream,
                                        ctx->step_end_event, &e);
    }
    /* The hooks' collectives after the optimizer were the same on every
     * rank (every rank takes part, as below). */
    if (ctx->syncs) {
        ddph_err later;
        ddph_status cs = ddph__step_check(ctx, 1, st ? &later : &e);
        st = st ? st : cs;
    }
    /* After the optimizer, every N-th synchronised step: the replicas are
     * compared (replicas.h).  Every rank takes part, even one whose hook
     * failed above, so that no peer waits for it. */
    /* (Not while a rank has joined: its parameters stay where its data
     * ended until ddph_join makes the replicas equal again.) */
    int every = ctx->cfg.check_replicas_every;
    if (ctx->join_active < ddph__size(ctx))
        every = 0;
    for (int i = 0; every > 0 && ctx->syncs && i < ctx->nstep_models; i++) {
        ddph_model *m = ctx->step_models[i];
        if (m->iteration % (uint64_t)every != 0)
            continue;
        ddph_err later;
        ddph_status cs = ddph__replicas_check(m, st ? &later : &e);
        st = st ? st : cs;
    }
    ctx->in_step = 0;
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

/* ---- hook state ---------------------------------------------------------- */

ddph_status ddph_state_save(ddph_ctx *ctx, const char *path)
{
    if (!ctx) /* a NULL path is refused on every rank (state_file.c) */
        return DDPH_ERR_INVALID;
    ddph_err e;
    ddph_status st = ddph__state_save(ctx, path, &e);
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

ddph_status ddph_state_check(ddph_ctx *ctx, const char *path)
{
    if (!ctx || !path)
        return DDPH_ERR_INVALID;
    ddph_err e;
    ddph_status st = ddph__state_check(ctx, path, &e);
    /* Told, not failed: nothing was tried, and the job goes on. */
    if (st != DDPH_OK)
        memcpy(ctx->error, e.msg, sizeof ctx->error);
    return st;
}

ddph_status ddph_state_save_to_memory(ddph_ctx *ctx, void **data,
                                      size_t *len)
{
    if (!ctx || !data || !len)
        return DDPH_ERR_INVALID;
    ddph_err e;
    ddph_status st = ddph__state_save_memory(ctx, data, len, &e);
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

void ddph_state_free(void *data)
{
    free(data);
}

ddph_status ddph_state_load_from_memory(ddph_ctx *ctx, const void *data,
                                        size_t len)
{
    /* NULL bytes with a length are refused inside the collective, so that
     * the peers hear of it at once rather than at timeout_s. */
    if (!ctx)
        return DDPH_ERR_INVALID;
    ddph_err e;
    ddph_status st = ddph__state_load_memory(ctx, data, len, &e);
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}

ddph_status ddph_state_load(ddph_ctx *ctx, const char *path)
{
    if (!ctx) /* a NULL path is refused on every rank (state_file.c) */
        return DDPH_ERR_INVALID;
    ddph_err e;
    ddph_status st = ddph__state_load(ctx, path, &e);
    return st == DDPH_OK ? st : ddph__ctx_fail(ctx, st, &e);
}
