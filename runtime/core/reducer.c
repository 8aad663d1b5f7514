/* reducer.c: readiness tracking, strictly in-order launch, the
 * communication lanes that run the hooks, and the copy back.
 *
 * The trainer thread copies a gradient into its bucket as soon as it is
 * ready and, when that completes a bucket, launches every complete bucket
 * whose lower-index buckets are launched, so all ranks call collectives in
 * the same order on each lane.  The lanes run the hooks meanwhile:
 * reduction overlaps the rest of the backward pass, and with a hook that
 * allows it, buckets on different lanes overlap each other (one bucket's
 * divide or casts run while another's collective is on the wire). */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/context.h"
#include "device/cpu_ops.h"
#include "device/device.h"

/* The averaged gradients of a host bucket back into the trainer's memory
 * (both sides are host memory): a memcpy, or a cast from a bucket kept in
 * the hook's half type. */
static void copy_back(ddph_model *m, const ddph_rt_bucket *bk)
{
    size_t es = ddph__dtype_size(bk->store_dtype);
    for (int j = 0; j < bk->nparams; j++) {
        const ddph_param *p = &m->params[bk->params[j]];
        const char *at = (const char *)bk->storage + p->offset * es;
        ddph_err unused; /* float dtypes on both sides: cannot fail */
        if (bk->store_dtype != bk->dtype)
            ddph__cpu_cast(at, bk->store_dtype, p->grad, bk->dtype, p->numel,
                           1.0, &unused);
        else
            memcpy(p->grad, at, p->numel * es);
    }
}

/* The averaged gradients of a GPU bucket back into the trainer's memory,
 * enqueued on the communication stream (after the hook's work): a batch
 * of copies a launch, not one each.  GPU buckets keep the gradients'
 * dtype. */
static ddph_status gpu_copy_back(ddph_ctx *ctx, ddph_model *m,
                                 const ddph_rt_bucket *bk, ddph_err *err)
{
    size_t es = ddph__dtype_size(bk->dtype);
    enum { BATCH = 64 };
    void *dst[BATCH];
    const void *src[BATCH];
    size_t bytes[BATCH], n = 0;
    ddph_status st = DDPH_OK;
    for (int j = 0; j < bk->nparams; j++) {
        ddph_param *p = &m->params[bk->params[j]];
        dst[n] = p->grad;
        src[n] = (char *)bk->storage + p->offset * es;
        bytes[n++] = p->numel * es;
        if (n < BATCH && j + 1 < bk->nparams)
            continue;
        ddph_err later; /* the first failure keeps its message */
        ddph_status cs = ddph__dev_copy_batch(p->device, dst, src, bytes, n,
                                              ctx->comm_stream,
                                              st ? &later : err);
        if (st == DDPH_OK)
            st = cs;
        n = 0;
    }
    return st;
}

