/* qsgd.c: QSGD-style stochastic quantization (Alistarh et al., 2017) on
 * the services of ABI minor 6, no loop of its own over the gradient.
 *
 * Each rank scales every chunk of its bucket by its largest |x| over
 * `levels` (7 levels a side in 4 bits, 1 in 2 bits: TernGrad), rounds
 * each element at random to a level above or below it, up with the
 * probability that makes the expected value x (unbiased: no error
 * memory is needed, and none is kept), packs the levels into `bits`
 * bits and sends them with the chunks' scales in one allgather.  The
 * scales it sends are already divided by W, so every rank decodes every
 * rank's message in rank order straight into the bucket (the first one
 * written, the others added) and holds the average: the same bits on
 * every rank, with no pass of its own over the gradient.  The draws come
 * from a seed made of the `seed` option, the step, the bucket and the
 * rank: the same on a rerun and after a resume, different between ranks
 * so that their rounding errors average out.
 *
 * The buffers (the levels, this rank's message, everyone's) are sized
 * at on_layout for the largest bucket and kept: a step allocates nothing.
 *
 * Host and CUDA buckets alike: its buffers come from the services'
 * alloc, on the bucket's device, and only the services touch them.  A
 * host without the quantizing services on the bucket's device is told
 * at create (docs/plugin-guide.md, "GPU buckets"). */
#include <stdlib.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

#ifndef HOOK_NAME
#define HOOK_NAME "qsgd"
#endif

typedef struct qsgd_state {
    int bits, levels;
    size_t chunk;
    uint64_t seed;
    /* Kept from step to step, for buckets of up to `capacity` elements. */
    size_t capacity;
    int8_t *q;           /* the levels */
    unsigned char *msg;  /* this rank's message */
    unsigned char *all;  /* every rank's, rank order */
    float *work;         /* an f32 copy of a bucket of another dtype */
} qsgd_state;

/* One rank's message for n elements: the codes, padded to 4 bytes, then
 * the chunks' scales; a multiple of 4 bytes, so every rank's scales in
 * the gathered buffer are aligned. */
static size_t codes_bytes(const qsgd_state *t, size_t n)
{
    return ((n * (size_t)t->bits + 7) / 8 + 3) / 4 * 4;
}

static size_t message_bytes(const qsgd_state *t, size_t n)
{
    return codes_bytes(t, n) + 4 * ((n + t->chunk - 1) / t->chunk);
}

static void free_buffers(qsgd_state *t, const ddph_services *s)
{
    s->free(s, t->q);
    s->free(s, t->msg);
    s->free(s, t->all);
    s->free(s, t->work);
    t->q = NULL;
    t->msg = t->all = NULL;
    t->work = NULL;
    t->capacity = 0;
}

/* Room for a bucket of n elements (and its f32 copy when its dtype is
 * not f32), grown only when a bucket is larger than any before: on_layout
 * sizes it once for the largest. */
static ddph_status reserve(qsgd_state *t, const ddph_services *s, size_t n,
                           size_t world, int f32_copy)
{
    n = n ? n : 1;
    if (n > t->capacity) {
        f32_copy |= t->work != NULL;
        free_buffers(t, s);
        size_t mb = message_bytes(t, n);
        t->q = s->alloc(s, n);
        t->msg = s->alloc(s, mb);
        t->all = s->alloc(s, mb * world);
        if (!t->q || !t->msg || !t->all) {
            free_buffers(t, s);
            return DDPH_ERR_NOMEM;
        }
        t->capacity = n;
    }
    if (f32_copy && !t->work) {
        t->work = s->alloc(s, t->capacity * sizeof(float));
        if (!t->work)
            return DDPH_ERR_NOMEM;
    }
    return DDPH_OK;
}

static const ddph_option_spec qsgd_options[] = {
    {"bits", DDPH_OPT_INT, "4", 2, 4,
     "bits per element: 4 (levels -7..7) or 2 (-1, 0, 1)"},
    {"chunk", DDPH_OPT_INT, "512", 1, 1 << 24, "elements per scale"},
    {"seed", DDPH_OPT_INT, "0", 0, 2147483647.0,
     "the draws' seed, mixed with the step, bucket and rank"},
    {0},
};

