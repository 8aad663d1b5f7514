/* ef_sign.c: a compact 1-bit hook with error feedback (signs and a mean
 * |x| per chunk, one blocking allgather), right (EF_SIGN_RIGHT) and wrong
 * in the ways a hook author gets it wrong, one per macro, for the tests of
 * ddphook-plugin-test:
 *
 *   EF_SIGN_DOUBLE     scales by 2x, memory consistent
 *   EF_SIGN_HALF       scales by 0.5x, memory consistent
 *   EF_SIGN_FLIPPED    decodes every sign the wrong way round
 *   EF_SIGN_STALE      never takes what it sent out of its memory
 *   EF_SIGN_NO_SAVE    declares error feedback, has no save/load
 *   EF_SIGN_UNDECLARED keeps its error memory, declares nothing and has
 *                      no save/load
 *   EF_SIGN_OWN_FIRST  each rank sums the messages starting with its own
 *                      (the same sum in another order: ranks drift)
 *   EF_SIGN_LEAK_LAST  leaks a buffer on the last rank only
 *   EF_SIGN_DROP_ODD   drops the last element of an odd-length bucket (a
 *                      1-element bucket is never sent)
 *   EF_SIGN_DITHER     declares error feedback and keeps none: random
 *                      rounding to +-(the chunk's max |x|), unbiased (the
 *                      claim without substance)
 *   EF_SIGN_POW2       divides by the largest power of two <= W (right on
 *                      1, 2 and 4 ranks only)
 *   EF_SIGN_LEAK_STEP  leaks 4 KiB every call, on every rank
 *   EF_SIGN_KEEP_PTR   keeps the bucket pointer past the call and writes
 *                      through it at the next call
 *   EF_SIGN_PAST_END   zeroes one float past the end of an f32 bucket
 *   EF_SIGN_LOAD_LEAK  load replaces each error buffer without freeing
 *                      the one it had
 *
 * Host buckets (f32, or a cast copy); state allocated at a bucket's first
 * call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

#define CHUNK 64
#define MAX_BUCKETS 64

#if defined(EF_SIGN_DOUBLE)
#define SCALE 2.0f
#elif defined(EF_SIGN_HALF)
#define SCALE 0.5f
#else
#define SCALE 1.0f
#endif

typedef struct ef_state {
    int nbuckets;
    float *errors[MAX_BUCKETS];
    size_t numel[MAX_BUCKETS];
    void *leaked;
    float *kept;       /* EF_SIGN_KEEP_PTR: the last call's bucket */
    uint64_t draws;    /* EF_SIGN_DITHER: the random stream's position */
} ef_state;

static ddph_status ef_create(const ddph_services *s, const ddph_options *o,
                             void **state)
{
    (void)o;
    ef_state *t = calloc(1, sizeof *t);
    if (!t)
        return DDPH_ERR_NOMEM;
#ifdef EF_SIGN_LEAK_LAST
    if (s->rank == s->world_size - 1)
        t->leaked = malloc(4096);
#else
    (void)s;
#endif
    *state = t;
    return DDPH_OK;
}

static void ef_destroy(const ddph_services *s, void *state)
{
    ef_state *t = state;
    (void)s;
    if (!t)
        return;
    for (int i = 0; i < t->nbuckets; i++)
        free(t->errors[i]);
#ifndef EF_SIGN_LEAK_LAST
    free(t->leaked);
#endif
    free(t);
}

/* Bytes of one rank's message: the bits, padded to 4, then the scales. */
static size_t bits_bytes(size_t n) { return ((n + 7) / 8 + 3) / 4 * 4; }
static size_t msg_bytes(size_t n)
{
    return bits_bytes(n) + 4 * ((n + CHUNK - 1) / CHUNK);
}

#ifdef EF_SIGN_DITHER
/* Each element replaced by +-(its chunk's max |x|), + with the probability
 * that makes the mean x: unbiased, and noisy. */
static void dither(ef_state *t, int rank, float *x, size_t n)
{
    for (size_t c = 0; c < n; c += CHUNK) {
        size_t len = n - c < CHUNK ? n - c : CHUNK;
        float m = 0.0f;
        for (size_t k = 0; k < len; k++)
            m = fabsf(x[c + k]) > m ? fabsf(x[c + k]) : m;
        for (size_t k = 0; k < len && m > 0; k++) {
            /* splitmix64: a stream of its own on each rank */
            uint64_t z = ++t->draws * 0x9e3779b97f4a7c15u +
                         (uint64_t)rank * 0xd1b54a32d192ed03u;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
            z ^= z >> 31;
            double u = (double)(z >> 11) / 9007199254740992.0;
            x[c + k] = u < 0.5 * (1.0 + x[c + k] / m) ? m : -m;
        }
    }
}
#endif

