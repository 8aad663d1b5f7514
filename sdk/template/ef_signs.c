/* ef_signs: the second template: a compressing hook with error feedback.
 *
 * Each rank sends 1 bit per gradient element (its sign) and one scale per
 * chunk of `chunk` elements (the mean |x| of the chunk), 32x fewer bytes
 * than f32, and keeps what the signs did not say as error feedback:
 *
 *   x      = grad + error                 (error feedback)
 *   scale  = mean |x| per chunk            (chunk_abs_sum / chunk length)
 *   signs  = the sign bits of x            (pack_signs)
 *   mine   = +-scale by sign               (unpack_signs: what was sent)
 *   error  = x - mine                      (kept for the next step)
 *   grad   = (sum over ranks, in rank order, of each rank's decoded
 *             message) / world size
 *
 * It shows what a stateful hook needs beyond my_hook.c:
 *   - on_layout: per-bucket device memory allocated once, from the layout
 *     the host hands over before the first step (ABI minor 2);
 *   - error feedback declared (DDPH_PLUGIN_ERROR_FEEDBACK), so that
 *     ddphook-plugin-test judges it on sums over steps;
 *   - save/load of the error buffers with ddph_util_save_errors and
 *     ddph_util_load_errors: without them a resumed job would continue
 *     differently, and the runtime refuses to save such a hook's state;
 *   - decoding overlapped with the transfer, done right: the bucket goes
 *     in two segments, each its own iallgather; the first segment is
 *     decoded while the second travels.  A buffer in flight is neither
 *     read nor written (this rank's own message is decoded before its
 *     collective starts), and every rank sums the messages in rank order,
 *     so every rank holds the same bits;
 *   - every request waited for, also after an error.
 * Only device operations of the services touch the buffers, so the same
 * code runs on host and on GPU memory.  Costs: docs/abi.md ("What the
 * device operations cost"). */
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

/* The same source is ddphook's shipped hook `signsgd` (built with
 * -DHOOK_NAME='"signsgd"'); a copy of yours takes the default. */
#ifndef HOOK_NAME
#define HOOK_NAME "ef_signs"
#endif

