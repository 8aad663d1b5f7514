/* unit_quant_ops.c: stochastic rounding and 2/4-bit codes (ABI minor 6,
 * device/quant_ops.h): each path against the element definitions written
 * out again here, bit for bit (codes go from rank to rank), rounding
 * unbiased and its draws fixed by the seed alone, codes that come back
 * unchanged; and the services' checks in front of them. */
#include "build-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_ops.h"
#include "device/quant_ops.h"
#include "plugin/services.h"
#include "fake_comm.h"
#include "unit.h"

/* The definitions, one element at a time, as plugin.h states them: the
 * draw is one round of Wellons' lowbias32 of i * phi + key, the key the
 * same hash of the seed's halves. */
static uint32_t ref_lowbias32(uint32_t x)
{
    x = (x ^ (x >> 16)) * 0x7feb352du;
    x = (x ^ (x >> 15)) * 0x846ca68bu;
    return x ^ (x >> 16);
}

static float ref_uniform(uint64_t seed, uint32_t i)
{
    uint32_t key = ref_lowbias32((uint32_t)seed ^
                                 ref_lowbias32((uint32_t)(seed >> 32) +
                                               0x9E3779B9u));
    return (float)(ref_lowbias32(i * 0x9E3779B9u + key) >> 8) / 16777216.0f;
}

static int8_t ref_round(float x, float scale, int levels, uint64_t seed,
                        uint32_t i)
{
    if (!(scale > 0 && scale <= 3.4028235e38f))
        return 0;
    float inv = 1.0f / scale;
    float v = x * inv;
    if (v != v)
        return 0;
    float lo = floorf(v);
    float r = lo + (ref_uniform(seed, i) < v - lo ? 1.0f : 0.0f);
    if (r > (float)levels)
        r = (float)levels;
    if (r < -(float)levels)
        r = -(float)levels;
    return (int8_t)r;
}

static float ref_unpack(const uint8_t *p, size_t i, int bits, float scale,
                        float beta, float y)
{
    size_t bit = i * (size_t)bits;
    int code = (p[bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
    if (code >= 1 << (bits - 1))
        code -= 1 << bits;
    float d = (float)code * scale;
    return beta == 0.0f ? d : beta * y + d;
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* Inputs with every kind of value: ordinary, exact multiples of the
 * scale, NaN, infinities, far out of range; and scales with 0, NaN and a
 * negative one among them. */
static void fill(float *x, size_t n, float *scales, size_t nc, uint32_t *s)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t r = lcg(s);
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 16.0f;
        if (r % 37 == 0)
            x[i] = NAN;
        else if (r % 41 == 0)
            x[i] = r & 1 ? INFINITY : -INFINITY;
        else if (r % 43 == 0)
            x[i] = (float)(int)(r % 7) - 3.0f; /* exact */
        else if (r % 47 == 0)
            x[i] = 1e30f;
    }
    for (size_t j = 0; j < nc; j++) {
        scales[j] = 0.25f + (float)(lcg(s) % 100) / 50.0f;
        if (j % 11 == 5)
            scales[j] = 0.0f;
        if (j % 13 == 7)
            scales[j] = j % 2 ? NAN : -1.0f;
    }
}

START_TEST(rounding_matches_the_definition_on_every_path)
{
    static const size_t sizes[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 100, 1031};
    static const size_t chunks[] = {1, 3, 8, 13, 64, 5000};
    static const int levels[] = {1, 7, 127};
    uint32_t st = 12345;
    size_t most = 1031;
    float *x = malloc(most * sizeof *x), *scales = malloc(most * sizeof *x);
    int8_t *got = malloc(most), *want = malloc(most);
    int paths = 0;
    for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
        if (!ddph__simd_available((ddph_simd_path)p))
            continue;
        paths++;
        for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
                for (size_t l = 0; l < 3; l++) {
                    size_t n = sizes[a], chunk = chunks[c];
                    size_t nc = (n + chunk - 1) / chunk;
                    fill(x, n, scales, nc, &st);
                    uint64_t seed = (uint64_t)lcg(&st) << 32 | lcg(&st);
                    ddph__cpu_round_stochastic((ddph_simd_path)p, x, n, chunk,
                                               scales, levels[l], seed, got);
                    for (size_t i = 0; i < n; i++)
                        want[i] = ref_round(x[i], scales[i / chunk],
                                            levels[l], seed, (uint32_t)i);
                    ck_assert_msg(memcmp(got, want, n) == 0,
                                  "%s path: n %zu chunk %zu levels %d differ",
                                  ddph__simd_name((ddph_simd_path)p), n, chunk,
                                  levels[l]);
                }
    }
    ck_assert_int_ge(paths, 1);
    /* Edge values, by hand: NaN 0, infinities and far values clamped, a
     * chunk of scale 0 zeros, exact multiples exact whatever the draw. */
    const float e[] = {NAN, INFINITY, -INFINITY, 1e30f, 3.0f, -2.0f, 5.0f, 1.0f};
    const float es[] = {1.0f, 1.0f, 0.0f, 1.0f};
    int8_t q[8];
    ddph__cpu_round_stochastic(ddph__simd_best(), e, 8, 2, es, 7, 99, q);
    ck_assert_int_eq(q[0], 0);
    ck_assert_int_eq(q[1], 7);
    ck_assert_int_eq(q[2], -7);
    ck_assert_int_eq(q[3], 7);
    ck_assert_int_eq(q[4], 0); /* scale 0 */
    ck_assert_int_eq(q[5], 0);
    ck_assert_int_eq(q[6], 5);
    ck_assert_int_eq(q[7], 1);
    free(x);
    free(scales);
    free(got);
    free(want);
}
END_TEST