static void run_bucket(ddph_lane *lane, ddph_model *m, int index)
{
    ddph_ctx *ctx = lane->ctx;
    ddph_hook *hook = m->lane_hooks[lane->index];
    ddph_rt_bucket *b = &m->buckets[index];
    ddph_bucket view = {
        .struct_size = sizeof(ddph_bucket),
        .index = index,
        .count = m->nbuckets,
        .is_last = index == m->nbuckets - 1,
        .iteration = m->iteration,
        .dtype = b->store_dtype,
        .device = b->device,
        .buffer = b->storage,
        .numel = b->numel,
        .ntensors = (size_t)b->nparams,
        .tensors = b->views,
        .model = m->name,
        .divided_by = b->divided_by,
    };
    ddph_err e;
    uint64_t sent = 0, received = 0;
    double t0 = ddph__timeline_now(&ctx->timeline);
    /* On the GPU the hook's stream first waits for the copies into the
     * bucket, enqueued on the trainer's stream. */
    /* A broken job runs no more hooks: every bucket fails at once. */
    ddph_status st = ddph__ctl_fault(ctx->control, &e);
    if (st == DDPH_OK && b->ready_event)
        st = ddph__dev_event_wait(ctx->comm_stream, b->ready_event, &e);
    if (st == DDPH_OK)
        st = ddph__hook_on_bucket(hook, &view, b->scratch, &sent, &received,
                                  &e);
    /* Under join with divide_by_initial_world_size = false: the hook
     * averaged over the initial world size, the ranks still training are
     * fewer (join.h). */
    if (st == DDPH_OK && ctx->join_scale != 1.0)
        st = hook->services.divide(&hook->services, b->storage,
                                   b->store_dtype, b->numel,
                                   1.0 / ctx->join_scale);
    ddph__timeline_record(&ctx->timeline, hook->track, t0,
                          "hook %s: %s bucket %d", hook->plugin->api.name,
                          m->name, index);
    char *message = NULL;
    if (st != DDPH_OK) {
        size_t n = strlen(e.msg) + 256;
        message = malloc(n);
        if (message)
            snprintf(message, n,
                     "hook '%s' failed on model '%s' bucket %d (rank %d): "
                     "%s: %s",
                     hook->plugin->api.name, m->name, index,
                     ddph__rank(ctx), ddph_status_name(st), e.msg);
        /* This rank's collectives are out of step with its peers' now:
         * the job is over, and the peers hear it at once. */
        ddph__ctl_fail(ctx->control, st, message ? message : e.msg);
    }
    ddph_bucket_callback callback = m->bucket_callback;
    /* The trainer's gradients hold the results before it is told; on a
     * job broken meanwhile it is told why instead (step_wait fails). */
    ddph_status told = st;
    const char *why = message ? message : e.msg;
    ddph_err fault;
    if (callback && st == DDPH_OK) {
        told = ddph__ctl_fault(ctx->control, &fault);
        why = fault.msg;
        if (told == DDPH_OK && !ctx->cfg.gradient_as_bucket_view &&
            !ctx->comm_stream) {
            copy_back(m, b);
            b->copied_back = 1;
        }
        /* A GPU bucket's results are enqueued, not done: the callback is
         * told once its copies back are enqueued on the communication
         * stream too (ddph_cuda_comm_stream), so that what the trainer
         * orders after that stream (an event recorded on it, a stream
         * wait) sees them, while its own stream goes on with the
         * backward pass.  A failed copy fails the bucket. */
        if (told == DDPH_OK && !ctx->cfg.gradient_as_bucket_view &&
            ctx->comm_stream) {
            told = gpu_copy_back(ctx, m, b, &fault);
            if (told == DDPH_OK) {
                b->copied_back = 1;
            } else {
                st = told;
                why = fault.msg;
                message = strdup(fault.msg); /* step_wait reports it */
                ddph__ctl_fail(ctx->control, st, fault.msg);
            }
        }
    }
    pthread_mutex_lock(&ctx->mu);
    b->status = st;
    free(b->message);
    b->message = message;
    b->bytes_on_wire += sent;
    b->bytes_received += received;
    if (callback) {
        /* Unlocked: the callback may wait for an interpreter's lock
         * whose holder may be waiting for ctx->mu.  The bucket is not
         * DONE until it returns, so step_wait waits for it. */
        lane->in_callback = 1;
        atomic_store(&lane->active_us, (long long)(ddph__now() * 1e6));
        pthread_mutex_unlock(&ctx->mu);
        callback(m->bucket_callback_user, m, index, told,
                 told == DDPH_OK ? NULL : why);
        pthread_mutex_lock(&ctx->mu);
        lane->in_callback = 0;
    }
    b->state = DDPH_BUCKET_DONE;
    pthread_cond_broadcast(&ctx->done);
    pthread_mutex_unlock(&ctx->mu);
}

static void *lane_thread(void *arg)
{
    ddph_lane *lane = arg;
    ddph_ctx *ctx = lane->ctx;
    ddph_err e;
    ddph__activity_bind(&lane->active_us);
    /* Where every core is wanted (backward on each), a collective's
     * messages wait for this thread's next turn on a core; a short slice
     * brings that turn sooner.  The GPT example on 2 simulated hosts at
     * 1 Gbit/s, median step in `[runtime] trace`: 80.8 against 86.2 ms
     * with allreduce, 68.1 against 71.7 with fp16 (notes/
     * performance-history.md, "The communication thread's time slice"). */
    int slice = ddph__thread_short_slice();
    if (slice)
        ddph__log(&ctx->log, DDPH_LOG_DEBUG,
                  "communication thread %d: short time slice not set: %s",
                  lane->index, strerror(slice));
    /* The hooks' kernels and collectives run on this rank's GPU. */
    if (ctx->comm_stream && ddph__dev_bind(ctx->cuda_device, &e) != DDPH_OK)
        ddph__log(&ctx->log, DDPH_LOG_ERROR,
                  "communication thread: %s: hooks will fail on GPU %d",
                  e.msg, ctx->cuda_device);
    pthread_mutex_lock(&ctx->mu);
    for (;;) {
        while (lane->qhead == lane->qtail && !ctx->stop)
            pthread_cond_wait(&lane->work, &ctx->mu);
        if (lane->qhead == lane->qtail)
            break; /* stop requested and nothing left */
        ddph_job job = lane->queue[lane->qhead++ % lane->qcap];
        job.model->buckets[job.bucket].hook_calls++;
        lane->running = job;
        lane->in_hook = 1;
        lane->hook_since = ddph__now();
        atomic_store(&lane->active_us, (long long)(lane->hook_since * 1e6));
        pthread_mutex_unlock(&ctx->mu);
        run_bucket(lane, job.model, job.bucket);
        pthread_mutex_lock(&ctx->mu);
        lane->in_hook = 0;
    }
    pthread_mutex_unlock(&ctx->mu);
    return NULL;
}

