/* model.c: registering a model's parameters, laying out its buckets,
 * creating its hook instance and checking that every rank agrees. */
#include "build-config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buckets.h"
#include "core/cli_internal.h"
#include "core/context.h"
#include "core/trainer_memory.h"
#include "device/device.h"
#include "core/ranks/replicas.h"

ddph_status ddph_model_create(ddph_ctx *ctx, const char *name,
                              ddph_model **out)
{
    if (!ctx || !name || !*name || !out)
        return DDPH_ERR_INVALID;
    for (int i = 0; i < ctx->nmodels; i++)
        if (strcmp(ctx->models[i]->name, name) == 0)
            return ddph__ctx_failf(ctx, DDPH_ERR_INVALID, "a model named '%s' exists "
                                              "already",
                                              name);
    ddph_model **list =
        realloc(ctx->models, (size_t)(ctx->nmodels + 1) * sizeof *list);
    if (!list)
        return ddph__ctx_failf(ctx, DDPH_ERR_NOMEM, "out of memory");
    ctx->models = list;
    ddph_model *m = calloc(1, sizeof *m);
    if (!m || !(m->name = ddph__strdup(name))) {
        free(m);
        return ddph__ctx_failf(ctx, DDPH_ERR_NOMEM, "out of memory");
    }
    m->ctx = ctx;
    const ddph_model_section *ms = ddph__config_model(&ctx->cfg, name);
    m->accumulate_steps = ms && ms->accumulate_steps ? ms->accumulate_steps
                                                     : ctx->cfg.accumulate_steps;
    m->first_bucket_cap_mb = ctx->cfg.first_bucket_cap_mb;
    m->bucket_cap_mb = ctx->cfg.bucket_cap_mb;
    ctx->models[ctx->nmodels++] = m;
    *out = m;
    return DDPH_OK;
}

ddph_status ddph_model_add_param(ddph_model *m, const char *name, void *grad,
                                 const int64_t *shape, int ndim,
                                 ddph_dtype dtype, ddph_device device,
                                 int *index_out)
{
    if (!m || !name)
        return DDPH_ERR_INVALID;
    ddph_ctx *ctx = m->ctx;
    if (m->finalized)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE, "model '%s': add_param('%s') after "
                                          "finalize",
                                          m->name, name);
    if (ndim < 0 || ndim > 16 || (ndim > 0 && !shape))
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID, "model '%s' parameter '%s': ndim %d "
                                          "must be 0..16 with a shape",
                                          m->name, name, ndim);
    if ((unsigned)dtype >= DDPH_DTYPE_COUNT ||
        (unsigned)device >= DDPH_DEVICE_COUNT)
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID, "model '%s' parameter '%s': unknown "
                                          "dtype or device",
                                          m->name, name);
    if (!ddph__dtype_is_float(dtype))
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                               "model '%s' parameter '%s': gradients are "
                               "f32, f64, f16 or bf16, not %s",
                               m->name, name, ddph__dtype_name(dtype));
    /* One backend per job: MPI reduces host memory, NCCL device memory. */
    if (device == DDPH_CUDA && !ctx->gpu)
        return ddph__ctx_failf(ctx, DDPH_ERR_UNSUPPORTED,
                               "model '%s' parameter '%s': CUDA gradients "
                               "need [runtime] backend = nccl",
                               m->name, name);
    if (device == DDPH_CPU && ctx->gpu)
        return ddph__ctx_failf(ctx, DDPH_ERR_UNSUPPORTED,
                               "model '%s' parameter '%s': with backend = "
                               "nccl gradients must be in GPU memory "
                               "(DDPH_CUDA)",
                               m->name, name);
    if (!grad && !ctx->cfg.gradient_as_bucket_view)
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID, "model '%s' parameter '%s': grad is "
                                          "NULL (allowed only with "
                                          "gradient_as_bucket_view = true)",
                                          m->name, name);
    /* Gradients on another GPU (allocated before ddph_open chose this
     * rank's) would fail in NCCL with an illegal address: named here. */
    ddph_err where;
    if (device == DDPH_CUDA && grad &&
        ddph__dev_check_on(grad, ctx->cuda_device, &where) != DDPH_OK)
        return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                               "model '%s' parameter '%s': grad %s",
                               m->name, name, where.msg);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return ddph__ctx_failf(ctx, DDPH_ERR_INVALID, "model '%s' parameter '%s': "
                                              "negative extent",
                                              m->name, name);
        /* Overflow would register a huge tensor as a small one. */
        if (__builtin_mul_overflow(numel, (size_t)shape[d], &numel) ||
            numel > (SIZE_MAX >> 4))
            return ddph__ctx_failf(ctx, DDPH_ERR_INVALID,
                                   "model '%s' parameter '%s': the shape's "
                                   "element count overflows",
                                   m->name, name);
    }
    if (m->nparams == m->capparams) {
        int cap = m->capparams ? 2 * m->capparams : 16;
        ddph_param *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p)
            return ddph__ctx_failf(ctx, DDPH_ERR_NOMEM, "out of memory");
        m->params = p;
        m->capparams = cap;
    }
    ddph_param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    p->name = ddph__strdup(name);
    p->shape = malloc((size_t)(ndim ? ndim : 1) * sizeof *p->shape);
    if (!p->name || !p->shape) {
        free(p->name);
        free(p->shape);
        return ddph__ctx_failf(ctx, DDPH_ERR_NOMEM, "out of memory");
    }
    if (ndim)
        memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    p->ndim = ndim;
    p->numel = numel;
    p->grad = grad;
    p->dtype = dtype;
    p->device = device;
    if (index_out)
        *index_out = m->nparams;
    m->nparams++;
    return DDPH_OK;
}