static ddph_status qsgd_create(const ddph_services *s, const ddph_options *o,
                               void **state)
{
    if (!DDPH_HAS_MEMBER(s, ddph_services, unpack_bits)) {
        s->set_error(s, HOOK_NAME ": needs a host of plugin ABI 1.6 or "
                        "later (round_stochastic, pack_bits, unpack_bits)");
        return DDPH_ERR_UNSUPPORTED;
    }
    int bits = (int)s->opt_int(o, "bits");
    if (bits != 2 && bits != 4) {
        s->set_error(s, HOOK_NAME ": bits = %d, must be 2 or 4", bits);
        return DDPH_ERR_INVALID;
    }
    /* Asked with nothing to do: refused where the device lacks it. */
    float none = 1.0f;
    ddph_status can = s->round_stochastic(s, &none, 0, 1, &none, 1, 0, NULL);
    if (can != DDPH_OK) {
        s->set_error(s, HOOK_NAME ": stochastic rounding is not available "
                        "on this device (%s buckets); use fp16 or int8 there",
                     s->device == DDPH_CUDA ? "CUDA" : "these");
        return can;
    }
    qsgd_state *t = calloc(1, sizeof *t);
    if (!t)
        return DDPH_ERR_NOMEM;
    t->bits = bits;
    t->levels = bits == 4 ? 7 : 1;
    t->chunk = (size_t)s->opt_int(o, "chunk");
    t->seed = (uint64_t)s->opt_int(o, "seed");
    *state = t;
    return DDPH_OK;
}

static void qsgd_destroy(const ddph_services *s, void *state)
{
    free_buffers(state, s);
    free(state);
}

static ddph_status qsgd_on_layout(void *state, const ddph_layout *layout,
                                  const ddph_services *s)
{
    size_t largest = 0;
    int f32_copy = 0;
    for (int i = 0; i < layout->nbuckets; i++) {
        const ddph_bucket *b = ddph_util_layout_bucket(layout, i);
        largest = b->numel > largest ? b->numel : largest;
        f32_copy |= b->dtype != DDPH_F32;
    }
    return reserve(state, s, largest, (size_t)s->world_size, f32_copy);
}

/* splitmix64's finalizer: one 64-bit seed from the step, bucket and rank. */
static uint64_t draw_seed(const qsgd_state *t, const ddph_bucket *b, int rank)
{
    uint64_t z = t->seed + b->iteration * 0x9e3779b97f4a7c15u +
                 (uint64_t)b->index * 0xbf58476d1ce4e5b9u +
                 (uint64_t)rank * 0x94d049bb133111ebu;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static ddph_status qsgd_on_bucket(void *state, const ddph_bucket *b,
                                  const ddph_services *s)
{
    qsgd_state *t = state;
    size_t n = b->numel, nc = (n + t->chunk - 1) / t->chunk;
    size_t codes = codes_bytes(t, n), mb = message_bytes(t, n);
    size_t world = (size_t)s->world_size;
    if (n == 0)
        return DDPH_OK;
    /* A no-op after on_layout. */
    ddph_status st = reserve(t, s, n, world, b->dtype != DDPH_F32);
    float *x = NULL;
    if (st == DDPH_OK)
        st = ddph_util_f32_load(s, b, t->work, &x);
    if (st != DDPH_OK)
        return st;
    /* The padding after the codes, so that every rank sends the same
     * (the buffers are on the bucket's device: services, not memset). */
    size_t packed = (n * (size_t)t->bits + 7) / 8;
    st = s->zero(s, t->msg + packed, codes - packed);
    float *scales = (float *)(void *)(t->msg + codes);
    if (st == DDPH_OK)
        st = s->chunk_abs_max(s, x, n, t->chunk, scales);
    if (st == DDPH_OK)
        st = s->divide(s, scales, DDPH_F32, nc, (double)t->levels);
    if (st == DDPH_OK)
        st = s->round_stochastic(s, x, n, t->chunk, scales, t->levels,
                                 draw_seed(t, b, s->rank), t->q);
    if (st == DDPH_OK)
        st = s->pack_bits(s, t->q, n, t->bits, t->msg);
    /* The decoding scales: one level's step over W (nc numbers, where
     * dividing the sum would be a pass over n). */
    if (st == DDPH_OK)
        st = s->divide(s, scales, DDPH_F32, nc, (double)world);
    if (st == DDPH_OK)
        st = s->allgather(s, s->world, t->msg, t->all, mb, DDPH_U8);
    /* Every rank's message summed in rank order, in one pass over the
     * bucket: the same sum, the same bits on every rank. */
    if (st == DDPH_OK)
        st = s->unpack_bits(s, t->all, n, t->bits, t->chunk,
                            (const float *)(const void *)(t->all + codes),
                            (int)world, mb, 0.0f, x);
    if (st == DDPH_OK)
        st = ddph_util_f32_store(s, b, x);
    return st;
}

static const ddph_plugin_api_v1 qsgd_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = HOOK_NAME,
    .version = "1.0.0",
    .description = "QSGD: stochastic rounding to 4 (or 2) bits with a "
                   "scale per chunk, unbiased, no error memory",
    .options = qsgd_options,
    .create = qsgd_create,
    .destroy = qsgd_destroy,
    .on_bucket = qsgd_on_bucket,
    .on_layout = qsgd_on_layout,
    /* Each rank's levels are within one step (its chunk's max |x| / 7) of
     * x, at random: relative to the largest |average| that is up to
     * about 1/7 of a chunk's max over it, more at 2 bits (--rtol). */
    .tolerance = 0.35,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    return host_minor >= 6 ? &qsgd_plugin : NULL;
}
