/* post_localsgd: PyTorch's post-local-SGD, written against the installed
 * ddphook SDK only, as any third party would write a hook.
 *
 * Gradients (on_bucket), PostLocalSGDState semantics:
 *   - for the first start_localSGD_iter synchronised steps: a global
 *     average (divide by the world size, then sum), like allreduce;
 *   - after that: the average within this rank's subgroup (the ranks of
 *     this node, or consecutive blocks of subgroup_size ranks), or, with
 *     post_local_gradient_allreduce = false, no communication at all.
 *
 * Parameters (on_step_end, after the optimizer), model averaging:
 *   - period > 0: PeriodicModelAverager(period, warmup_steps): on
 *     averager step t, average every parameter over the world iff
 *     t >= warmup_steps and (t - warmup_steps) % period == 0;
 *   - period_group_size = "P1:S1,P2:S2,...": HierarchicalModelAverager:
 *     after warmup, average within groups of S for the largest period P
 *     with t % P == 0 (the last size must be the world size).
 *   The averager counts optimizer steps: steps that synchronised.
 *
 * Parameters must be registered with ddph_model_set_param_data (any
 * dtype: they are concatenated in the promoted dtype, as torch.cat does,
 * averaged, and rounded back to each one's own), in host memory with
 * backend = mpi and in GPU memory with backend = nccl (averaged there, ABI
 * minor 1).
 * Build: make (uses pkg-config --cflags ddphook; no libddphook link). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#define MAX_LEVELS 8

static const ddph_option_spec options[] = {
    {"start_localSGD_iter", DDPH_OPT_INT, "1000", 0, 1e15,
     "synchronised steps of global averaging before local SGD starts"},
    {"post_local_gradient_allreduce", DDPH_OPT_BOOL, "true", 0, 0,
     "after the start, average gradients within the subgroup (false: "
     "no gradient communication at all)"},
    {"subgroup_size", DDPH_OPT_INT, "0", 0, 1e9,
     "ranks per subgroup, in consecutive blocks (0: the ranks of this node)"},
    {"period", DDPH_OPT_INT, "0", 0, 1e9,
     "average parameters over all ranks every this many steps (0: off)"},
    {"warmup_steps", DDPH_OPT_INT, "0", 0, 1e15,
     "optimizer steps before parameter averaging starts"},
    {"period_group_size", DDPH_OPT_STRING, "", 0, 0,
     "hierarchical averaging, 'P1:S1,P2:S2': every P steps over groups "
     "of S ranks"},
    {NULL, 0, NULL, 0, 0, NULL},
};

typedef struct level {
    long long period;
    int size;
    ddph_group *group;
} level;

typedef struct local_sgd {
    long long start;
    int post_allreduce;
    ddph_group *subgroup;
    long long period, warmup;
    level levels[MAX_LEVELS];
    int nlevels;
    long long iter;          /* gradient steps, stops at the start */
    long long averager_step; /* optimizer steps seen by the averager */
    unsigned char *flat; /* the parameters, concatenated */
    size_t flat_cap;     /* bytes */
} local_sgd;

/* Consecutive blocks of `size` ranks (rank / size), or this node's ranks. */
static ddph_status make_group(const ddph_services *s, int size,
                              ddph_group **out)
{
    if (size == 0)
        return s->group_intra_node(s, out);
    if (s->world_size % size != 0) {
        s->set_error(s, "a group size of %d does not divide the world "
                        "size %d",
                     size, s->world_size);
        return DDPH_ERR_OPTION;
    }
    return s->group_split(s, s->world, s->rank / size, s->rank, out);
}

