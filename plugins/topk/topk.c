/* topk: top-k sparsification with error feedback (DGC-style; PyTorch does
 * not ship it).
 *
 * Per bucket and step, on each rank:
 *   acc = grad + error                       (error feedback)
 *   the k elements of acc with the largest |acc| (values, int32 indices)
 *   error = acc with those k elements set to 0
 *   allgather the values and the indices     (nonblocking, both at once)
 *   grad = (sum over ranks, in rank order, of each rank's k elements
 *           scattered at their indices) / world size
 * k = ceil(ratio * numel), at least 1.  A rank sends 8k bytes per bucket
 * and step (4 per value, 4 per index) and receives 8k from each peer, so
 * the hook pays off when ratio < 1 / (2 W) of an f32 allreduce's traffic.
 * With ratio = 1 the result is the plain average (summed in rank order).
 *
 * Per-bucket state (error, selection, gathered values and indices) is
 * allocated once from the layout the host hands on_layout (ABI minor 2).
 * Works on the bucket in f32 (a cast copy under the fp16/bf16 wrappers). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#include <ddphook/plugin_util.h>

typedef struct topk_bucket {
    size_t numel, k;
    float *error;      /* numel: what was not sent yet */
    float *work;       /* numel: f32 copy of a non-f32 bucket, else NULL */
    float *values;     /* k: this rank's selection */
    int32_t *indices;  /* k */
    float *all_values; /* world * k: every rank's, rank order */
    int32_t *all_indices;
} topk_bucket;

typedef struct topk_state {
    double ratio;
    int error_feedback;
    int nbuckets;
    topk_bucket *buckets;
    size_t *numel;  /* per bucket, for the layout check */
    float **errors; /* per bucket: its error buffer (for save/load) */
    double sent_elements, total_elements; /* stats */
} topk_state;