ddph_status ddph_model_set_param_data(ddph_model *m, int index, void *data)
{
    if (!m)
        return DDPH_ERR_INVALID;
    ddph_status known = ddph__param_index(m, "ddph_model_set_param_data",
                                          index);
    if (known != DDPH_OK)
        return known;
    /* Finalize broadcast rank 0's values from the memory given by then:
     * memory given later would start unequal, unbroadcast, and no check
     * would have been told before the job's first step. */
    if (m->finalized)
        return ddph__ctx_failf(m->ctx, DDPH_ERR_STATE,
                               "ddph_model_set_param_data on model '%s' "
                               "(parameter '%s') after ddph_model_finalize, "
                               "which has broadcast rank 0's values of the "
                               "memory given by then: give every "
                               "parameter's memory before finalize",
                               m->name, m->params[index].name);
    m->params[index].data = data;
    return DDPH_OK;
}

ddph_status ddph_model_set_bucket_callback(ddph_model *m,
                                           ddph_bucket_callback fn,
                                           void *user)
{
    if (!m)
        return DDPH_ERR_INVALID;
    ddph_ctx *ctx = m->ctx;
    if (ctx->in_step)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE,
                               "model '%s': set_bucket_callback inside a "
                               "step (between steps only: a lane may be "
                               "calling the callback)",
                               m->name);
    pthread_mutex_lock(&ctx->mu);
    m->bucket_callback = fn;
    m->bucket_callback_user = fn ? user : NULL;
    pthread_mutex_unlock(&ctx->mu);
    return DDPH_OK;
}

/* Buckets from the plan; storage, views and the wrapper's scratch (when
 * the storage is not already in the wrapper's dtype). */
