/* int8: 8-bit gradients with a per-bucket scale and error feedback
 * (PyTorch does not ship it).
 *
 * Per bucket and step, on each of W ranks:
 *   acc = grad + error                          (error feedback)
 *   scale = max over ranks of max |acc| / 127   (an allreduce of one float)
 *   q = round(acc / scale) in int8; error = acc - scale * q
 *   the bucket is cut into W chunks of c = ceil(numel / W) elements;
 *   an all-to-all sends chunk j of q to rank j (int8 on the wire), and
 *   rank j adds the W int8 chunks it got in f32 and divides by W;
 *   it re-quantizes its averaged chunk with a scale of its own, and an
 *   allgather of the int8 chunks (plus the W scales) gives every rank the
 *   whole average.
 * Per bucket and step a rank sends about 2 (W-1)/W * numel bytes plus a
 * few floats, a quarter of what an f32 reduce-scatter + allgather moves.
 * With error feedback both quantizations are fed back: each rank keeps
 * its own rounding error (added to its next gradient), and the rank that
 * averages a chunk keeps the error of re-quantizing it (added to that
 * chunk's next average), so that the results summed over steps track the
 * summed averages.  One step's error is at most half a step of each
 * scale.  When every value is a multiple of the scale (e.g. integers with
 * max |x| = 127 in each chunk) the result is exact.  Works in f32 (a cast
 * copy under the wrappers). */
#include <math.h>
#include <stdlib.h>

#include <ddphook/plugin.h>

#include <ddphook/plugin_util.h>

typedef struct int8_bucket {
    size_t numel, chunk; /* chunk = ceil(numel / W) */
    float *error;        /* numel */
    float *work;         /* numel: f32 copy of a non-f32 bucket, else NULL */
    int8_t *q;           /* W * chunk: this rank's quantized bucket */
    int8_t *received;    /* W * chunk: every rank's copy of my chunk */
    float *sum;          /* chunk: their average, f32 */
    float *chunk_error;  /* chunk: the error of re-quantizing my average */
    int8_t *q_avg;       /* chunk: the average re-quantized */
    int8_t *all_avg;     /* W * chunk: every rank's averaged chunk */
    float *scalar;       /* 1: device word for the max allreduce (i32) */
    float *my_max;       /* 1: this rank's chunk's max |x| */
    float *maxes;        /* W: every rank's chunk's max |x| */
} int8_bucket;

typedef struct int8_state {
    int error_feedback;
    int nbuckets;
    int8_bucket *buckets;
    size_t *numel;
    float **errors; /* per bucket: its error buffer (for save/load) */
    float **chunk_errors; /* per bucket: its chunk_error (for save/load) */
    size_t *chunk_numel;  /* per bucket: its chunk */
    float *host_scales; /* W: the chunks' scales, from their maxima */
    double bytes_f32, bytes_int8; /* stats: what f32 would send, what went */
} int8_state;