static ddph_status ef_on_bucket(void *state, const ddph_bucket *b,
                                const ddph_services *s)
{
    ef_state *t = state;
    if (b->device != DDPH_CPU || b->index >= MAX_BUCKETS) {
        s->set_error(s, "ef_sign: host buckets only, at most %d",
                     MAX_BUCKETS);
        return DDPH_ERR_INVALID;
    }
    size_t n = b->numel, nc = (n + CHUNK - 1) / CHUNK;
    int world = s->world_size, i = b->index;
    while (t->nbuckets <= i) {
        t->numel[t->nbuckets] = 0;
        t->errors[t->nbuckets++] = NULL;
    }
    if (!t->errors[i]) {
        t->errors[i] = calloc(n ? n : 1, sizeof(float));
        t->numel[i] = n;
        if (!t->errors[i])
            return DDPH_ERR_NOMEM;
    }
    float *e = t->errors[i], *x = NULL;
    float *work = b->dtype == DDPH_F32 ? NULL : malloc((n ? n : 1) * 4);
    if (b->dtype != DDPH_F32 && !work)
        return DDPH_ERR_NOMEM;
    ddph_status loaded = ddph_util_f32_load(s, b, work, &x);
    size_t mb = msg_bytes(n);
    unsigned char *msg = malloc(mb ? mb : 1);
    unsigned char *all = malloc(mb * (size_t)world + 1);
    float *mine = malloc((n ? n : 1) * sizeof *mine);
    ddph_status st = !msg || !all || !mine ? DDPH_ERR_NOMEM : loaded;
    float *scales = (float *)(void *)(msg + bits_bytes(n));
#ifdef EF_SIGN_KEEP_PTR
    if (t->kept)
        t->kept[0] = -t->kept[0]; /* a buffer handed back long ago */
    t->kept = b->dtype == DDPH_F32 ? b->buffer : NULL;
#endif
#ifdef EF_SIGN_LEAK_STEP
    void *leak = malloc(4096);
    if (leak)
        memset(leak, 1, 4096); /* (and the pointer dropped) */
#endif
    if (st == DDPH_OK) {
        for (size_t k = 0; k < n; k++)
            x[k] += e[k];
#ifdef EF_SIGN_DITHER
        dither(t, s->rank, x, n);
#endif
        s->chunk_abs_sum(s, x, n, CHUNK, scales);
        for (size_t c = 0; c < nc; c++) {
            size_t len = n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK;
            scales[c] = SCALE * scales[c] / (float)len;
        }
        s->pack_signs(s, x, n, msg);
        s->unpack_signs(s, msg, n, CHUNK, scales, 0.0f, mine);
#if defined(EF_SIGN_DITHER)
        memset(e, 0, n * sizeof *e); /* the claim, and nothing kept */
#elif !defined(EF_SIGN_STALE)
        for (size_t k = 0; k < n; k++)
            e[k] = x[k] - mine[k];
#else
        for (size_t k = 0; k < n; k++)
            e[k] = x[k];
#endif
        st = s->allgather(s, s->world, msg, all, mb, DDPH_U8);
    }
    for (int j = 0; st == DDPH_OK && j < world; j++) {
#ifdef EF_SIGN_OWN_FIRST
        int r = (s->rank + j) % world;
#else
        int r = j;
#endif
        const unsigned char *m = all + (size_t)r * mb;
        const float *sc = (const float *)(const void *)(m + bits_bytes(n));
#ifdef EF_SIGN_FLIPPED
        float *neg = mine;
        for (size_t c = 0; c < nc; c++)
            neg[c] = -sc[c];
        sc = neg;
#endif
        st = s->unpack_signs(s, m, n, CHUNK, sc, j == 0 ? 0.0f : 1.0f, x);
    }
#ifdef EF_SIGN_DROP_ODD
    if (n % 2 == 1) {
        x[n - 1] = 0.0f; /* never sent, never remembered */
        e[n - 1] = 0.0f;
    }
#endif
#ifdef EF_SIGN_POW2
    int divisor = 1;
    while (divisor * 2 <= world)
        divisor *= 2;
#else
    int divisor = world;
#endif
    if (st == DDPH_OK)
        st = s->divide(s, x, DDPH_F32, n, (double)divisor);
    if (st == DDPH_OK)
        st = ddph_util_f32_store(s, b, x);
#ifdef EF_SIGN_PAST_END
    if (st == DDPH_OK && b->dtype == DDPH_F32)
        ((float *)b->buffer)[n] = 0.0f; /* one past the last element */
#endif
    free(work);
    free(msg);
    free(all);
    free(mine);
    return st;
}

#if !defined(EF_SIGN_NO_SAVE) && !defined(EF_SIGN_UNDECLARED)
#define EF_SIGN_SAVES 1
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
    /* A fresh instance has no buckets yet: take the saved layout's. */
    int32_t nb = 0;
    ddph_status st = read(source, &nb, sizeof nb);
    for (int i = 0; st == DDPH_OK && i < nb && i < MAX_BUCKETS; i++) {
        uint64_t count = 0;
        st = read(source, &count, sizeof count);
        if (st == DDPH_OK && count > (1u << 28))
            st = DDPH_ERR_STATE;
#ifndef EF_SIGN_LOAD_LEAK
        free(t->errors[i]);
#endif
        t->errors[i] = calloc(count ? count : 1, sizeof(float));
        t->numel[i] = count;
        if (st == DDPH_OK && !t->errors[i])
            st = DDPH_ERR_NOMEM;
        if (st == DDPH_OK)
            st = read(source, t->errors[i], count * sizeof(float));
        t->nbuckets = i + 1;
    }
    return st;
}

#endif

static const ddph_plugin_api_v1 ef_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "ef_sign",
    .version = "0.0.1",
    .description = "1-bit signs and a mean |x| per chunk, error feedback "
                   "(a test plugin, right or wrong on purpose)",
    .create = ef_create,
    .destroy = ef_destroy,
    .on_bucket = ef_on_bucket,
#ifdef EF_SIGN_SAVES
    .save = ef_save,
    .load = ef_load,
#endif
#ifndef EF_SIGN_UNDECLARED
    .flags = DDPH_PLUGIN_ERROR_FEEDBACK,
#endif
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    return host_minor >= 4 ? &ef_plugin : NULL;
}