static ddph_status build_buckets(ddph_model *m, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    ddph_bucket_tensor *t = malloc((size_t)(m->nparams ? m->nparams : 1) *
                                   sizeof *t);
    if (!t)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    /* Reverse registration order: a backward pass finishes the last
     * parameters first, so bucket 0 holds them. */
    size_t total = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ddph_param *p = &m->params[m->nparams - 1 - i];
        t[i] = (ddph_bucket_tensor){m->nparams - 1 - i,
                                    p->numel * ddph__dtype_size(p->dtype),
                                    p->dtype, p->device};
        total += t[i].bytes;
    }
    size_t limits[2];
    ddph__bucket_limits(m->first_bucket_cap_mb, m->bucket_cap_mb, total,
                        limits);
    ddph_bucket_plan plan;
    ddph_status st = ddph__assign_buckets(t, (size_t)m->nparams, limits, 2, 0,
                                          &plan, err);
    free(t);
    if (st != DDPH_OK)
        return st;
    m->buckets = calloc((size_t)(plan.nbuckets ? plan.nbuckets : 1),
                        sizeof *m->buckets);
    if (!m->buckets) {
        ddph__bucket_plan_free(&plan);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    m->nbuckets = plan.nbuckets;
    st = DDPH_OK;
    for (int b = 0; b < plan.nbuckets && st == DDPH_OK; b++) {
        ddph_rt_bucket *bk = &m->buckets[b];
        bk->index = b;
        bk->nparams = plan.start[b + 1] - plan.start[b];
        bk->params = malloc((size_t)bk->nparams * sizeof *bk->params);
        bk->views = calloc((size_t)bk->nparams, sizeof *bk->views);
        if (!bk->params || !bk->views) {
            st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(bk->params, plan.indices + plan.start[b],
               (size_t)bk->nparams * sizeof *bk->params);
        const ddph_param *first = &m->params[bk->params[0]];
        bk->dtype = first->dtype;
        bk->device = first->device;
        for (int j = 0; j < bk->nparams; j++) {
            ddph_param *p = &m->params[bk->params[j]];
            p->bucket = b;
            p->offset = bk->numel;
            bk->views[j] = (ddph_tensor_view){p->name, bk->numel, p->numel,
                                              p->ndim, p->shape};
            bk->numel += p->numel;
        }
        /* Copies into host buckets may cast instead (one pass each way
         * where a copy and the hook's or wrapper's cast would be two). */
        int cast_in = !ctx->cfg.gradient_as_bucket_view &&
                      bk->device == DDPH_CPU;
        bk->store_dtype = cast_in ? ddph__hook_bucket_dtype(m->hook, bk->dtype)
                                  : bk->dtype;
        bk->divided_by = cast_in && ddph__hook_divides_first(m->hook,
                                                             bk->store_dtype)
                             ? (double)ddph__size(ctx)
                             : 0;
        size_t es = ddph__dtype_size(bk->store_dtype);
        st = ddph__dev_alloc(bk->device, bk->numel * es, &bk->storage, err);
        if (st != DDPH_OK) {
            ddph__err_prefix(err, "bucket %d", b);
            break;
        }
        ddph_dtype wire = ddph__hook_wire_dtype(m->hook, bk->store_dtype);
        if (wire != bk->store_dtype &&
            (st = ddph__dev_alloc(bk->device, bk->numel * ddph__dtype_size(wire),
                                  &bk->scratch, err)) != DDPH_OK)
            break;
        if (bk->device == DDPH_CUDA &&
            (st = ddph__dev_event_create(&bk->ready_event, err)) != DDPH_OK)
            break;
        if (ctx->cfg.gradient_as_bucket_view) {
            for (int j = 0; j < bk->nparams && st == DDPH_OK; j++) {
                ddph_param *p = &m->params[bk->params[j]];
                char *view = (char *)bk->storage + p->offset * es;
                if (p->grad) /* keep what the caller had, as PyTorch does */
                    st = ddph__dev_copy(bk->device, view, p->grad,
                                        p->numel * es, ctx->compute_stream, err);
                p->grad_moved_unseen = p->grad != NULL;
                p->grad = view;
            }
        }
    }
    ddph__bucket_plan_free(&plan);
    /* check_finite on GPU gradients: one result word per parameter. */
    int on_gpu = 0;
    for (int i = 0; i < m->nparams; i++)
        on_gpu |= m->params[i].device == DDPH_CUDA;
    if (st == DDPH_OK && ctx->cfg.check_finite && on_gpu)
        st = ddph__dev_alloc(DDPH_CUDA, (size_t)m->nparams * sizeof(uint64_t),
                             (void **)&m->gpu_nonfinite, err);
    return st;
}

/* A bucket's bytes in shared memory, where each starts 64-byte aligned. */
static size_t padded(const ddph_rt_bucket *bk)
{
    return (bk->numel * ddph__dtype_size(bk->store_dtype) + 63) / 64 * 64;
}

/* A one-host job's host buckets move into memory every rank maps
 * (shared_buckets.h), where an allreduce needs no messages.  Collective;
 * when no segment can be made the buckets stay where they are. */
static ddph_status share_buckets(ddph_model *m, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    const ddph_backend_ops *job = ctx->job.ops;
    int wanted = ctx->cfg.shared_buckets && !ctx->gpu;
    size_t total = 0;
    for (int b = 0; b < m->nbuckets; b++) {
        const ddph_rt_bucket *bk = &m->buckets[b];
        wanted &= bk->device == DDPH_CPU;
        total += padded(bk);
    }
    char why[256] = "the backend shares no memory";
    int failed = 0;
    ddph_shared_memory mem = {0};
    ddph_status st = DDPH_OK;
    if (job->shared_open)
        st = job->shared_open(ctx->job.state, total, wanted, &mem, why,
                              sizeof why, &failed, err);
    if (st != DDPH_OK)
        return st;
    m->shared = mem.handle;
    if (!m->shared) {
        /* A full /dev/shm (a container's 64 MB) costs speed: say so once. */
        if (failed && ddph__rank(ctx) == 0)
            ddph__log(&ctx->log, DDPH_LOG_WARN,
                      "model '%s': buckets in private memory, so sums go "
                      "through MPI (slower on one host): %s",
                      m->name, why);
        else
            ddph__log(&ctx->log, DDPH_LOG_DEBUG,
                      "model '%s': buckets in private memory (%s)", m->name,
                      ctx->cfg.shared_buckets
                          ? why
                          : "[runtime] shared_buckets = false");
        return DDPH_OK;
    }
    char *at = mem.part;
    for (int b = 0; b < m->nbuckets; b++) {
        ddph_rt_bucket *bk = &m->buckets[b];
        size_t es = ddph__dtype_size(bk->store_dtype);
        memcpy(at, bk->storage, bk->numel * es);
        ddph__dev_free(DDPH_CPU, bk->storage);
        bk->storage = at;
        /* gradient_as_bucket_view: the gradients move with their bucket
         * (before ddph_model_grad_ptr may hand them out). */
        for (int j = 0; j < bk->nparams && ctx->cfg.gradient_as_bucket_view;
             j++) {
            ddph_param *p = &m->params[bk->params[j]];
            p->grad = at + p->offset * es;
        }
        at += padded(bk);
    }
    ddph__log(&ctx->log, DDPH_LOG_INFO,
              "model '%s': %.1f MiB of buckets in memory shared by the %d "
              "ranks of this host",
              m->name, (double)total / (1 << 20), ddph__size(ctx));
    return DDPH_OK;
}

/* The hook's on_layout (ABI minor 2): every bucket as on_bucket will see
 * it, without its memory. */
static ddph_status hand_layout(ddph_model *m, ddph_err *err)
{
    ddph_bucket *views = calloc((size_t)(m->nbuckets ? m->nbuckets : 1),
                                sizeof *views);
    if (!views)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->nbuckets; i++) {
        const ddph_rt_bucket *b = &m->buckets[i];
        views[i] = (ddph_bucket){
            .struct_size = sizeof(ddph_bucket),
            .index = i,
            .count = m->nbuckets,
            .is_last = i == m->nbuckets - 1,
            .dtype = ddph__hook_wire_dtype(m->hook, b->store_dtype),
            .divided_by = b->divided_by,
            .device = b->device,
            .numel = b->numel,
            .ntensors = (size_t)b->nparams,
            .tensors = b->views,
            .model = m->name,
        };
    }
    ddph_layout layout = {.struct_size = sizeof layout,
                          .model = m->name,
                          .nbuckets = m->nbuckets,
                          .buckets = views};
    ddph_status st = ddph__hook_on_layout(m->hook, &layout, err);
    free(views);
    return st;
}