static ddph_status parse_levels(local_sgd *st, const ddph_services *s,
                                const char *text)
{
    const char *c = text;
    while (*c) {
        char *end;
        long long p = strtoll(c, &end, 10);
        if (end == c || *end != ':' || p < 1 || st->nlevels == MAX_LEVELS)
            goto bad;
        c = end + 1;
        long size = strtol(c, &end, 10);
        if (end == c || size < 1 || (*end && *end != ','))
            goto bad;
        if (st->nlevels && p <= st->levels[st->nlevels - 1].period) {
            s->set_error(s, "period_group_size: periods must increase");
            return DDPH_ERR_OPTION;
        }
        st->levels[st->nlevels++] = (level){p, (int)size, NULL};
        c = *end ? end + 1 : end;
    }
    if (st->nlevels && st->levels[st->nlevels - 1].size != s->world_size) {
        s->set_error(s, "period_group_size: the last group size must be the "
                        "world size %d",
                     s->world_size);
        return DDPH_ERR_OPTION;
    }
    return DDPH_OK;
bad:
    s->set_error(s, "period_group_size = '%s': expected P1:S1,P2:S2,... "
                    "(at most %d levels)",
                 text, MAX_LEVELS);
    return DDPH_ERR_OPTION;
}

/* create runs in ddph_model_finalize on every rank, so the collective
 * group splits can happen here. */
static ddph_status lsgd_create(const ddph_services *s, const ddph_options *o,
                               void **state)
{
    local_sgd *st = calloc(1, sizeof *st);
    if (!st)
        return DDPH_ERR_NOMEM;
    st->start = s->opt_int(o, "start_localSGD_iter");
    st->post_allreduce = s->opt_bool(o, "post_local_gradient_allreduce");
    st->period = s->opt_int(o, "period");
    st->warmup = s->opt_int(o, "warmup_steps");
    ddph_status r = parse_levels(st, s, s->opt_string(o, "period_group_size"));
    if (!r && st->period && st->nlevels) {
        s->set_error(s, "give either period or period_group_size, not both");
        r = DDPH_ERR_OPTION;
    }
    if (!r)
        r = make_group(s, (int)s->opt_int(o, "subgroup_size"), &st->subgroup);
    for (int i = 0; i < st->nlevels && !r; i++)
        r = st->levels[i].size == s->world_size
                ? (st->levels[i].group = s->world, DDPH_OK)
                : make_group(s, st->levels[i].size, &st->levels[i].group);
    if (r) {
        free(st);
        return r;
    }
    if (st->period == 1)
        s->log(s, DDPH_LOG_WARN, "period = 1 averages after every step: "
                                 "that is plain synchronous training");
    *state = st;
    return DDPH_OK;
}

static void lsgd_destroy(const ddph_services *s, void *state)
{
    local_sgd *st = state;
    if (st)
        s->free(s, st->flat);
    free(st);
}

/* _allreduce_fut(group, buffer): divide by the group's size, then sum. */
static ddph_status average(const ddph_services *s, ddph_group *g, void *buf,
                           size_t n, ddph_dtype dtype)
{
    ddph_status r = s->divide(s, buf, dtype, n, (double)s->group_size(g));
    return r ? r : s->allreduce(s, g, buf, n, dtype, DDPH_SUM);
}

static ddph_status lsgd_on_bucket(void *state, const ddph_bucket *b,
                                  const ddph_services *s)
{
    local_sgd *st = state;
    if (st->iter < st->start) {
        if (b->is_last)
            st->iter++;
        return average(s, s->world, b->buffer, b->numel, b->dtype);
    }
    if (!st->post_allreduce)
        return DDPH_OK; /* the local gradients, untouched */
    return average(s, st->subgroup, b->buffer, b->numel, b->dtype);
}

/* The device the services act on: hosts before ABI minor 1 had only the
 * CPU backend's services for on_step_end. */
static ddph_device services_device(const ddph_services *s)
{
    return DDPH_HAS_MEMBER(s, ddph_services, device) ? s->device : DDPH_CPU;
}

static size_t dtype_size(ddph_dtype t)
{
    return t == DDPH_F64 ? 8 : t == DDPH_F32 ? 4 : 2;
}

/* The flat buffer's dtype: torch.cat's type promotion over the
 * parameters' dtypes (f16 with bf16 makes f32). */