static const ddph_option_spec topk_options[] = {
    {"ratio", DDPH_OPT_REAL, "0.01", 1e-9, 1,
     "fraction of each bucket's elements sent per step (k = ceil(ratio * "
     "numel), at least 1)"},
    {"error_feedback", DDPH_OPT_BOOL, "true", 0, 0,
     "add what was not sent to the next step's gradient"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static ddph_status topk_create(const ddph_services *s,
                               const ddph_options *opts, void **state)
{
    ddph_status st = ddph_util_need_minor2(s, "topk");
    if (st != DDPH_OK)
        return st;
    topk_state *t = calloc(1, sizeof *t);
    if (!t)
        return DDPH_ERR_NOMEM;
    t->ratio = s->opt_real(opts, "ratio");
    t->error_feedback = s->opt_bool(opts, "error_feedback");
    *state = t;
    return DDPH_OK;
}

static void free_buckets(const ddph_services *s, topk_state *t)
{
    for (int i = 0; i < t->nbuckets; i++) {
        topk_bucket *b = &t->buckets[i];
        s->free(s, b->error);
        s->free(s, b->work);
        s->free(s, b->values);
        s->free(s, b->indices);
        s->free(s, b->all_values);
        s->free(s, b->all_indices);
    }
    free(t->buckets);
    free(t->numel);
    free(t->errors);
    t->buckets = NULL;
    t->numel = NULL;
    t->errors = NULL;
    t->nbuckets = 0;
}

static void topk_destroy(const ddph_services *s, void *state)
{
    topk_state *t = state;
    if (!t)
        return;
    free_buckets(s, t);
    free(t);
}

static ddph_status topk_on_layout(void *state, const ddph_layout *layout,
                                  const ddph_services *s)
{
    topk_state *t = state;
    size_t world = (size_t)s->group_size(s->world);
    free_buckets(s, t);
    t->buckets = calloc((size_t)(layout->nbuckets ? layout->nbuckets : 1),
                        sizeof *t->buckets);
    t->numel = calloc((size_t)(layout->nbuckets ? layout->nbuckets : 1),
                      sizeof *t->numel);
    t->errors = calloc((size_t)(layout->nbuckets ? layout->nbuckets : 1),
                       sizeof *t->errors);
    if (!t->buckets || !t->numel || !t->errors)
        return DDPH_ERR_NOMEM;
    t->nbuckets = layout->nbuckets;
    int ok = 1;
    for (int i = 0; i < layout->nbuckets && ok; i++) {
        const ddph_bucket *lb = ddph_util_layout_bucket(layout, i);
        topk_bucket *b = &t->buckets[i];
        if (lb->numel > INT32_MAX) {
            s->set_error(s, "topk: bucket %d has %zu elements; int32 "
                            "indices reach 2^31-1 (lower bucket_cap_mb)",
                         i, lb->numel);
            return DDPH_ERR_INVALID;
        }
        b->numel = t->numel[i] = lb->numel;
        double k = ceil(t->ratio * (double)lb->numel);
        b->k = lb->numel == 0 ? 0 : k < 1 ? 1 : (size_t)k;
        if (b->k > lb->numel)
            b->k = lb->numel;
        b->error = t->errors[i] =
            ddph_util_alloc_zero(s, b->numel * sizeof(float), &ok);
        if (lb->dtype != DDPH_F32)
            b->work = ddph_util_alloc_zero(s, b->numel * sizeof(float), &ok);
        b->values = ddph_util_alloc_zero(s, b->k * sizeof(float), &ok);
        b->indices = ddph_util_alloc_zero(s, b->k * sizeof(int32_t), &ok);
        b->all_values =
            ddph_util_alloc_zero(s, world * b->k * sizeof(float), &ok);
        b->all_indices =
            ddph_util_alloc_zero(s, world * b->k * sizeof(int32_t), &ok);
    }
    if (!ok) {
        s->set_error(s, "topk: out of memory for the buckets' state");
        return DDPH_ERR_NOMEM;
    }
    return DDPH_OK;
}

static ddph_status topk_on_bucket(void *state, const ddph_bucket *bk,
                                  const ddph_services *s)
{
    topk_state *t = state;
    ddph_status st = ddph_util_check_bucket(s, "topk", t->nbuckets, t->numel, bk);
    if (st != DDPH_OK)
        return st;
    topk_bucket *b = &t->buckets[bk->index];
    int world = s->group_size(s->world);
    size_t n = bk->numel, k = b->k;
    float *acc;
    if ((st = ddph_util_f32_load(s, bk, b->work, &acc)) != DDPH_OK)
        return st;
    if (t->error_feedback && (st = s->axpy(s, n, 1.0f, b->error, acc)) != DDPH_OK)
        return st;
    if ((st = s->topk(s, acc, n, k, b->values, b->indices)) != DDPH_OK)
        return st;
    ddph_request *rv = NULL, *ri = NULL;
    st = s->iallgather(s, s->world, b->values, b->all_values, k, DDPH_F32, &rv);
    if (st != DDPH_OK)
        return st;
    st = s->iallgather(s, s->world, b->indices, b->all_indices, k, DDPH_I32,
                       &ri);
    /* While the selection travels: the new error (acc minus what is sent:
     * x - x is exactly 0 at the chosen indices), and acc cleared for the
     * sum.  Neither touches the buffers in flight. */
    if (st == DDPH_OK && t->error_feedback) {
        st = s->copy(s, b->error, acc, n * sizeof(float), DDPH_COPY_DEVICE);
        if (st == DDPH_OK)
            st = s->scatter_add(s, b->error, b->indices, b->values, k, -1.0f);
    }
    if (st == DDPH_OK)
        st = s->zero(s, acc, n * sizeof(float));
    /* Every started request is waited for, also after an error. */
    ddph_status sv = s->wait(s, rv);
    ddph_status si = ri ? s->wait(s, ri) : DDPH_OK;
    st = st != DDPH_OK ? st : sv != DDPH_OK ? sv : si;
    if (st != DDPH_OK)
        return st;
    /* One scatter per rank: distinct indices within each, and the ranks
     * added in order, so the sum is the same on CPU and GPU. */
    for (int r = 0; r < world && st == DDPH_OK; r++)
        st = s->scatter_add(s, acc, b->all_indices + (size_t)r * k,
                            b->all_values + (size_t)r * k, k, 1.0f);
    if (st == DDPH_OK)
        st = s->divide(s, acc, DDPH_F32, n, (double)world);
    if (st == DDPH_OK)
        st = ddph_util_f32_store(s, bk, acc);
    t->sent_elements += (double)k;
    t->total_elements += (double)n;
    return st;
}

static size_t topk_stats(void *state, ddph_stat *out, size_t max)
{
    const topk_state *t = state;
    ddph_stat all[] = {
        {"density", t->total_elements > 0 ? t->sent_elements / t->total_elements
                                          : 0},
        {"elements_before", t->total_elements},
        {"elements_sent", t->sent_elements},
    };
    return ddph_util_stats_put(all, sizeof all / sizeof all[0], out, max);
}

/* The error buffers, bucket by bucket, so that a resumed job continues
 * bit for bit. */
static ddph_status topk_save(void *state, const ddph_services *s,
                             ddph_write_fn write, void *sink)
{
    topk_state *t = state;
    return ddph_util_save_errors(s, write, sink, t->nbuckets, t->errors, t->numel);
}

static ddph_status topk_load(void *state, const ddph_services *s,
                             ddph_read_fn read, void *source)
{
    topk_state *t = state;
    return ddph_util_load_errors(s, read, source, t->nbuckets, t->errors, t->numel,
                            "topk");
}

static const ddph_plugin_api_v1 topk_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "topk",
    .version = "1.0.0",
    .description = "top-k sparsification with error feedback: the k largest "
                   "|g| per bucket, values and int32 indices allgathered",
    .options = topk_options,
    .create = topk_create,
    .destroy = topk_destroy,
    .on_bucket = topk_on_bucket,
    .save = topk_save,
    .load = topk_load,
    .stats = topk_stats,
    .on_layout = topk_on_layout,
    /* What it does not send this step goes out later (error feedback). */
    .flags = DDPH_PLUGIN_ERROR_FEEDBACK,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    /* on_layout and the minor-2 services are not optional here. */
    return host_minor >= 2 ? &topk_plugin : NULL;
}