ddph_status ddph__model_build(ddph_model *m, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    const ddph_model_section *ms = ddph__config_model(&ctx->cfg, m->name);
    const char *hook = ms && ms->hook ? ms->hook : ctx->cfg.hook_name;
    int hook_line = ms && ms->hook ? ms->hook_line : ctx->cfg.hook_line;
    ddph_wrapper wrapper = ms && ms->wrapper_set ? ms->wrapper
                                                 : ctx->cfg.wrapper;
    ddph_status st = ddph__hook_create(&ctx->cfg, hook, hook_line, wrapper,
                                       m->name, ctx->comm, ctx->gpu,
                                       ctx->gpu_ops, &ctx->log, &m->hook, err);
    if (st == DDPH_OK) {
        m->hook->timeline = &ctx->timeline;
        st = ddph__check_memory_apart(m, err);
    }
    /* The trainer's memory, before the buckets take the gradients in
     * with gradient_as_bucket_view. */
    if (st == DDPH_OK)
        st = ddph__keep_grad_spans(m, err);
    if (st == DDPH_OK && ctx->cfg.gradient_as_bucket_view)
        st = ddph__check_view_unshared(m, err);
    if (st == DDPH_OK)
        st = build_buckets(m, err);
    if (st == DDPH_OK)
        st = hand_layout(m, err);
    /* Lanes: the hook's view from each lane, when it allows concurrent
     * buckets; else lane 0 alone. */
    m->nlanes = 1;
    if (st == DDPH_OK) {
        m->lane_hooks[0] = m->hook;
        int n = ddph__hook_concurrent(m->hook) ? ctx->nlanes : 1;
        for (; m->nlanes < n && st == DDPH_OK; m->nlanes++)
            st = ddph__hook_lane_view(m->hook, m->nlanes,
                                      ctx->lanes[m->nlanes].group,
                                      &m->lane_hooks[m->nlanes], err);
    }
    if (st != DDPH_OK)
        ddph__err_prefix(err, "model '%s'", m->name);
    return st;
}