START_TEST(rounding_is_unbiased_and_fixed_by_its_seed)
{
    enum { N = 200000 };
    float *x = malloc(N * sizeof *x);
    int8_t *q = malloc(N), *again = malloc(N), *other = malloc(N);
    for (size_t i = 0; i < N; i++)
        x[i] = i % 2 ? 0.3f : -1.7f;
    const float scale = 1.0f;
    ddph__cpu_round_stochastic(ddph__simd_best(), x, N, N, &scale, 7, 42, q);
    ddph__cpu_round_stochastic(DDPH_SIMD_SCALAR, x, N, N, &scale, 7, 42, again);
    ddph__cpu_round_stochastic(ddph__simd_best(), x, N, N, &scale, 7, 43, other);
    double odd = 0, even = 0;
    size_t differ = 0;
    for (size_t i = 0; i < N; i++) {
        ck_assert(i % 2 ? q[i] == 0 || q[i] == 1 : q[i] == -2 || q[i] == -1);
        *(i % 2 ? &odd : &even) += q[i];
        differ += q[i] != other[i];
    }
    /* Mean within 5 standard errors (sqrt(0.21 / 100000) = 0.0015). */
    ck_assert_msg(fabs(odd / (N / 2) - 0.3) < 0.0075, "mean %g", odd / (N / 2));
    ck_assert_msg(fabs(even / (N / 2) + 1.7) < 0.0075, "mean %g",
                  even / (N / 2));
    ck_assert(memcmp(q, again, N) == 0);
    /* Another seed, other draws: about 2 p (1 - p) of them differ. */
    ck_assert_msg(differ > N / 3 && differ < N / 2, "%zu differ", differ);
    /* The seed's high half counts too. */
    ddph__cpu_round_stochastic(ddph__simd_best(), x, N, N, &scale, 7,
                               42 | (uint64_t)1 << 40, other);
    ck_assert(memcmp(q, other, N) != 0);
    free(x);
    free(q);
    free(again);
    free(other);
}
END_TEST

