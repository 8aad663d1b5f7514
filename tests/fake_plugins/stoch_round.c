/* stoch_round.c: a compact 4-bit stochastic-rounding hook without error
 * memory (QSGD's idea in its own loop: a scale per chunk, levels -7..7,
 * one allgather), wrong in ways that keep every step within its declared
 * tolerance but do not cancel over steps, for the tests of
 * ddphook-plugin-test's training row (tests/sdk.sh):
 *
 *   STOCH_ROUND_TRUNC  rounds with a cast, (int)(v + u), which truncates
 *                      toward zero: every negative value is rounded up by
 *                      one level on average (each step stays within 0.3
 *                      of the largest |average|)
 *
 * Without it, it rounds with floorf, each step's draws its own: right
 * (unbiased).  Host f32 buckets, or a cast copy. */
#include <math.h>
#include <stdlib.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

#define CHUNK 64
#define LEVELS 7

static ddph_status sr_create(const ddph_services *s, const ddph_options *o,
                             void **state)
{
    (void)s, (void)o;
    *state = NULL;
    return DDPH_OK;
}

static void sr_destroy(const ddph_services *s, void *state)
{
    (void)s, (void)state;
}

/* A uniform draw in [0, 1) for element i (splitmix64 of seed and i). */
static float draw(uint64_t seed, size_t i)
{
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / 16777216.0);
}

static ddph_status sr_on_bucket(void *state, const ddph_bucket *b,
                                const ddph_services *s)
{
    (void)state;
    size_t n = b->numel, nc = (n + CHUNK - 1) / CHUNK;
    int world = s->world_size;
    if (n == 0)
        return DDPH_OK;
    /* One rank's message: n levels, then nc scales (one step of a level). */
    size_t mb = (n + 3) / 4 * 4 + 4 * nc;
    float *work = b->dtype == DDPH_F32 ? NULL : malloc(n * sizeof *work);
    unsigned char *msg = calloc(mb, 1), *all = malloc(mb * (size_t)world);
    float *x = NULL;
    ddph_status st = !msg || !all || (b->dtype != DDPH_F32 && !work)
                         ? DDPH_ERR_NOMEM
                         : ddph_util_f32_load(s, b, work, &x);
    uint64_t seed = (b->iteration * 1000003u + (uint64_t)b->index) * 1000003u +
                    (uint64_t)s->rank;
    float *scales = (float *)(void *)(msg + (n + 3) / 4 * 4);
    for (size_t c = 0; st == DDPH_OK && c < nc; c++) {
        float m = 0.0f;
        for (size_t i = c * CHUNK; i < n && i < (c + 1) * CHUNK; i++)
            m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
        scales[c] = m / LEVELS;
    }
    for (size_t i = 0; st == DDPH_OK && i < n; i++) {
        float step = scales[i / CHUNK];
        float v = step > 0 ? x[i] / step : 0.0f;
#ifdef STOCH_ROUND_TRUNC
        int q = (int)(v + draw(seed, i));
#else
        int q = (int)floorf(v + draw(seed, i));
#endif
        q = q > LEVELS ? LEVELS : q < -LEVELS ? -LEVELS : q;
        msg[i] = (unsigned char)(int8_t)q;
    }
    if (st == DDPH_OK)
        st = s->allgather(s, s->world, msg, all, mb, DDPH_U8);
    for (size_t i = 0; st == DDPH_OK && i < n; i++) {
        float sum = 0.0f;
        for (int r = 0; r < world; r++) {
            const unsigned char *m = all + (size_t)r * mb;
            const float *sc = (const float *)(const void *)(m + (n + 3) / 4 * 4);
            sum += (float)(int8_t)m[i] * sc[i / CHUNK];
        }
        x[i] = sum / (float)world;
    }
    if (st == DDPH_OK)
        st = ddph_util_f32_store(s, b, x);
    free(work);
    free(msg);
    free(all);
    return st;
}

static const ddph_plugin_api_v1 sr_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "stoch_round",
    .version = "0.0.1",
    .description = "4-bit stochastic rounding, no error memory (a test "
                   "plugin, right or wrong on purpose)",
    .create = sr_create,
    .destroy = sr_destroy,
    .on_bucket = sr_on_bucket,
    .tolerance = 0.35,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &sr_plugin;
}
