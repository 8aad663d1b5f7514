/* qsgd.c: QSGD-style stochastic quantization (Alistarh et al., 2017) on
 * the services of ABI minor 6, no loop of its own over the gradient.
 *
 * Each rank scales every chunk of its bucket by its largest |x| over
 * `levels` (7 levels a side in 4 bits, 1 in 2 bits: TernGrad), rounds
 * each element at random to a level above or below it, up with the
 * probability that makes the expected value x (unbiased: no error
 * memory is needed, and none is kept), packs the levels into `bits`
 * bits and sends them with the chunks' scales in one allgather.  Every
 * rank then decodes every rank's message in rank order into the bucket
 * and divides by W, so the ranks hold the same bits.  The draws come from
 * a seed made of the `seed` option, the step, the bucket and the rank:
 * the same on a rerun and after a resume, different between ranks so
 * that their rounding errors average out.
 *
 * Host buckets: on CUDA buckets this build's quantizing services are not
 * available, and the hook says so at create (docs/plugin-guide.md, "GPU
 * buckets"). */
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

#ifndef HOOK_NAME
#define HOOK_NAME "qsgd"
#endif

typedef struct qsgd_state {
    int bits, levels;
    size_t chunk;
    uint64_t seed;
} qsgd_state;

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
    (void)s;
    free(state);
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
    /* One rank's message: the codes, padded to 4 bytes, then the scales;
     * a multiple of 4 bytes, so every rank's scales are aligned. */
    size_t codes = ((n * (size_t)t->bits + 7) / 8 + 3) / 4 * 4;
    size_t mb = codes + 4 * nc, world = (size_t)s->world_size;
    float *work = b->dtype == DDPH_F32 ? NULL : malloc((n ? n : 1) * 4);
    unsigned char *msg = malloc(mb ? mb : 4);
    unsigned char *all = malloc(mb * world + 4);
    int8_t *q = malloc(n ? n : 1);
    float *x = NULL;
    ddph_status st = DDPH_ERR_NOMEM;
    if (msg && all && q && (work || b->dtype == DDPH_F32))
        st = ddph_util_f32_load(s, b, work, &x);
    float *scales = (float *)(void *)(msg + codes);
    if (st == DDPH_OK && n > 0) {
        memset(msg, 0, codes);
        st = s->chunk_abs_max(s, x, n, t->chunk, scales);
        if (st == DDPH_OK)
            st = s->divide(s, scales, DDPH_F32, nc, (double)t->levels);
        if (st == DDPH_OK)
            st = s->round_stochastic(s, x, n, t->chunk, scales, t->levels,
                                     draw_seed(t, b, s->rank), q);
        if (st == DDPH_OK)
            st = s->pack_bits(s, q, n, t->bits, msg);
        if (st == DDPH_OK)
            st = s->allgather(s, s->world, msg, all, mb, DDPH_U8);
        /* Rank order on every rank: the same sum, the same bits. */
        for (size_t r = 0; st == DDPH_OK && r < world; r++)
            st = s->unpack_bits(s, all + r * mb, n, t->bits, t->chunk,
                                (const float *)(const void *)(all + r * mb +
                                                              codes),
                                r == 0 ? 0.0f : 1.0f, x);
        if (st == DDPH_OK)
            st = s->divide(s, x, DDPH_F32, n, (double)world);
        if (st == DDPH_OK)
            st = ddph_util_f32_store(s, b, x);
    }
    free(work);
    free(msg);
    free(all);
    free(q);
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
    /* Each rank's levels are within one step (its chunk's max |x| / 7) of
     * x, at random: relative to the largest |average| that is up to
     * about 1/7 of a chunk's max over it, more at 2 bits (--rtol). */
    .tolerance = 0.35,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    return host_minor >= 6 ? &qsgd_plugin : NULL;
}