ddph_status ddph__reducer_start(ddph_ctx *ctx, ddph_err *err)
{
    struct ddph_group *groups[DDPH__MAX_LANES];
    /* The GPU backend keeps one lane: one stream orders its work. */
    int n = ctx->comm_stream ? 1 : ctx->cfg.lanes;
    ddph_status st = ddph__ctl_lane_groups(ctx->control, n, groups, err);
    if (st != DDPH_OK)
        return st;
    for (int i = 0; i < n; i++) {
        ddph_lane *lane = &ctx->lanes[i];
        lane->index = i;
        lane->ctx = ctx;
        lane->group = groups[i];
        lane->qcap = 64;
        lane->queue = malloc(lane->qcap * sizeof *lane->queue);
        if (!lane->queue)
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        pthread_cond_init(&lane->work, NULL);
        ctx->nlanes = i + 1;
        if (pthread_create(&lane->thread, NULL, lane_thread, lane) != 0)
            return ddph__fail(err, DDPH_ERR_BACKEND,
                              "cannot start communication thread %d", i);
        lane->started = 1;
    }
    return DDPH_OK;
}

void ddph__reducer_stop(ddph_ctx *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->stop = 1;
    for (int i = 0; i < ctx->nlanes; i++)
        pthread_cond_broadcast(&ctx->lanes[i].work);
    pthread_mutex_unlock(&ctx->mu);
    for (int i = 0; i < ctx->nlanes; i++) {
        ddph_lane *lane = &ctx->lanes[i];
        if (lane->abandoned) {
            /* Still inside a hook that never returned: ddph_close must
             * not block on it, and it may yet touch its queue. */
            pthread_detach(lane->thread);
            continue;
        }
        if (lane->started)
            pthread_join(lane->thread, NULL);
        lane->started = 0;
        pthread_cond_destroy(&lane->work);
        free(lane->queue);
        lane->queue = NULL;
    }
    ctx->nlanes = 0;
}

ddph_status ddph__reducer_begin(ddph_model *m, ddph_err *err)
{
    m->nonfinite[0] = '\0';
    for (int i = 0; i < m->nparams; i++)
        m->params[i].ready = 0;
    for (int b = 0; b < m->nbuckets; b++) {
        ddph_rt_bucket *bk = &m->buckets[b];
        bk->pending = bk->nparams;
        bk->state = DDPH_BUCKET_IDLE;
        bk->status = DDPH_OK;
        bk->copied_back = 0;
        free(bk->message);
        bk->message = NULL;
    }
    m->next_launch = 0;
    ddph_ctx *ctx = m->ctx;
    if (m->gpu_nonfinite && ctx->syncs)
        return ddph__dev_nonfinite_reset(m->gpu_nonfinite, (size_t)m->nparams,
                                         ctx->compute_stream, err);
    return DDPH_OK;
}

/* Called with ctx->mu held.  Bucket b goes to lane b % m->nlanes. */
static int enqueue(ddph_ctx *ctx, ddph_model *m, int bucket)
{
    ddph_lane *lane = &ctx->lanes[bucket % m->nlanes];
    size_t used = lane->qtail - lane->qhead;
    if (used == lane->qcap) {
        /* Unroll the ring into a larger array. */
        ddph_job *q = malloc(2 * lane->qcap * sizeof *q);
        if (!q)
            return 0;
        for (size_t i = 0; i < used; i++)
            q[i] = lane->queue[(lane->qhead + i) % lane->qcap];
        free(lane->queue);
        lane->queue = q;
        lane->qcap *= 2;
        lane->qhead = 0;
        lane->qtail = used;
    }
    lane->queue[lane->qtail++ % lane->qcap] = (ddph_job){m, bucket};
    m->buckets[bucket].state = DDPH_BUCKET_QUEUED;
    pthread_cond_signal(&lane->work);
    return 1;
}