static ddph_dtype promoted_dtype(const ddph_step_info *info)
{
    int has[DDPH_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < info->nparams; i++)
        has[info->params[i].dtype] = 1;
    if (has[DDPH_F64])
        return DDPH_F64;
    if (has[DDPH_F16] != has[DDPH_BF16] && !has[DDPH_F32])
        return has[DDPH_F16] ? DDPH_F16 : DDPH_BF16;
    return DDPH_F32;
}

/* average_parameters: concatenate (promoting), average over g, write
 * back (rounding to each parameter's dtype). */
static ddph_status average_parameters(local_sgd *st, const ddph_step_info *info,
                                      const ddph_services *s, ddph_group *g)
{
    size_t total = 0;
    ddph_device device = services_device(s);
    for (size_t i = 0; i < info->nparams; i++) {
        const ddph_param_view *p = &info->params[i];
        if (!p->data || (unsigned)p->dtype >= DDPH_DTYPE_COUNT ||
            p->device != device) {
            s->set_error(s, "parameter '%s' of model '%s': %s", p->name,
                         info->model,
                         !p->data ? "no parameter memory (register it with "
                                    "ddph_model_set_param_data)"
                         : (unsigned)p->dtype >= DDPH_DTYPE_COUNT
                             ? "unknown dtype"
                         : device == DDPH_CUDA
                             ? "with backend = nccl the parameters must "
                               "be in GPU memory"
                             : "with backend = mpi the parameters must "
                               "be in host memory");
            return DDPH_ERR_INVALID;
        }
        total += p->numel;
    }
    ddph_dtype flat = promoted_dtype(info);
    size_t es = dtype_size(flat);
    if (total * es > st->flat_cap) {
        s->free(s, st->flat);
        st->flat = s->alloc(s, total * es);
        st->flat_cap = st->flat ? total * es : 0;
        if (!st->flat)
            return DDPH_ERR_NOMEM;
    }
    /* cast with scale 1: a copy between equal dtypes, one rounding
     * between others, on the services' device. */
    ddph_status r = DDPH_OK;
    size_t off = 0;
    for (size_t i = 0; i < info->nparams && !r; i++) {
        const ddph_param_view *p = &info->params[i];
        r = s->cast(s, p->data, p->dtype, st->flat + off * es, flat, p->numel,
                    1.0);
        off += p->numel;
    }
    if (!r)
        r = average(s, g, st->flat, total, flat);
    off = 0;
    for (size_t i = 0; i < info->nparams && !r; i++) {
        const ddph_param_view *p = &info->params[i];
        r = s->cast(s, st->flat + off * es, flat, p->data, p->dtype, p->numel,
                    1.0);
        off += p->numel;
    }
    return r;
}

static ddph_status lsgd_on_step_end(void *state, const ddph_step_info *info,
                                    const ddph_services *s)
{
    local_sgd *st = state;
    if (!info->synced || (!st->period && !st->nlevels))
        return DDPH_OK;
    long long t = st->averager_step++;
    if (t < st->warmup)
        return DDPH_OK;
    if (st->period)
        return (t - st->warmup) % st->period == 0
                   ? average_parameters(st, info, s, s->world)
                   : DDPH_OK;
    /* Hierarchical: the largest period dividing t (t, not t - warmup). */
    for (int i = st->nlevels - 1; i >= 0; i--)
        if (t % st->levels[i].period == 0)
            return average_parameters(st, info, s, st->levels[i].group);
    return DDPH_OK;
}

static const ddph_plugin_api_v1 lsgd_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "post_localsgd",
    .version = "1.0.0",
    .description = "post-local-SGD: global, then subgroup gradient "
                   "averaging, with periodic or hierarchical model averaging",
    .options = options,
    .create = lsgd_create,
    .destroy = lsgd_destroy,
    .on_bucket = lsgd_on_bucket,
    .on_step_end = lsgd_on_step_end,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &lsgd_plugin;
}