ddph_status ddph_model_finalize(ddph_model *m)
{
    if (!m)
        return DDPH_ERR_INVALID;
    ddph_ctx *ctx = m->ctx;
    ddph_err e, agree_err;
    if (m->finalized)
        return ddph__ctx_failf(ctx, DDPH_ERR_STATE, "model '%s' is finalized already",
                                          m->name);
    e.msg[0] = '\0';
    ddph_status st = ddph__model_build(m, &e);
    /* Every rank takes part, even one that failed above, so that nobody
     * waits for it. */
    ddph_status ag = ddph__agree(ctx, m, st, &e, &agree_err);
    if (st != DDPH_OK)
        return ddph__ctx_fail(ctx, st, &e);
    if (ag != DDPH_OK)
        return ddph__ctx_fail(ctx, ag, &agree_err);
    /* After the agreement: every rank is here, with the same buckets. */
    if ((st = share_buckets(m, &e)) != DDPH_OK) {
        ddph__err_prefix(&e, "model '%s'", m->name);
        return ddph__ctx_fail(ctx, st, &e);
    }
    /* Replicas start equal: rank 0's parameter values (replicas.h). */
    if (ctx->cfg.broadcast_parameters &&
        (st = ddph__replicas_broadcast(m, 0, &e)) != DDPH_OK)
        return ddph__ctx_fail(ctx, st, &e);
    /* A check asked for that would compare nothing: say so, once. */
    if (ctx->cfg.check_replicas_every > 0 && ddph__replicas_count(m) == 0 &&
        ddph__rank(ctx) == 0)
        ddph__log(&ctx->log, DDPH_LOG_WARN,
                  "model '%s': [runtime] check_replicas_every = %d, but no "
                  "parameter's memory was given (ddph_model_set_param_data, "
                  "host memory): the replicas are neither compared nor "
                  "broadcast at the start",
                  m->name, ctx->cfg.check_replicas_every);
    m->finalized = 1;
    /* Finalize is collective and in one order on every rank (the
     * agreement compares the models' names): its order is the model's
     * id across ranks. */
    m->id = ctx->models_finalized++;
    for (int i = 0; i < m->nlanes; i++)
        m->lane_hooks[i]->model_id = m->id;
    ddph__ctl_model_named(ctx->control, m->id, m->name);
    ddph__log(&ctx->log, DDPH_LOG_INFO,
              "model '%s': %d parameters in %d buckets, hook '%s' from %s",
              m->name, m->nparams, m->nbuckets, m->hook->plugin->api.name,
              m->hook->plugin->path);
    return DDPH_OK;
}