/* With ctx->mu held: every complete bucket whose turn has come.  The
 * step's models take turns in the order ddph_step_begin was given them
 * (checked across ranks by the fingerprints), each model's buckets in
 * index order, so every rank launches the same sequence whatever order
 * its backward pass reaches the models in: two models of the same shapes
 * can never meet in one collective.  Returns 0 when out of memory. */
static int launch_ready(ddph_ctx *ctx)
{
    for (int k = 0; k < ctx->nstep_models; k++) {
        ddph_model *m = ctx->step_models[k];
        while (m->next_launch < m->nbuckets &&
               m->buckets[m->next_launch].pending == 0) {
            if (!enqueue(ctx, m, m->next_launch))
                return 0;
            ddph__timeline_record(&ctx->timeline, DDPH_TRACK_COMPUTE, -1,
                                  "%s bucket %d ready", m->name,
                                  m->next_launch);
            m->next_launch++;
        }
        if (m->next_launch < m->nbuckets)
            return 1; /* the later models wait for this one */
    }
    return 1;
}

/* A gradient into its bucket: copied, or cast into a bucket kept in the
 * hook's half type, and divided by the world size for a hook that divides
 * first.  Host buckets go in blocks, each divided while still in cache. */
static ddph_status copy_in(ddph_ctx *ctx, const ddph_rt_bucket *b,
                           const ddph_param *p, ddph_err *err)
{
    size_t es = ddph__dtype_size(b->store_dtype);
    char *at = (char *)b->storage + p->offset * es;
    if (b->store_dtype == p->dtype && b->divided_by == 0)
        return ddph__dev_copy(p->device, at, p->grad, p->numel * es,
                              ctx->compute_stream, err);
    const size_t block = 16384; /* elements: 64 KiB of f32, in L2 */
    size_t gs = ddph__dtype_size(p->dtype);
    for (size_t i = 0; i < p->numel; i += block) {
        size_t k = p->numel - i < block ? p->numel - i : block;
        const char *from = (const char *)p->grad + i * gs;
        ddph_status st =
            b->store_dtype != p->dtype
                ? ddph__cpu_cast(from, p->dtype, at + i * es, b->store_dtype,
                                 k, 1.0, err)
                : (memcpy(at + i * es, from, k * es), DDPH_OK);
        if (st == DDPH_OK && b->divided_by != 0)
            st = ddph__cpu_divide(at + i * es, b->store_dtype, k,
                                  b->divided_by, err);
        if (st != DDPH_OK)
            return st;
    }
    return DDPH_OK;
}

ddph_status ddph__reducer_ready(ddph_model *m, int index, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    ddph_param *p = &m->params[index];
    if (p->ready)
        return ddph__fail(err, DDPH_ERR_STATE,
                          "model '%s': parameter %d '%s' marked ready twice "
                          "in one step",
                          m->name, index, p->name);
    p->ready = 1;
    if (!ctx->syncs)
        return DDPH_OK; /* accumulating: the gradient stays where it is */
    ddph_rt_bucket *b = &m->buckets[p->bucket];
    if (!ctx->cfg.gradient_as_bucket_view) {
        ddph_status st = copy_in(ctx, b, p, err);
        if (st != DDPH_OK)
            return st;
    }
    if (m->gpu_nonfinite && p->device == DDPH_CUDA) {
        /* Looked at in ddph__reducer_wait: reading it here would stall.
         * Enqueued before the bucket's ready event, so that the hook's
         * stream (which waits for that event) cannot change the gradient
         * (a view into the bucket) while the search reads it. */
        ddph_status st = ddph__dev_nonfinite_find(p->grad, p->dtype, p->numel,
                                                  &m->gpu_nonfinite[index],
                                                  ctx->compute_stream, err);
        if (st != DDPH_OK)
            return st;
    }
    /* The last gradient of a GPU bucket: mark the point its hook waits for. */
    if (b->ready_event && b->pending == 1) {
        ddph_status st = ddph__dev_event_record(b->ready_event,
                                                ctx->compute_stream, err);
        if (st != DDPH_OK)
            return st;
    }
    if (ctx->cfg.check_finite && p->device == DDPH_CPU) {
        size_t at;
        if (!ddph__cpu_all_finite(p->grad, p->dtype, p->numel, &at)) {
            /* Still launch: the other ranks must not wait for this one. */
            if (!m->nonfinite[0])
                snprintf(m->nonfinite, sizeof m->nonfinite,
                         "model '%s' bucket %d (rank %d): gradient of '%s' is "
                         "not finite at element %zu (check_finite = true)",
                         m->name, p->bucket, ddph__rank(ctx), p->name, at);
        }
    }
    pthread_mutex_lock(&ctx->mu);
    b->pending--;
    int ok = launch_ready(ctx);
    pthread_mutex_unlock(&ctx->mu);
    if (!ok)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory launching a "
                                               "bucket");
    return DDPH_OK;
}