static const ddph_option_spec int8_options[] = {
    {"error_feedback", DDPH_OPT_BOOL, "true", 0, 0,
     "add each step's quantization error to the next step's gradient"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static ddph_status int8_create(const ddph_services *s,
                               const ddph_options *opts, void **state)
{
    /* chunk_abs_max (minor 4) keeps the maxima on the device. */
    if (!DDPH_HAS_MEMBER(s, ddph_services, chunk_abs_max)) {
        s->set_error(s, "int8 needs a host with plugin ABI minor 4 or later "
                        "(chunk_abs_max)");
        return DDPH_ERR_UNSUPPORTED;
    }
    int8_state *t = calloc(1, sizeof *t);
    if (!t)
        return DDPH_ERR_NOMEM;
    t->error_feedback = s->opt_bool(opts, "error_feedback");
    t->host_scales = calloc((size_t)s->group_size(s->world), sizeof(float));
    if (!t->host_scales) {
        free(t);
        return DDPH_ERR_NOMEM;
    }
    *state = t;
    return DDPH_OK;
}

static void free_buckets(const ddph_services *s, int8_state *t)
{
    for (int i = 0; i < t->nbuckets; i++) {
        int8_bucket *b = &t->buckets[i];
        void *all[] = {b->error, b->work, b->q, b->received, b->sum,
                       b->chunk_error, b->q_avg, b->all_avg, b->scalar,
                       b->my_max, b->maxes};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
            s->free(s, all[j]);
    }
    free(t->buckets);
    free(t->numel);
    free(t->errors);
    free(t->chunk_errors);
    free(t->chunk_numel);
    t->buckets = NULL;
    t->numel = NULL;
    t->errors = NULL;
    t->chunk_errors = NULL;
    t->chunk_numel = NULL;
    t->nbuckets = 0;
}

static void int8_destroy(const ddph_services *s, void *state)
{
    int8_state *t = state;
    if (!t)
        return;
    free_buckets(s, t);
    free(t->host_scales);
    free(t);
}

static ddph_status int8_on_layout(void *state, const ddph_layout *layout,
                                  const ddph_services *s)
{
    int8_state *t = state;
    size_t world = (size_t)s->group_size(s->world);
    free_buckets(s, t);
    size_t nb = (size_t)(layout->nbuckets ? layout->nbuckets : 1);
    t->buckets = calloc(nb, sizeof *t->buckets);
    t->numel = calloc(nb, sizeof *t->numel);
    t->errors = calloc(nb, sizeof *t->errors);
    t->chunk_errors = calloc(nb, sizeof *t->chunk_errors);
    t->chunk_numel = calloc(nb, sizeof *t->chunk_numel);
    if (!t->buckets || !t->numel || !t->errors || !t->chunk_errors ||
        !t->chunk_numel)
        return DDPH_ERR_NOMEM;
    t->nbuckets = layout->nbuckets;
    int ok = 1;
    for (int i = 0; i < layout->nbuckets && ok; i++) {
        const ddph_bucket *lb = ddph_util_layout_bucket(layout, i);
        int8_bucket *b = &t->buckets[i];
        b->numel = t->numel[i] = lb->numel;
        b->chunk = (lb->numel + world - 1) / world;
        size_t padded = world * b->chunk;
        b->error = t->errors[i] =
            ddph_util_alloc_zero(s, b->numel * sizeof(float), &ok);
        if (lb->dtype != DDPH_F32)
            b->work = ddph_util_alloc_zero(s, b->numel * sizeof(float), &ok);
        b->q = ddph_util_alloc_zero(s, padded, &ok);
        b->received = ddph_util_alloc_zero(s, padded, &ok);
        b->sum = ddph_util_alloc_zero(s, b->chunk * sizeof(float), &ok);
        t->chunk_numel[i] = b->chunk;
        b->chunk_error = t->chunk_errors[i] =
            ddph_util_alloc_zero(s, b->chunk * sizeof(float), &ok);
        b->q_avg = ddph_util_alloc_zero(s, b->chunk, &ok);
        b->all_avg = ddph_util_alloc_zero(s, padded, &ok);
        b->scalar = ddph_util_alloc_zero(s, sizeof(float), &ok);
        b->my_max = ddph_util_alloc_zero(s, sizeof(float), &ok);
        b->maxes = ddph_util_alloc_zero(s, world * sizeof(float), &ok);
    }
    if (!ok) {
        s->set_error(s, "int8: out of memory for the buckets' state");
        return DDPH_ERR_NOMEM;
    }
    return DDPH_OK;
}

/* *out = max |x[i]| of x[0..n) into device memory (0 for n = 0), left
 * there: on the GPU, absmax would wait for the stream to hand it to the
 * host.  chunk_abs_max compares the bits of |x|, so a NaN wins. */
static ddph_status device_absmax(const ddph_services *s, const float *x,
                                 size_t n, float *out)
{
    return n ? s->chunk_abs_max(s, x, n, n, out) : s->zero(s, out, sizeof *out);
}

/* max |x| of x[0..n) on this rank, then the largest over all ranks (the
 * same value everywhere, so every rank takes the same path after), on the
 * device until the one copy to the host.  The magnitudes are reduced as
 * their bit patterns, an i32 MAX: for floats without a sign bit the
 * patterns sort as the values do, and a NaN sorts above +Inf.  An f32 MAX
 * would not do: NCCL's is fmaxf, which drops a NaN, and MPI_MAX's answer
 * depends on the operands' order. */
static ddph_status global_absmax(const ddph_services *s, int8_bucket *b,
                                 const float *x, size_t n, float *out)
{
    ddph_status st = device_absmax(s, x, n, b->scalar);
    if (st == DDPH_OK)
        st = s->allreduce(s, s->world, b->scalar, 1, DDPH_I32, DDPH_MAX);
    if (st == DDPH_OK)
        st = s->copy(s, out, b->scalar, sizeof *out, DDPH_COPY_TO_HOST);
    return st;
}

static float scale_for(float absmax)
{
    return absmax > 0 ? absmax / 127.0f : 1.0f;
}

static ddph_status int8_on_bucket(void *state, const ddph_bucket *bk,
                                  const ddph_services *s)
{
    int8_state *t = state;
    ddph_status st = ddph_util_check_bucket(s, "int8", t->nbuckets, t->numel, bk);
    if (st != DDPH_OK)
        return st;
    int8_bucket *b = &t->buckets[bk->index];
    int world = s->group_size(s->world);
    size_t n = bk->numel, c = b->chunk, padded = (size_t)world * c;
    float *acc;
    if ((st = ddph_util_f32_load(s, bk, b->work, &acc)) != DDPH_OK)
        return st;
    if (t->error_feedback &&
        (st = s->axpy(s, n, 1.0f, b->error, acc)) != DDPH_OK)
        return st;
    float absmax;
    if ((st = global_absmax(s, b, acc, n, &absmax)) != DDPH_OK)
        return st;
    if (!isfinite(absmax)) {
        s->set_error(s, "int8: bucket %d holds a NaN or Inf on some rank "
                        "(max |g| = %g): it cannot be quantized",
                     bk->index, (double)absmax);
        return DDPH_ERR_HOOK;
    }
    float scale = scale_for(absmax);
    st = s->quantize_int8(s, acc, n, scale, b->q);
    if (st == DDPH_OK && padded > n)
        st = s->zero(s, b->q + n, padded - n);
    ddph_request *req = NULL;
    if (st == DDPH_OK)
        st = s->ialltoall(s, s->world, b->q, b->received, c, DDPH_I8, &req);
    if (st != DDPH_OK)
        return st;
    /* While the chunks travel: error = acc - scale * q. */
    if (t->error_feedback) {
        st = s->copy(s, b->error, acc, n * sizeof(float), DDPH_COPY_DEVICE);
        if (st == DDPH_OK)
            st = s->dequantize_int8(s, b->q, n, -scale, 1.0f, b->error);
    }
    ddph_status sw = s->wait(s, req);
    st = st != DDPH_OK ? st : sw;
    /* My chunk from every rank, added in rank order in f32. */
    for (int r = 0; r < world && st == DDPH_OK; r++)
        st = s->dequantize_int8(s, b->received + (size_t)r * c, c, scale,
                                r == 0 ? 0.0f : 1.0f, b->sum);
    if (st == DDPH_OK)
        st = s->divide(s, b->sum, DDPH_F32, c, (double)world);
    if (st == DDPH_OK && t->error_feedback)
        st = s->axpy(s, c, 1.0f, b->chunk_error, b->sum);
    /* The chunk's maximum goes to the host (its quantization needs the
     * scale there) and, as it is, to the other ranks: each computes every
     * chunk's scale from it, as its owner does. */
    float chunk_max = 0;
    if (st == DDPH_OK)
        st = device_absmax(s, b->sum, c, b->my_max);
    if (st == DDPH_OK)
        st = s->copy(s, &chunk_max, b->my_max, sizeof chunk_max,
                     DDPH_COPY_TO_HOST);
    float my_scale = scale_for(chunk_max);
    if (st == DDPH_OK)
        st = s->quantize_int8(s, b->sum, c, my_scale, b->q_avg);
    /* chunk_error = sum - my_scale * q_avg, for this chunk's next step. */
    if (st == DDPH_OK && t->error_feedback) {
        st = s->copy(s, b->chunk_error, b->sum, c * sizeof(float),
                     DDPH_COPY_DEVICE);
        if (st == DDPH_OK)
            st = s->dequantize_int8(s, b->q_avg, c, -my_scale, 1.0f,
                                    b->chunk_error);
    }
    ddph_request *rq = NULL, *rs = NULL;
    if (st == DDPH_OK)
        st = s->iallgather(s, s->world, b->q_avg, b->all_avg, c, DDPH_I8, &rq);
    if (st == DDPH_OK)
        st = s->iallgather(s, s->world, b->my_max, b->maxes, 1, DDPH_F32,
                           &rs);
    ddph_status w1 = rq ? s->wait(s, rq) : DDPH_OK;
    ddph_status w2 = rs ? s->wait(s, rs) : DDPH_OK;
    st = st != DDPH_OK ? st : w1 != DDPH_OK ? w1 : w2;
    if (st == DDPH_OK)
        st = s->copy(s, t->host_scales, b->maxes, (size_t)world * sizeof(float),
                     DDPH_COPY_TO_HOST);
    for (int r = 0; r < world && st == DDPH_OK; r++)
        t->host_scales[r] = scale_for(t->host_scales[r]);
    /* The average, chunk by chunk (the last ones may be short or empty). */
    for (int r = 0; r < world && st == DDPH_OK; r++) {
        size_t at = (size_t)r * c;
        size_t len = at >= n ? 0 : n - at < c ? n - at : c;
        st = s->dequantize_int8(s, b->all_avg + at, len, t->host_scales[r],
                                0.0f, acc + at);
    }
    if (st == DDPH_OK)
        st = ddph_util_f32_store(s, bk, acc);
    t->bytes_f32 += (double)n * 4;
    t->bytes_int8 += (double)padded;
    return st;
}

static size_t int8_stats(void *state, ddph_stat *out, size_t max)
{
    const int8_state *t = state;
    ddph_stat all[] = {
        {"compression_rate", t->bytes_int8 > 0 ? t->bytes_f32 / t->bytes_int8 : 0},
        {"bytes_f32", t->bytes_f32},
        {"bytes_int8", t->bytes_int8},
    };
    return ddph_util_stats_put(all, sizeof all / sizeof all[0], out, max);
}

/* The error buffers, bucket by bucket, then the chunks' re-quantization
 * errors, so that a resumed job continues bit for bit. */
static ddph_status int8_save(void *state, const ddph_services *s,
                             ddph_write_fn write, void *sink)
{
    int8_state *t = state;
    ddph_status st = ddph_util_save_errors(s, write, sink, t->nbuckets,
                                           t->errors, t->numel);
    return st ? st
              : ddph_util_save_errors(s, write, sink, t->nbuckets,
                                      t->chunk_errors, t->chunk_numel);
}

static ddph_status int8_load(void *state, const ddph_services *s,
                             ddph_read_fn read, void *source)
{
    int8_state *t = state;
    ddph_status st = ddph_util_load_errors(s, read, source, t->nbuckets,
                                           t->errors, t->numel, "int8");
    return st ? st
              : ddph_util_load_errors(s, read, source, t->nbuckets,
                                      t->chunk_errors, t->chunk_numel,
                                      "int8 (chunk errors)");
}

static const ddph_plugin_api_v1 int8_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "int8",
    .version = "1.1.0",
    .description = "int8 gradients with a per-bucket scale and error "
                   "feedback: all-to-all of int8 chunks, f32 sums, int8 "
                   "allgather",
    .options = int8_options,
    .create = int8_create,
    .destroy = int8_destroy,
    .on_bucket = int8_on_bucket,
    .save = int8_save,
    .load = int8_load,
    .stats = int8_stats,
    .on_layout = int8_on_layout,
    /* What it does not send this step goes out later (error_feedback). */
    .flags = DDPH_PLUGIN_ERROR_FEEDBACK,
    /* 127 levels of the bucket's largest |value|: half a level is 0.4%
     * of it, and each rank's rounding adds to the sum. */
    .tolerance = 5e-2,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    return host_minor >= 4 ? &int8_plugin : NULL;
}