/* Where a draw and a fraction meet: fractions equal to element i's own
 * draw u (it rounds down: u < frac is false), one step of 2^-24 above (up)
 * and below (down), in [0, 1) and in [-1, 0), levels among them, at
 * every offset of the vector lanes.  Random inputs meet there once in
 * 2^24 elements; the vector paths' integer form must agree here too.
 * Also x - 1 + 2^-25 and + 2^-26 in (-0.5, 0): there the definition's
 * fraction x - floor(x) = x + 1 is rounded to f32 (2^-24 apart), half or
 * a quarter of a step down onto u, so it rounds down where the exact
 * fraction would round up. */
START_TEST(rounding_is_exact_where_the_draw_meets_the_fraction)
{
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x);
    int8_t *got = malloc(N), *want = malloc(N);
    const float scale = 1.0f;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        for (size_t i = 0; i < N; i++) {
            float u = ref_uniform(seed, (uint32_t)i);
            static const float steps[] = {0.0f, 0x1p-24f, -0x1p-24f,
                                          0x1p-25f, 0x1p-26f};
            float step = steps[(i / 2) % 5];
            float frac = u + step;
            if (frac < 0.0f || frac >= 1.0f)
                frac = u;
            /* u - 1 is exact, and so is a step below 2^-24 added to it
             * while it is above -0.5 */
            x[i] = i % 2 ? frac : (u - 1.0f) + (u + step < 1.0f ? step : 0.0f);
        }
        for (size_t i = 0; i < N; i++)
            want[i] = ref_round(x[i], scale, 7, seed, (uint32_t)i);
        for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
            if (!ddph__simd_available((ddph_simd_path)p))
                continue;
            ddph__cpu_round_stochastic((ddph_simd_path)p, x, N, N, &scale, 7,
                                       seed, got);
            for (size_t i = 0; i < N; i++)
                ck_assert_msg(got[i] == want[i],
                              "%s: seed %d element %zu (x %a) is %d, not %d",
                              ddph__simd_name((ddph_simd_path)p), (int)seed, i,
                              (double)x[i], got[i], want[i]);
        }
    }
    free(x);
    free(got);
    free(want);
}
END_TEST

START_TEST(codes_pack_and_unpack_on_every_path)
{
    static const size_t sizes[] = {0, 1, 3, 4, 5, 8, 9, 17, 31, 32, 33, 257};
    static const size_t chunks[] = {1, 3, 5, 8, 64, 1000};
    uint32_t st = 777;
    int8_t q[257];
    uint8_t packed[130];
    float scales[257], y0[257], got[257], want[257];
    for (int bits = 2; bits <= 4; bits += 2) {
        int lo = -(1 << (bits - 1)), span = 1 << bits;
        for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++) {
            size_t n = sizes[a], bytes = (n * (size_t)bits + 7) / 8;
            for (size_t i = 0; i < n; i++)
                q[i] = (int8_t)(lo + (int)(lcg(&st) % (unsigned)span));
            memset(packed, 0xAB, sizeof packed);
            ddph__cpu_pack_bits(q, n, bits, packed);
            ck_assert_uint_eq(packed[bytes], 0xAB); /* no byte past the end */
            if (n * (size_t)bits % 8) /* the last byte's unused bits 0 */
                ck_assert_uint_eq(packed[bytes - 1] >> (n * (size_t)bits % 8), 0);
            for (size_t i = 0; i < n; i++) {
                float back = ref_unpack(packed, i, bits, 1.0f, 0.0f, 0.0f);
                ck_assert_msg(back == q[i], "bits %d n %zu: %zu is %g, not %d",
                              bits, n, i, (double)back, q[i]);
            }
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
                for (int b = 0; b < 2; b++) {
                    float beta = b ? 0.5f : 0.0f;
                    size_t chunk = chunks[c];
                    for (size_t j = 0; j < n; j++) {
                        scales[j] = (float)(lcg(&st) % 1000) / 77.0f;
                        y0[j] = (float)(lcg(&st) % 1000) / 13.0f;
                    }
                    for (size_t i = 0; i < n; i++)
                        want[i] = ref_unpack(packed, i, bits,
                                             scales[i / chunk], beta, y0[i]);
                    for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
                        if (!ddph__simd_available((ddph_simd_path)p))
                            continue;
                        memcpy(got, y0, sizeof got);
                        ddph__cpu_unpack_bits((ddph_simd_path)p, packed, n,
                                              bits, chunk, scales, 1, 0, beta,
                                              got);
                        ck_assert_msg(same_bits(got, want, n),
                                      "%s: bits %d n %zu chunk %zu beta %g",
                                      ddph__simd_name((ddph_simd_path)p), bits,
                                      n, chunk, (double)beta);
                    }
                }
        }
    }
}
END_TEST