/* Names of up to a few parameters never marked ready. */
static int list_unready(const ddph_model *m, char *out, size_t len)
{
    int missing = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = m->nparams - 1; i >= 0; i--) {
        if (m->params[i].ready)
            continue;
        if (missing < 4 && used < len)
            used += (size_t)snprintf(out + used, len - used, "%s'%s'",
                                     missing ? ", " : "", m->params[i].name);
        missing++;
    }
    if (missing > 4 && used < len)
        snprintf(out + used, len - used, " and %d more", missing - 4);
    return missing;
}

/* check_finite on the GPU: the first parameter, in the order a backward
 * marks them ready, whose kernel found a NaN or Inf. */
static ddph_status gpu_nonfinite_report(ddph_model *m, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    if (!m->gpu_nonfinite || !ctx->syncs || m->nonfinite[0])
        return DDPH_OK;
    uint64_t *first = malloc((size_t)m->nparams * sizeof *first);
    if (!first)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st = ddph__dev_nonfinite_fetch(first, m->gpu_nonfinite,
                                               (size_t)m->nparams,
                                               ctx->compute_stream, err);
    for (int i = m->nparams - 1; st == DDPH_OK && i >= 0; i--) {
        const ddph_param *p = &m->params[i];
        if (!p->ready || first[i] == UINT64_MAX)
            continue;
        snprintf(m->nonfinite, sizeof m->nonfinite,
                 "model '%s' bucket %d (rank %d): gradient of '%s' is not "
                 "finite at element %llu (check_finite = true)",
                 m->name, p->bucket, ddph__rank(ctx), p->name,
                 (unsigned long long)first[i]);
        break;
    }
    free(first);
    return st;
}

/* How often a waiting trainer looks at the hooks in progress. */
#define WATCH_TICK_NS 50000000L

/* With ctx->mu held, while waiting for a bucket: a hook that has not
 * returned, nor waited on a collective (whose own deadline bounds it),
 * for timeout_s (less a margin, so that this rank's report reaches its
 * peers before their own collectives time out) is declared stuck: the
 * job fails, the peers are told which rank and hook, and the lane is
 * abandoned (ddph_close does not wait for it).  On a job broken
 * meanwhile, hooks waiting on collectives return at once by themselves. */
static ddph_status watch_hooks(ddph_ctx *ctx, ddph_err *err)
{
    double limit = ctx->cfg.timeout_s, margin = 0.1 * limit;
    if (margin > 1.0)
        margin = 1.0;
    double now = ddph__now();
    for (int i = 0; i < ctx->nlanes; i++) {
        ddph_lane *lane = &ctx->lanes[i];
        double active = (double)atomic_load(&lane->active_us) * 1e-6;
        if (!lane->in_hook || now - active < limit - margin)
            continue;
        ddph_model *m = lane->running.model;
        lane->abandoned = 1;
        ctx->lanes_abandoned = 1;
        char msg[512];
        if (lane->in_callback)
            snprintf(msg, sizeof msg,
                     "the trainer's bucket callback has not returned from "
                     "model '%s' bucket %d (rank %d) after %.1f s "
                     "(timeout_s = %g): it is stuck; this rank abandons it",
                     m->name, lane->running.bucket, ddph__rank(ctx),
                     now - active, limit);
        else
            snprintf(msg, sizeof msg,
                     "hook '%s' has not returned from model '%s' bucket %d "
                     "(rank %d) after %.1f s, %.1f s of it outside any "
                     "collective (timeout_s = %g): it is stuck; this rank "
                     "abandons it",
                     m->hook->plugin->api.name, m->name,
                     lane->running.bucket, ddph__rank(ctx),
                     now - lane->hook_since, now - active, limit);
        ddph__ctl_fail(ctx->control, DDPH_ERR_TIMEOUT, msg);
        return ddph__fail(err, DDPH_ERR_TIMEOUT, "%s", msg);
    }
    return DDPH_OK;
}