static const ddph_option_spec ef_options[] = {
    {"chunk", DDPH_OPT_INT, "256", 8, 1 << 20,
     "elements per scale (a multiple of 8: segments start on a byte of "
     "the bits)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

/* One segment of a bucket and its message: the sign bits, padded to 4
 * bytes, then a float scale per chunk. */
typedef struct segment {
    size_t offset, numel, chunks, bits_bytes, msg_bytes;
    unsigned char *send; /* msg_bytes */
    unsigned char *recv; /* world * msg_bytes, rank order */
} segment;

typedef struct bucket_state {
    int nseg;
    segment seg[2];
    float *work; /* f32 copy of a half-precision bucket, else NULL */
    float *mine; /* numel: this rank's message, decoded */
} bucket_state;

typedef struct ef_state {
    size_t chunk;
    int nbuckets;
    bucket_state *buckets;
    float **errors; /* per bucket, numel each: what was not sent yet */
    size_t *numel;
} ef_state;

static ddph_status ef_create(const ddph_services *s, const ddph_options *o,
                             void **state)
{
    ddph_status st = ddph_util_need_minor2(s, HOOK_NAME);
    if (st != DDPH_OK)
        return st;
    if (s->abi_minor < 4) { /* pack_signs and friends */
        s->set_error(s, "%s needs a host of ABI minor 4 or later (this one: "
                        "%u)", HOOK_NAME, s->abi_minor);
        return DDPH_ERR_UNSUPPORTED;
    }
    int64_t chunk = s->opt_int(o, "chunk");
    if (chunk % 8 != 0) {
        s->set_error(s, "%s: chunk = %lld is not a multiple of 8", HOOK_NAME,
                     (long long)chunk);
        return DDPH_ERR_CONFIG;
    }
    ef_state *t = calloc(1, sizeof *t);
    if (!t)
        return DDPH_ERR_NOMEM;
    t->chunk = (size_t)chunk;
    *state = t;
    return DDPH_OK;
}

static void free_buckets(const ddph_services *s, ef_state *t)
{
    for (int i = 0; i < t->nbuckets; i++) {
        bucket_state *b = &t->buckets[i];
        for (int g = 0; g < b->nseg; g++) {
            s->free(s, b->seg[g].send);
            s->free(s, b->seg[g].recv);
        }
        s->free(s, b->work);
        s->free(s, b->mine);
        s->free(s, t->errors[i]);
    }
    free(t->buckets);
    free(t->errors);
    free(t->numel);
    t->buckets = NULL;
    t->errors = NULL;
    t->numel = NULL;
    t->nbuckets = 0;
}

static void ef_destroy(const ddph_services *s, void *state)
{
    ef_state *t = state;
    if (!t)
        return;
    free_buckets(s, t);
    free(t);
}

/* Two segments split on a chunk boundary when the bucket has at least two
 * chunks (so on a byte of the bits: chunk is a multiple of 8), else one. */
static void plan_segments(bucket_state *b, size_t numel, size_t chunk)
{
    size_t chunks = (numel + chunk - 1) / chunk;
    size_t first = chunks >= 2 ? chunks / 2 * chunk : numel;
    b->nseg = first < numel ? 2 : 1;
    for (int g = 0; g < b->nseg; g++) {
        segment *sg = &b->seg[g];
        sg->offset = g == 0 ? 0 : first;
        sg->numel = g == 0 ? first : numel - first;
        sg->chunks = (sg->numel + chunk - 1) / chunk;
        sg->bits_bytes = ((sg->numel + 7) / 8 + 3) / 4 * 4;
        sg->msg_bytes = sg->bits_bytes + 4 * sg->chunks;
    }
}

static ddph_status ef_on_layout(void *state, const ddph_layout *layout,
                                const ddph_services *s)
{
    ef_state *t = state;
    size_t world = (size_t)s->group_size(s->world);
    size_t nb = layout->nbuckets ? (size_t)layout->nbuckets : 1;
    free_buckets(s, t);
    t->buckets = calloc(nb, sizeof *t->buckets);
    t->errors = calloc(nb, sizeof *t->errors);
    t->numel = calloc(nb, sizeof *t->numel);
    if (!t->buckets || !t->errors || !t->numel)
        return DDPH_ERR_NOMEM;
    t->nbuckets = layout->nbuckets;
    int ok = 1;
    for (int i = 0; i < layout->nbuckets && ok; i++) {
        const ddph_bucket *lb = ddph_util_layout_bucket(layout, i);
        bucket_state *b = &t->buckets[i];
        size_t n = t->numel[i] = lb->numel;
        plan_segments(b, n, t->chunk);
        for (int g = 0; g < b->nseg; g++) {
            b->seg[g].send = ddph_util_alloc_zero(s, b->seg[g].msg_bytes, &ok);
            b->seg[g].recv =
                ddph_util_alloc_zero(s, world * b->seg[g].msg_bytes, &ok);
        }
        t->errors[i] = ddph_util_alloc_zero(s, n * sizeof(float), &ok);
        b->mine = ddph_util_alloc_zero(s, n * sizeof(float), &ok);
        if (lb->dtype != DDPH_F32)
            b->work = ddph_util_alloc_zero(s, n * sizeof(float), &ok);
    }
    if (!ok) {
        s->set_error(s, "%s: out of memory for the buckets' state", HOOK_NAME);
        return DDPH_ERR_NOMEM;
    }
    return DDPH_OK;
}

/* The scales of x[0..n): the mean |x| of each chunk, the last (shorter)
 * chunk divided by its own length. */
static ddph_status scales_of(const ddph_services *s, const float *x, size_t n,
                             size_t chunk, float *scales)
{
    size_t chunks = (n + chunk - 1) / chunk, last = n - (chunks - 1) * chunk;
    ddph_status st = s->chunk_abs_sum(s, x, n, chunk, scales);
    if (st == DDPH_OK && chunks > 1)
        st = s->divide(s, scales, DDPH_F32, chunks - 1, (double)chunk);
    if (st == DDPH_OK)
        st = s->divide(s, scales + chunks - 1, DDPH_F32, 1, (double)last);
    return st;
}

/* Compresses segment g of x into its message, decodes the message into
 * `mine` (before the collective starts: a send buffer in flight is not to
 * be read) and keeps x - mine as the new error. */
static ddph_status encode(const ddph_services *s, size_t chunk, segment *sg,
                          float *x, float *mine, float *error)
{
    float *sx = x + sg->offset, *sm = mine + sg->offset;
    float *scales = (float *)(void *)(sg->send + sg->bits_bytes);
    ddph_status st = scales_of(s, sx, sg->numel, chunk, scales);
    if (st == DDPH_OK)
        st = s->pack_signs(s, sx, sg->numel, sg->send);
    if (st == DDPH_OK)
        st = s->unpack_signs(s, sg->send, sg->numel, chunk, scales, 0.0f, sm);
    if (st == DDPH_OK)
        st = s->copy(s, error + sg->offset, sx, sg->numel * sizeof(float),
                     DDPH_COPY_DEVICE);
    if (st == DDPH_OK)
        st = s->axpy(s, sg->numel, -1.0f, sm, error + sg->offset);
    return st;
}

/* x over segment g = the sum of every rank's message, in rank order. */
static ddph_status decode(const ddph_services *s, size_t chunk,
                          const segment *sg, int world, float *x)
{
    ddph_status st = DDPH_OK;
    for (int r = 0; r < world && st == DDPH_OK; r++) {
        const unsigned char *m = sg->recv + (size_t)r * sg->msg_bytes;
        const float *scales = (const float *)(const void *)(m + sg->bits_bytes);
        st = s->unpack_signs(s, m, sg->numel, chunk, scales,
                             r == 0 ? 0.0f : 1.0f, x + sg->offset);
    }
    return st;
}

static ddph_status ef_on_bucket(void *state, const ddph_bucket *bk,
                                const ddph_services *s)
{
    ef_state *t = state;
    ddph_status st = ddph_util_check_bucket(s, HOOK_NAME, t->nbuckets,
                                            t->numel, bk);
    if (st != DDPH_OK || bk->numel == 0)
        return st;
    bucket_state *b = &t->buckets[bk->index];
    float *error = t->errors[bk->index], *x;
    int world = s->group_size(s->world);
    if ((st = ddph_util_f32_load(s, bk, b->work, &x)) != DDPH_OK)
        return st;
    st = s->axpy(s, bk->numel, 1.0f, error, x);
    /* Segment 0 goes on the wire while segment 1 is compressed. */
    ddph_request *req[2] = {NULL, NULL};
    for (int g = 0; g < b->nseg && st == DDPH_OK; g++) {
        segment *sg = &b->seg[g];
        st = encode(s, t->chunk, sg, x, b->mine, error);
        if (st == DDPH_OK)
            st = s->iallgather(s, s->world, sg->send, sg->recv, sg->msg_bytes,
                               DDPH_U8, &req[g]);
    }
    /* Segment 0 decoded while segment 1 travels; then segment 1.  A
     * request that was started is waited for even after an error. */
    for (int g = 0; g < b->nseg; g++) {
        if (!req[g])
            continue;
        ddph_status w = s->wait(s, req[g]);
        st = st != DDPH_OK ? st : w;
        if (st == DDPH_OK)
            st = decode(s, t->chunk, &b->seg[g], world, x);
    }
    if (st == DDPH_OK)
        st = s->divide(s, x, DDPH_F32, bk->numel, (double)world);
    if (st == DDPH_OK)
        st = ddph_util_f32_store(s, bk, x);
    return st;
}

/* The error buffers, so that a resumed job continues bit for bit. */
static ddph_status ef_save(void *state, const ddph_services *s,
                           ddph_write_fn write, void *sink)
{
    ef_state *t = state;
    return ddph_util_save_errors(s, write, sink, t->nbuckets, t->errors,
                                 t->numel);
}

static ddph_status ef_load(void *state, const ddph_services *s,
                           ddph_read_fn read, void *source)
{
    ef_state *t = state;
    return ddph_util_load_errors(s, read, source, t->nbuckets, t->errors,
                                 t->numel, HOOK_NAME);
}

static const ddph_plugin_api_v1 ef_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = HOOK_NAME,
    .version = "1.0.0",
    .description = "1-bit signs and a mean |x| per chunk with error "
                   "feedback (EF-SignSGD), decoded while the rest travels",
    .options = ef_options,
    .create = ef_create,
    .destroy = ef_destroy,
    .on_bucket = ef_on_bucket,
    .save = ef_save,
    .load = ef_load,
    .on_layout = ef_on_layout,
    .flags = DDPH_PLUGIN_ERROR_FEEDBACK,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    /* on_layout and the sign operations are not optional here. */
    return host_minor >= 4 ? &ef_plugin : NULL;
}