/* Several messages in one gathered buffer (each: its codes padded to 4
 * bytes, then its chunks' scales), unpacked in one call: the bits of one
 * call per message in turn (the first with beta, the others with 1), on
 * every path, every length and start of a chunk. */
START_TEST(unpacking_sums_the_messages_in_order)
{
    static const size_t sizes[] = {1, 5, 8, 9, 31, 33, 100, 257};
    static const size_t chunks[] = {1, 3, 8, 64, 1000};
    enum { MAX_N = 257, MAX_MSG = 11 }; /* past the 8 tables AVX-512 holds */
    uint32_t st = 4242;
    size_t stride_max = (MAX_N + 1) / 2 + 4 + 4 * MAX_N;
    uint8_t *all = malloc(stride_max * MAX_MSG);
    float y0[MAX_N], got[MAX_N], want[MAX_N];
    ck_assert_ptr_nonnull(all);
    for (int bits = 2; bits <= 4; bits += 2)
        for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
                for (int count = 1; count <= MAX_MSG; count++)
                    for (int b = 0; b < 2; b++) {
        size_t n = sizes[a], chunk = chunks[c], nc = (n + chunk - 1) / chunk;
        size_t codes = ((n * (size_t)bits + 7) / 8 + 3) / 4 * 4;
        size_t stride = codes + 4 * nc;
        float beta = b ? 0.5f : 0.0f;
        for (size_t k = 0; k < stride * (size_t)count; k++)
            all[k] = (uint8_t)lcg(&st);
        for (int r = 0; r < count; r++)
            for (size_t j = 0; j < nc; j++) {
                float s = (float)(lcg(&st) % 1000) / 77.0f;
                memcpy(all + (size_t)r * stride + codes + 4 * j, &s, 4);
            }
        for (size_t i = 0; i < n; i++)
            y0[i] = want[i] = (float)(lcg(&st) % 1000) / 13.0f;
        for (int r = 0; r < count; r++)
            for (size_t i = 0; i < n; i++) {
                float s;
                memcpy(&s, all + (size_t)r * stride + codes + 4 * (i / chunk),
                       4);
                want[i] = ref_unpack(all + (size_t)r * stride, i, bits, s,
                                     r == 0 ? beta : 1.0f, want[i]);
            }
        const float *scales = (const float *)(const void *)(all + codes);
        for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
            if (!ddph__simd_available((ddph_simd_path)p))
                continue;
            memcpy(got, y0, sizeof got);
            ddph__cpu_unpack_bits((ddph_simd_path)p, all, n, bits, chunk,
                                  scales, count, stride, beta, got);
            ck_assert_msg(same_bits(got, want, n),
                          "%s: %d messages, bits %d n %zu chunk %zu beta %g",
                          ddph__simd_name((ddph_simd_path)p), count, bits, n,
                          chunk, (double)beta);
        }
                    }
    free(all);
}
END_TEST