ddph_status ddph__reducer_wait(ddph_ctx *ctx, ddph_err *err)
{
    ddph_status st = DDPH_OK;
    /* Unready parameters: say which, but still wait for what launched. */
    for (int k = 0; k < ctx->nstep_models && st == DDPH_OK; k++) {
        ddph_model *m = ctx->step_models[k];
        char names[512];
        int missing = list_unready(m, names, sizeof names);
        if (missing) {
            st = ddph__fail(err, DDPH_ERR_STATE,
                            "model '%s' (rank %d): %d parameter%s never "
                            "marked ready in this step: %s",
                            m->name, ddph__rank(ctx), missing,
                            missing == 1 ? " was" : "s were", names);
            /* Their buckets never launch here: the peers would wait. */
            ddph__ctl_fail(ctx->control, st, err->msg);
        }
    }
    /* Host buckets are copied back one by one as their hooks finish, by
     * this (otherwise idle) thread while the communication thread works
     * on the next ones. */
    int early = !ctx->cfg.gradient_as_bucket_view && !ctx->comm_stream;
    for (int k = 0; k < ctx->nstep_models; k++) {
        ddph_model *m = ctx->step_models[k];
        for (int b = 0; b < m->next_launch; b++) {
            ddph_rt_bucket *bk = &m->buckets[b];
            pthread_mutex_lock(&ctx->mu);
            ddph_status stuck = DDPH_OK;
            while (bk->state != DDPH_BUCKET_DONE && stuck == DDPH_OK) {
                struct timespec tick;
                clock_gettime(CLOCK_REALTIME, &tick);
                tick.tv_nsec += WATCH_TICK_NS;
                if (tick.tv_nsec >= 1000000000L) {
                    tick.tv_sec++;
                    tick.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&ctx->done, &ctx->mu, &tick);
                if (bk->state != DDPH_BUCKET_DONE)
                    stuck = watch_hooks(ctx, err);
            }
            pthread_mutex_unlock(&ctx->mu);
            if (stuck != DDPH_OK)
                return stuck;
            if (early && bk->status == DDPH_OK && !bk->copied_back &&
                !ddph__ctl_broken(ctx->control))
                copy_back(m, bk);
        }
    }
    /* Failed here or elsewhere: the gradients are not worth copying. */
    ddph_status fault = ddph__ctl_fault(ctx->control, err);
    if (fault != DDPH_OK)
        return fault;
    for (int k = 0; k < ctx->nstep_models && st == DDPH_OK; k++)
        st = gpu_nonfinite_report(ctx->step_models[k], err);
    if (ctx->cfg.check_finite && st == DDPH_OK) {
        /* A NaN on one rank has been averaged into every rank's buckets:
         * every rank must hear it.  One 8-byte allreduce per step, only
         * with check_finite. */
        const char *found = NULL;
        for (int k = 0; k < ctx->nstep_models && !found; k++)
            if (ctx->step_models[k]->nonfinite[0])
                found = ctx->step_models[k]->nonfinite;
        st = ddph__ctl_agree(ctx->control,
                             found ? DDPH_ERR_NONFINITE : DDPH_OK, found, err);
        if (ddph__ctl_broken(ctx->control))
            return st;
    }
    for (int k = 0; k < ctx->nstep_models; k++) {
        ddph_model *m = ctx->step_models[k];
        for (int b = 0; b < m->next_launch; b++) {
            ddph_rt_bucket *bk = &m->buckets[b];
            if (bk->status != DDPH_OK) {
                if (st == DDPH_OK)
                    st = ddph__fail(err, bk->status, "%s",
                                    bk->message ? bk->message
                                                : "hook failed (no message)");
                continue;
            }
            if (ctx->cfg.gradient_as_bucket_view || early)
                continue;
            if (bk->store_dtype != bk->dtype) { /* a host bucket, cast */
                copy_back(m, bk);
                continue;
            }
            if (bk->copied_back) /* before its bucket callback */
                continue;
            ddph_err later; /* the first failure keeps its message */
            ddph_status cs = gpu_copy_back(ctx, m, bk, st ? &later : err);
            if (st == DDPH_OK)
                st = cs;
        }
    }
    /* GPU copies back run on the hooks' stream: done when it is. */
    if (ctx->comm_stream) {
        ddph_err later;
        ddph_status ss = ddph__dev_sync(ctx->comm_stream, st ? &later : err);
        if (st == DDPH_OK)
            st = ss;
    }
    return st;
}