ddph_status ddph_model_grad_ptr(ddph_model *m, int index, void **out)
{
    if (!m || !out)
        return DDPH_ERR_INVALID;
    /* Named: a trainer's "failed: " + ddph_last_error said nothing. */
    ddph_status known = ddph__param_index(m, "ddph_model_grad_ptr", index);
    if (known != DDPH_OK)
        return known;
    if (!m->finalized)
        return ddph__ctx_failf(m->ctx, DDPH_ERR_STATE,
                               "ddph_model_grad_ptr on model '%s' before "
                               "ddph_model_finalize (with "
                               "gradient_as_bucket_view = true the "
                               "gradients get their places in the buckets "
                               "there): ask after it",
                               m->name);
    m->params[index].grad_moved_unseen = 0;
    *out = m->params[index].grad;
    return DDPH_OK;
}

ddph_status ddph_model_set_bucket_caps(ddph_model *m, double first_mb,
                                       double cap_mb)
{
    if (!m)
        return DDPH_ERR_INVALID;
    if (m->finalized)
        return ddph__ctx_failf(m->ctx, DDPH_ERR_STATE, "model '%s': "
                               "set_bucket_caps after finalize", m->name);
    double v[2] = {first_mb, cap_mb};
    for (int i = 0; i < 2; i++)
        if (v[i] != 0 && /* NaN fails both comparisons */
            !(v[i] >= DDPH_CAP_MIN_MB && v[i] <= DDPH_CAP_MAX_MB))
            return ddph__ctx_failf(m->ctx, DDPH_ERR_INVALID, "model '%s': "
                                   "bucket cap %g MiB is neither 0 nor in "
                                   "[2^-20, 65536]", m->name, v[i]);
    if (first_mb != 0)
        m->first_bucket_cap_mb = first_mb;
    if (cap_mb != 0)
        m->bucket_cap_mb = cap_mb;
    return DDPH_OK;
}

int ddph_model_accumulate_steps(const ddph_model *m)
{
    return m ? m->accumulate_steps : -1;
}

const char *ddph_model_hook_name(const ddph_model *m)
{
    if (!m)
        return NULL;
    if (m->hook)
        return m->hook->plugin->api.name;
    const ddph_model_section *ms = ddph__config_model(&m->ctx->cfg, m->name);
    return ms && ms->hook ? ms->hook : m->ctx->cfg.hook_name;
}

ddph_status ddph_describe(const ddph_ctx *ctx, FILE *out)
{
    if (!ctx || !out)
        return DDPH_ERR_INVALID;
    ddph__config_print(&ctx->cfg, out);
    fprintf(out, "\n; %d rank%s, backend %s\n", ddph__size(ctx),
            ddph__size(ctx) == 1 ? "" : "s",
            ctx->comm.ops->name);
    for (int i = 0; i < ctx->nmodels; i++) {
        const ddph_model *m = ctx->models[i];
        fprintf(out, "; model '%s': %d parameter%s, accumulate_steps %d",
                m->name, m->nparams, m->nparams == 1 ? "" : "s",
                m->accumulate_steps);
        if (!m->finalized) {
            fputs(", not finalized\n", out);
            continue;
        }
        size_t numel = 0;
        for (int b = 0; b < m->nbuckets; b++)
            numel += m->buckets[b].numel;
        fprintf(out, ", %d bucket%s (%zu elements)\n", m->nbuckets,
                m->nbuckets == 1 ? "" : "s", numel);
        ddph__hook_describe(m->hook, out);
        for (int b = 0; b < m->nbuckets; b++) {
            const ddph_rt_bucket *bk = &m->buckets[b];
            fprintf(out, ";   bucket %d: %zu elements of %s, %d parameter%s:",
                    b, bk->numel, ddph__dtype_name(bk->dtype), bk->nparams,
                    bk->nparams == 1 ? "" : "s");
            for (int k = 0; k < bk->nparams; k++)
                fprintf(out, " %s", m->params[bk->params[k]].name);
            fputc('\n', out);
        }
    }
    return ferror(out) ? DDPH_ERR_IO : DDPH_OK;
}