/* A hook instance of one rank over the tests' fake communicator. */
typedef struct fixture {
    fake_world *world;
    ddph_hook hook;
} fixture;

START_TEST(services_check_and_refuse)
{
    fixture f;
    memset(&f, 0, sizeof f);
    f.world = fake_world_new(1);
    ck_assert_ptr_nonnull(f.world);
    f.hook.comm = fake_comm(f.world, 0);
    static char model[] = "unit";
    f.hook.model = model;
    ddph__services_init(&f.hook);
    const ddph_services *s = &f.hook.services;
    ck_assert_uint_ge(s->abi_minor, 6);
    ck_assert(DDPH_HAS_MEMBER(s, ddph_services, unpack_bits));
    const float x[5] = {0.5f, -1.25f, 3.0f, 0.0f, -7.0f}, scale = 1.0f;
    int8_t q[5];
    uint8_t packed[3];
    float y[5];
    ck_assert_int_eq(s->round_stochastic(s, x, 5, 5, &scale, 7, 1, q), DDPH_OK);
    ck_assert_int_eq(s->pack_bits(s, q, 5, 4, packed), DDPH_OK);
    ck_assert_int_eq(s->unpack_bits(s, packed, 5, 4, 5, &scale, 1, 0, 0.0f, y),
                     DDPH_OK);
    for (int i = 0; i < 5; i++)
        ck_assert(y[i] == q[i] && fabsf(y[i] - x[i]) < 1.0f);
    /* Arguments refused before any work, each with its reason. */
    ck_assert_int_eq(s->round_stochastic(s, x, 5, 0, &scale, 7, 1, q),
                     DDPH_ERR_INVALID);
    ck_assert_int_eq(s->round_stochastic(s, x, 5, 5, &scale, 128, 1, q),
                     DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "levels = 128"));
    ck_assert_int_eq(s->pack_bits(s, q, 5, 3, packed), DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "bits = 3, must be 2 or 4"));
    ck_assert_int_eq(s->unpack_bits(s, packed, 5, 8, 5, &scale, 1, 0, 0.0f, y),
                     DDPH_ERR_INVALID);
    ck_assert_int_eq(s->unpack_bits(s, packed, 5, 4, 5, &scale, 0, 0, 0.0f, y),
                     DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "count = 0"));
    ck_assert_int_eq(s->unpack_bits(s, packed, 5, 4, 5, &scale, 2, 6, 0.0f, y),
                     DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "multiple of 4"));
    /* A device table without them (the GPU module's, so far): refused,
     * named, nothing called. */
    ddph_dev_ops without = ddph__dev_cpu_ops;
    without.round_stochastic = NULL;
    without.pack_bits = NULL;
    without.unpack_bits = NULL;
    f.hook.dev_ops = &without;
    ck_assert_int_eq(s->round_stochastic(s, x, 5, 5, &scale, 7, 1, q),
                     DDPH_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "round_stochastic: not available"));
    ck_assert_int_eq(s->pack_bits(s, q, 5, 4, packed), DDPH_ERR_UNSUPPORTED);
    ck_assert_int_eq(s->unpack_bits(s, packed, 5, 4, 5, &scale, 1, 0, 0.0f, y),
                     DDPH_ERR_UNSUPPORTED);
    fake_world_free(f.world);
}
END_TEST

Suite *quant_ops_suite(void)
{
    Suite *s = suite_create("quant_ops");
    TCase *tc = tcase_create("Core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rounding_matches_the_definition_on_every_path);
    tcase_add_test(tc, rounding_is_unbiased_and_fixed_by_its_seed);
    tcase_add_test(tc, rounding_is_exact_where_the_draw_meets_the_fraction);
    tcase_add_test(tc, codes_pack_and_unpack_on_every_path);
    tcase_add_test(tc, unpacking_sums_the_messages_in_order);
    tcase_add_test(tc, services_check_and_refuse);
    suite_add_tcase(s, tc);
    return s;
}