int ddph_model_bucket_count(const ddph_model *m)
{
    return m && m->finalized ? m->nbuckets : 0;
}

ddph_status ddph_model_bucket_info(ddph_model *m, int index,
                                   ddph_bucket_info *out)
{
    if (!m || !out || !m->finalized || index < 0 || index >= m->nbuckets)
        return DDPH_ERR_INVALID;
    ddph_ctx *ctx = m->ctx;
    const ddph_rt_bucket *b = &m->buckets[index];
    pthread_mutex_lock(&ctx->mu);
    *out = (ddph_bucket_info){
        .index = b->index,
        .nparams = b->nparams,
        .params = b->params,
        .numel = b->numel,
        .bytes = b->numel * ddph__dtype_size(b->dtype),
        .dtype = b->dtype,
        .device = b->device,
        .hook_calls = b->hook_calls,
        .bytes_on_wire = b->bytes_on_wire,
    };
    pthread_mutex_unlock(&ctx->mu);
    return DDPH_OK;
}

ddph_status ddph_model_bucket_traffic(ddph_model *m, int index,
                                      uint64_t *sent, uint64_t *received)
{
    if (!m || !sent || !received || !m->finalized || index < 0 ||
        index >= m->nbuckets)
        return DDPH_ERR_INVALID;
    pthread_mutex_lock(&m->ctx->mu);
    *sent = m->buckets[index].bytes_on_wire;
    *received = m->buckets[index].bytes_received;
    pthread_mutex_unlock(&m->ctx->mu);
    return DDPH_OK;
}

ddph_status ddph_model_hook_stats(ddph_model *m, ddph_stat *out, size_t max,
                                  size_t *count)
{
    if (!m || !count || (max && !out))
        return DDPH_ERR_INVALID;
    if (!m->finalized)
        return DDPH_ERR_STATE;
    const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
    *count = api->stats ? api->stats(m->hook->state, out, max) : 0;
    return DDPH_OK;
}

void ddph__model_stats_line(ddph_model *m, char *out, size_t cap)
{
    ddph_stat stats[32];
    size_t n = 0, used = 0;
    out[0] = '\0';
    if (ddph_model_hook_stats(m, stats, 32, &n) != DDPH_OK)
        return;
    if (n == 0)
        snprintf(out, cap, "no statistics");
    for (size_t i = 0; i < n && i < 32 && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%s %g",
                                 i ? ", " : "", stats[i].name, stats[i].value);
}

void ddph__model_free(ddph_model *m)
{
    if (!m)
        return;
    for (int b = 0; b < m->nbuckets; b++) {
        ddph_rt_bucket *bk = &m->buckets[b];
        free(bk->params);
        free(bk->views);
        if (!m->shared)
            ddph__dev_free(bk->device, bk->storage);
        ddph__dev_free(bk->device, bk->scratch);
        ddph__dev_event_destroy(bk->ready_event);
        free(bk->message);
    }
    free(m->buckets);
    if (m->shared)
        m->ctx->job.ops->shared_close(m->ctx->job.state, m->shared);
    ddph__dev_free(DDPH_CUDA, m->gpu_nonfinite);
    for (int i = 0; i < m->nparams; i++) {
        free(m->params[i].name);
        free(m->params[i].shape);
    }
    free(m->params);
    free(m->grad_spans);
    for (int i = 1; i < m->nlanes; i++)
        ddph__hook_destroy(m->lane_hooks[i]);
    ddph__hook_destroy(m->hook);
    free(m->name);
    free(m);
}
