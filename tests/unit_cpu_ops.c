/* unit_cpu_ops.c: half-precision casts against slow, independent
 * references (exhaustive for the 16-bit side, edge cases and random inputs
 * for the 32-bit side), division, the half-type sum, GEMM and the
 * orthogonaliser. */
#include "build-config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_ops.h"
#include "device/cpu_simd.h"
#include "device/sign_ops.h"
#include "device/sparse_ops.h"
#include "unit.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Value of a binary16 pattern by its definition. */
static double half_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    if (exp == 31)
        v = mant ? NAN : INFINITY;
    return sign ? -v : v;
}

/* Nearest binary16 by search over the positive finite patterns, ties to the
 * even pattern; beyond 65520 (the midpoint to the next binade) Inf. */
static uint16_t ref_f32_to_f16(float f)
{
    if (isnan(f))
        return (uint16_t)((bits(f) >> 16 & 0x8000) | 0x7E00);
    uint16_t sign = (uint16_t)(bits(f) >> 16 & 0x8000);
    double a = fabs((double)f);
    if (a >= 65520.0)
        return sign | 0x7C00;
    uint16_t lo = 0, hi = 0x7BFF;
    while (hi - lo > 1) { /* half_value is monotonic on 0..0x7BFF */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (half_value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    if (half_value(hi) <= a)
        lo = hi;
    uint16_t best = lo;
    if (lo < 0x7BFF) {
        double dlo = a - half_value(lo), dhi = half_value(lo + 1) - a;
        if (dhi < dlo || (dhi == dlo && (lo & 1)))
            best = (uint16_t)(lo + 1);
    }
    return sign | best;
}

static uint16_t ref_f32_to_bf16(float f)
{
    if (isnan(f))
        return 0x7FC0;
    uint32_t u = bits(f), lo = u & 0xFFFF0000u;
    if ((u & 0x7FFFFFFFu) >= 0x7F800000u)
        return (uint16_t)(u >> 16); /* Inf */
    double a = fabs((double)f), vlo = fabs((double)from_bits(lo));
    /* Past the largest finite bf16 the next step is 2^128 (rounds to Inf). */
    double vhi = ((lo + 0x10000u) & 0x7FFFFFFFu) == 0x7F800000u
                     ? ldexp(1.0, 128)
                     : fabs((double)from_bits(lo + 0x10000u));
    double dlo = a - vlo, dhi = vhi - a;
    if (dhi < dlo || (dhi == dlo && ((lo >> 16) & 1)))
        return (uint16_t)((lo + 0x10000u) >> 16);
    return (uint16_t)(lo >> 16);
}

START_TEST(f16_every_pattern_round_trips)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ddph__f16_to_f32((uint16_t)h);
        double want = half_value((uint16_t)h);
        if (isnan(want)) {
            ck_assert(isnan(f));
            /* A NaN comes back as the canonical quiet NaN of its sign. */
            ck_assert_uint_eq(ddph__f32_to_f16(f), (h & 0x8000) | 0x7E00);
            continue;
        }
        ck_assert_msg((double)f == want, "0x%04x -> %g, want %g", h, f, want);
        ck_assert_uint_eq(ddph__f32_to_f16(f), h);
    }
}
END_TEST

START_TEST(bf16_every_pattern_round_trips)
{
    for (uint32_t b = 0; b < 65536; b++) {
        float f = ddph__bf16_to_f32((uint16_t)b);
        ck_assert_uint_eq(bits(f), b << 16);
        if (isnan(f))
            ck_assert_uint_eq(ddph__f32_to_bf16(f), 0x7FC0); /* quiet */
        else
            ck_assert_uint_eq(ddph__f32_to_bf16(f), b);
    }
}
END_TEST

/* f16 <-> bf16 (through f32, vector casts) on every pattern, against the
 * references; a cast to the same dtype copies bits, NaN payloads too. */
START_TEST(half_to_half_every_pattern)
{
    static uint16_t all[65536], out[65536];
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    ddph_err e;
    ck_assert_int_eq(ddph__cpu_cast(all, DDPH_F16, out, DDPH_BF16, 65536, 1.0,
                                    &e),
                     DDPH_OK);
    for (uint32_t h = 0; h < 65536; h++) {
        double v = half_value((uint16_t)h); /* exact in f32 */
        uint16_t want = ref_f32_to_bf16((float)v);
        ck_assert_msg(out[h] == want, "f16 0x%04x -> bf16 0x%04x, want 0x%04x",
                      h, out[h], want);
    }
    ck_assert_int_eq(ddph__cpu_cast(all, DDPH_BF16, out, DDPH_F16, 65536, 1.0,
                                    &e),
                     DDPH_OK);
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t want = ref_f32_to_f16(from_bits(b << 16));
        ck_assert_msg(out[b] == want, "bf16 0x%04x -> f16 0x%04x, want 0x%04x",
                      b, out[b], want);
    }
    for (int t = DDPH_F16; t <= DDPH_BF16; t++) {
        ck_assert_int_eq(ddph__cpu_cast(all, (ddph_dtype)t, out, (ddph_dtype)t,
                                        65536, 1.0, &e),
                         DDPH_OK);
        ck_assert(memcmp(all, out, sizeof all) == 0);
    }
}
END_TEST

START_TEST(f32_to_half_edge_cases)
{
    static const float edges[] = {
        0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f,
        1e10f, -1e10f, INFINITY, -INFINITY, 5.9604645e-8f, 2.9802322e-8f,
        2.9802326e-8f, 1.4901161e-8f, 6.1035156e-5f, 6.1031434e-5f,
        1.0009766f, 1.0004883f, 1.0014648f, 3.4028235e38f, 1e-45f, 0.1f,
        0.333333f, 2049.0f, 2051.0f, 4097.0f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        ck_assert_msg(ddph__f32_to_f16(edges[i]) == ref_f32_to_f16(edges[i]),
                      "f16(%a): 0x%04x, want 0x%04x", edges[i],
                      ddph__f32_to_f16(edges[i]), ref_f32_to_f16(edges[i]));
        ck_assert_msg(ddph__f32_to_bf16(edges[i]) == ref_f32_to_bf16(edges[i]),
                      "bf16(%a): 0x%04x, want 0x%04x", edges[i],
                      ddph__f32_to_bf16(edges[i]), ref_f32_to_bf16(edges[i]));
    }
    /* NaN stays NaN; bf16 never rounds a NaN up to Inf. */
    ck_assert_uint_eq(ddph__f32_to_bf16(from_bits(0x7FFFFFFFu)), 0x7FC0);
    ck_assert_uint_eq(ddph__f32_to_f16(from_bits(0x7F800001u)), 0x7E00);
    ck_assert_uint_eq(ddph__f32_to_bf16(from_bits(0x7F7FFFFFu)), 0x7F80);
}
END_TEST

START_TEST(f32_to_half_random)
{
    /* Random bit patterns cover every exponent; a second stream is
     * concentrated on the half range, where rounding matters. */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 2000000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        uint32_t u = (uint32_t)s;
        if (i & 1)
            u = (u & 0x807FFFFFu) | ((uint32_t)(100 + (s >> 40) % 45) << 23);
        float f = from_bits(u);
        ck_assert_msg(ddph__f32_to_f16(f) == ref_f32_to_f16(f), "f16(%a)", f);
        ck_assert_msg(ddph__f32_to_bf16(f) == ref_f32_to_bf16(f), "bf16(%a)",
                      f);
    }
}
END_TEST

START_TEST(cast_divide_and_half_sum)
{
    float src[5] = {1.0f, -2.5f, 65504.0f, 1e5f, 3.0f};
    uint16_t h[5];
    float back[5];
    ddph_err e;
    ck_assert_int_eq(ddph__cpu_cast(src, DDPH_F32, h, DDPH_F16, 5, 1.0, &e),
                     DDPH_OK);
    ck_assert_uint_eq(h[3], 0x7C00); /* 1e5 overflows fp16 to Inf */
    /* Dividing after the cast cannot undo the overflow (PyTorch's order). */
    ck_assert_int_eq(ddph__cpu_divide(h, DDPH_F16, 5, 4.0, &e), DDPH_OK);
    ck_assert_int_eq(ddph__cpu_cast(h, DDPH_F16, back, DDPH_F32, 5, 1.0, &e),
                     DDPH_OK);
    ck_assert(back[0] == 0.25f && back[1] == -0.625f);
    ck_assert(isinf(back[3]));
    /* 3/3 in fp16 through float: exactly 1. */
    uint16_t three = ddph__f32_to_f16(3.0f);
    ck_assert_int_eq(ddph__cpu_divide(&three, DDPH_F16, 1, 3.0, &e), DDPH_OK);
    ck_assert_uint_eq(three, 0x3C00);
    /* Half sum rounds after the addition: 2048 + 1 = 2048 in fp16. */
    uint16_t a = ddph__f32_to_f16(2048.0f), b = ddph__f32_to_f16(1.0f);
    ddph__cpu_add(&a, &b, DDPH_F16, 1);
    ck_assert_uint_eq(a, ddph__f32_to_f16(2048.0f));
    uint16_t c = ddph__f32_to_bf16(1.0f), d = ddph__f32_to_bf16(1.0f / 256);
    ddph__cpu_add(&c, &d, DDPH_BF16, 1);
    ck_assert_uint_eq(c, ddph__f32_to_bf16(1.0f)); /* tie to even */
}
END_TEST

/* The divide multiplies by the reciprocal for powers of two: it must give
 * the bits a true division gives, for every f16/bf16 pattern (subnormals,
 * Inf, NaN) and for f32 values across the whole exponent range. */
START_TEST(divide_by_power_of_two_is_exact)
{
    const double divisors[] = {2, 4, 8, 0.5, 1, 1024, 3, 6};
    ddph_err e;
    uint16_t *h = malloc(65536 * sizeof *h);
    ck_assert_ptr_nonnull(h);
    for (size_t k = 0; k < sizeof divisors / sizeof *divisors; k++) {
        float d = (float)divisors[k];
        for (int type = 0; type < 2; type++) {
            ddph_dtype dt = type ? DDPH_BF16 : DDPH_F16;
            for (uint32_t i = 0; i < 65536; i++)
                h[i] = (uint16_t)i;
            ck_assert_int_eq(ddph__cpu_divide(h, dt, 65536, divisors[k], &e),
                             DDPH_OK);
            for (uint32_t i = 0; i < 65536; i++) {
                float v = type ? ddph__bf16_to_f32((uint16_t)i)
                               : ddph__f16_to_f32((uint16_t)i);
                uint16_t want = type ? ddph__f32_to_bf16(v / d)
                                     : ddph__f32_to_f16(v / d);
                if (isnan(v))
                    ck_assert(type ? isnan(ddph__bf16_to_f32(h[i]))
                                   : isnan(ddph__f16_to_f32(h[i])));
                else
                    ck_assert_msg(h[i] == want,
                                  "%s pattern 0x%04x / %g: 0x%04x, want 0x%04x",
                                  type ? "bf16" : "f16", i, divisors[k], h[i],
                                  want);
            }
        }
        /* f32: every exponent, a few mantissas, both signs. */
        float f[256 * 8], want[256 * 8];
        size_t n = 0;
        for (uint32_t ex = 0; ex < 256; ex++)
            for (uint32_t m = 0; m < 8; m++) {
                uint32_t u = (ex << 23) | (m * 0x0F0F0Fu & 0x7FFFFFu) |
                             (m & 1u) << 31;
                f[n] = from_bits(u);
                want[n] = f[n] / d;
                n++;
            }
        ck_assert_int_eq(ddph__cpu_divide(f, DDPH_F32, n, divisors[k], &e),
                         DDPH_OK);
        for (size_t i = 0; i < n; i++)
            ck_assert(bits(f[i]) == bits(want[i]) ||
                      (isnan(f[i]) && isnan(want[i])));
    }
    free(h);
}
END_TEST

START_TEST(gemm_and_orthogonalize)
{
    /* [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50] */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    ddph_err e;
    ck_assert_int_eq(ddph__cpu_gemm(0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c,
                                    2, &e),
                     DDPH_OK);
    ck_assert(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
    /* a^T b = [26 30; 38 44] */
    ck_assert_int_eq(ddph__cpu_gemm(1, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c,
                                    2, &e),
                     DDPH_OK);
    ck_assert(c[0] == 26 && c[1] == 30 && c[2] == 38 && c[3] == 44);
    /* Both orthogonalisers give orthonormal columns. */
    for (size_t cols = 1; cols <= 4; cols++) {
        float x[6 * 4];
        for (int i = 0; i < 24; i++)
            x[i] = (float)((i * 7919) % 13) - 6.0f + (i % 4 == 0);
        ck_assert_int_eq(ddph__cpu_orthogonalize(x, 6, cols, 0.0, &e), DDPH_OK);
        for (size_t i = 0; i < cols; i++)
            for (size_t j = 0; j < cols; j++) {
                double dot = 0;
                for (size_t r = 0; r < 6; r++)
                    dot += (double)x[r * cols + i] * x[r * cols + j];
                ck_assert_double_eq_tol(dot, i == j ? 1.0 : 0.0, 1e-5);
            }
    }
    float x[2] = {1, 2};
    ck_assert_int_eq(ddph__cpu_orthogonalize(x, 1, 2, 0.0, &e),
                     DDPH_ERR_INVALID);
}
END_TEST

/* The axpy behind services.axpy: PowerSGD's error feedback is
 * error = copy; error += -1 * out, which must equal copy - out exactly. */
START_TEST(axpy_is_exact_subtraction)
{
    enum { N = 1037 };
    static float x[N], y[N], want[N];
    uint32_t state = 12345;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)(state >> 8) / 16777216.0f * 2000.0f - 1000.0f;
        state = state * 1664525u + 1013904223u;
        y[i] = (float)(state >> 8) / 16777216.0f * 2e-3f - 1e-3f;
        want[i] = y[i] - x[i];
    }
    ddph__cpu_axpy(N, -1.0f, x, y);
    for (int i = 0; i < N; i++)
        ck_assert_msg(y[i] == want[i], "element %d: %a != %a", i, y[i],
                      want[i]);
    ddph__cpu_axpy(N, 2.0f, x, y); /* y = -x + 2x + y0 ~ x + y0 */
    for (int i = 0; i < N; i++)
        ck_assert_float_eq_tol(y[i], want[i] + 2 * x[i], 1e-3f);
    ddph__cpu_axpy(0, 1.0f, x, y); /* nothing to do, no crash */
}
END_TEST

/* Every vector path the CPU has, forced one at a time, against scalar:
 * all 65,536 patterns of the 16-bit side; edge cases and random bits of the
 * 32-bit side; odd lengths so the tails run too. */
START_TEST(every_simd_path_matches_scalar)
{
    enum { N = 65536 + 7 };
    uint16_t *h = malloc(N * 2), *want16 = malloc(N * 2), *got16 = malloc(N * 2);
    float *f = malloc(N * 4), *want32 = malloc(N * 4), *got32 = malloc(N * 4);
    ck_assert(h && want16 && got16 && f && want32 && got32);
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)(i * 40503u); /* a permutation of all patterns */
    uint64_t s = 12345;
    static const uint32_t edges[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u,
                                     0x7F800000u, 0xFF800000u, 0x7F7FFFFFu,
                                     0x00000001u, 0x80000001u, 0x387FE000u,
                                     0x33800000u, 0x477FF000u, 0x477FEFFFu};
    for (int i = 0; i < N; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        uint32_t u = i < 12 ? edges[i] : (uint32_t)s;
        f[i] = from_bits(u);
    }
    int tried = 0;
    for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
        if (!ddph__simd_available((ddph_simd_path)p))
            continue;
        tried++;
        for (int k = 0; k < DDPH_CAST_COUNT; k++) {
            int from16 = k == DDPH_CAST_F16_F32 || k == DDPH_CAST_BF16_F32;
            for (size_t len = N - 5; len <= N; len += 5) {
                const void *src = from16 ? (const void *)h : (const void *)f;
                void *want = from16 ? (void *)want32 : (void *)want16;
                void *got = from16 ? (void *)got32 : (void *)got16;
                size_t es = from16 ? 4 : 2;
                ddph__cast_run(DDPH_SIMD_SCALAR, (ddph_cast_kind)k, src, want, len);
                memset(got, 0xAB, len * es);
                ddph__cast_run((ddph_simd_path)p, (ddph_cast_kind)k, src, got, len);
                for (size_t i = 0; i < len; i++) {
                    uint32_t a = 0, b = 0;
                    memcpy(&a, (char *)got + i * es, es);
                    memcpy(&b, (char *)want + i * es, es);
                    ck_assert_msg(a == b, "path %s cast %d element %zu: 0x%x, "
                                          "scalar 0x%x",
                                  ddph__simd_name((ddph_simd_path)p), k, i, a, b);
                }
            }
        }
    }
    ck_assert_int_ge(tried, 1);
    free(h);
    free(want16);
    free(got16);
    free(f);
    free(want32);
    free(got32);
}
END_TEST

/* The fused half-precision add, multiply and divide on every SIMD path
 * against widening, combining in float and narrowing element by element:
 * all 65,536 patterns of a against a permutation of them in b. */
START_TEST(half_ops_match_scalar_on_every_path)
{
    enum { N = 65536 + 13 };
    uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *got = malloc(N * 2);
    ck_assert(a && b && got);
    for (int i = 0; i < N; i++) {
        a[i] = (uint16_t)i;
        b[i] = (uint16_t)(i * 40503u);
    }
    const float xs[] = {0.25f, 3.0f};
    int tried = 0;
    for (int p = 1; p < DDPH_SIMD_COUNT; p++) {
        if (!ddph__simd_available((ddph_simd_path)p))
            continue;
        tried++;
        for (int bf = 0; bf < 2; bf++)
            for (int op = DDPH_HALF_ADD; op <= DDPH_HALF_DIV; op++)
                for (size_t xi = 0; xi < 2; xi++) {
                    memcpy(got, a, N * 2);
                    size_t done = ddph__half_op_run(
                        (ddph_simd_path)p, (ddph_half_op)op, bf, got, b,
                        xs[xi], N);
                    ck_assert_uint_ge(done, N - 16);
                    for (size_t i = 0; i < done; i++) {
                        float u = bf ? ddph__bf16_to_f32(a[i])
                                     : ddph__f16_to_f32(a[i]);
                        float v = bf ? ddph__bf16_to_f32(b[i])
                                     : ddph__f16_to_f32(b[i]);
                        float r = op == DDPH_HALF_ADD   ? u + v
                                  : op == DDPH_HALF_MUL ? u * xs[xi]
                                                        : u / xs[xi];
                        uint16_t want = bf ? ddph__f32_to_bf16(r)
                                           : ddph__f32_to_f16(r);
                        float g = bf ? ddph__bf16_to_f32(got[i])
                                     : ddph__f16_to_f32(got[i]);
                        if (isnan(r))
                            ck_assert(isnan(g));
                        else
                            ck_assert_msg(got[i] == want,
                                          "path %s %s op %d element %zu: "
                                          "0x%04x, want 0x%04x",
                                          ddph__simd_name((ddph_simd_path)p),
                                          bf ? "bf16" : "f16", op, i, got[i],
                                          want);
                    }
                }
    }
    /* The scalar path leaves everything to the caller. */
    ck_assert_uint_eq(ddph__half_op_run(DDPH_SIMD_SCALAR, DDPH_HALF_ADD, 0, a,
                                        b, 0, N),
                      0);
    (void)tried; /* a CPU without AVX2 tests the scalar path only */
    free(a);
    free(b);
    free(got);
}
END_TEST

/* Top-k by magnitude: ties at the k-th magnitude from the lowest index,
 * output in ascending index order, against a brute-force count. */
START_TEST(topk_picks_largest_magnitudes)
{
    const float x[] = {0.5f, -3.0f, 2.0f, -2.0f, 3.0f, 0.0f, -0.5f, 2.0f};
    float v[8];
    int32_t idx[8];
    ddph_err e;
    ck_assert_int_eq(ddph__cpu_topk(x, 8, 4, v, idx, &e), DDPH_OK);
    /* |3|, |3|, then the first two of the three |2|s. */
    const int32_t want[] = {1, 2, 3, 4};
    for (int j = 0; j < 4; j++) {
        ck_assert_int_eq(idx[j], want[j]);
        ck_assert(v[j] == x[want[j]]);
    }
    ck_assert_int_eq(ddph__cpu_topk(x, 8, 8, NULL, idx, &e), DDPH_OK);
    for (int j = 0; j < 8; j++)
        ck_assert_int_eq(idx[j], j);
    ck_assert_int_eq(ddph__cpu_topk(x, 8, 9, v, idx, &e), DDPH_ERR_INVALID);
    /* Random data: every chosen |x| >= every other |x|. */
    enum { N = 10007, K = 333 };
    float *r = malloc(N * sizeof *r);
    int32_t *ri = malloc(K * sizeof *ri);
    char *chosen = calloc(N, 1);
    uint32_t h = 12345;
    for (int i = 0; i < N; i++) {
        h = h * 1664525u + 1013904223u;
        r[i] = (float)((int32_t)(h >> 8) % 2000) / 7.0f; /* with ties */
    }
    ck_assert_int_eq(ddph__cpu_topk(r, N, K, NULL, ri, &e), DDPH_OK);
    float least = INFINITY;
    for (int j = 0; j < K; j++) {
        ck_assert(j == 0 || ri[j] > ri[j - 1]);
        chosen[ri[j]] = 1;
        least = fminf(least, fabsf(r[ri[j]]));
    }
    for (int i = 0; i < N; i++)
        ck_assert(chosen[i] || fabsf(r[i]) <= least);
    free(r);
    free(ri);
    free(chosen);
}
END_TEST

START_TEST(int8_quantize_rounds_and_clamps)
{
    const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 1000.0f, -1000.0f,
                       NAN, 12.7f};
    int8_t q[9];
    ddph__cpu_quantize_int8(x, 9, 1.0f, q);
    /* Half to even, clamped to +-127, NaN to 0. */
    const int8_t want[] = {0, 2, 2, 0, -2, 127, -127, 0, 13};
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(q[i], want[i]);
    float y[9];
    for (int i = 0; i < 9; i++)
        y[i] = 1.0f;
    ddph__cpu_dequantize_int8(q, 9, 0.5f, 1.0f, y);
    ck_assert(y[1] == 2.0f && y[5] == 64.5f && y[6] == -62.5f);
    ddph__cpu_dequantize_int8(q, 9, 2.0f, 0.0f, y);
    ck_assert(y[1] == 4.0f && y[0] == 0.0f);
    ck_assert(ddph__cpu_absmax(x, 7) == 1000.0f);
    ck_assert(isnan(ddph__cpu_absmax(x, 9)));
    ck_assert(ddph__cpu_absmax(x, 0) == 0.0f);
    /* Gather and scatter-add by index. */
    const int32_t idx[] = {8, 1, 1};
    float g[3], acc[9] = {0};
    ddph__cpu_gather(x, idx, 3, g);
    ck_assert(g[0] == 12.7f && g[1] == 1.5f && g[2] == 1.5f);
    ddph__cpu_scatter_add(acc, idx, g, 3, 2.0f);
    ck_assert(acc[1] == 6.0f && acc[8] == 25.4f && acc[0] == 0.0f);
}
END_TEST

START_TEST(signs_pack_and_unpack_with_chunk_scales)
{
    /* 11 elements: one full byte and 3 bits; -0 and a NaN with its sign
     * bit count as negative, +0 and a positive NaN as positive. */
    const float x[] = {1.0f,  -2.0f, -0.0f, 0.0f, 3.0f, -NAN,
                       NAN,   -1e-40f, 5.0f, -6.0f, 7.0f};
    uint8_t bits[2] = {0xff, 0xff};
    ddph__cpu_pack_signs(x, 11, bits);
    ck_assert_int_eq(bits[0], 0x02 | 0x04 | 0x20 | 0x80);
    ck_assert_int_eq(bits[1], 0x02); /* element 9; unused bits 0 */
    /* Chunks of 4: scales 1, 2, 3 (the last chunk short). */
    const float scales[] = {1.0f, 2.0f, 3.0f};
    float y[11];
    for (int i = 0; i < 11; i++)
        y[i] = 10.0f;
    ddph__cpu_unpack_signs(bits, 11, 4, scales, 0.0f, y);
    const float want[] = {1, -1, -1, 1, 2, -2, 2, -2, 3, -3, 3};
    for (int i = 0; i < 11; i++)
        ck_assert(y[i] == want[i]);
    ddph__cpu_unpack_signs(bits, 11, 4, scales, 0.5f, y);
    ck_assert(y[0] == 1.5f && y[1] == -1.5f && y[10] == 4.5f);
}
END_TEST

/* The one-element definitions of sign_ops.h, for the byte-wise code. */
static void ref_pack_signs(const float *x, size_t n, uint8_t *out)
{
    memset(out, 0, (n + 7) / 8);
    for (size_t i = 0; i < n; i++)
        out[i / 8] |= (uint8_t)((signbit(x[i]) != 0) << (i % 8));
}

static void ref_unpack_signs(const uint8_t *b, size_t n, size_t chunk,
                             const float *scales, float beta, float *y)
{
    for (size_t i = 0; i < n; i++) {
        float s = scales[i / chunk];
        float d = (b[i / 8] >> (i % 8)) & 1 ? -s : s;
        y[i] = beta == 0.0f ? d : beta * y[i] + d;
    }
}

START_TEST(signs_match_the_element_definitions)
{
    /* Every length to 70 and a few long ones, chunks that do and do not
     * fall on byte boundaries (1, 3, 8, 13, 64, longer than n), scales
     * of both signs, -0, NaN and Inf among the inputs and scales, and
     * beta 0, -0, 0.5 and NaN: bit-identical results everywhere. */
    enum { MAX = 1000 };
    static float x[MAX], y[MAX], want[MAX], scales[MAX];
    static uint8_t got_bits[MAX / 8 + 1], want_bits[MAX / 8 + 1];
    const float specials[] = {-0.0f, 0.0f, NAN, -NAN, INFINITY, -1e-40f};
    const size_t chunks[] = {1, 3, 8, 13, 64, 5000};
    const float betas[] = {0.0f, -0.0f, 0.5f, NAN};
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (size_t n = 0; n < MAX; n = n < 70 ? n + 1 : n * 2 + 17) {
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            x[i] = s % 11 == 0 ? specials[s % 6]
                               : (float)(int64_t)(s >> 40) * 1e-6f - 8.0f;
            scales[i] = i % 7 == 3 ? specials[i % 6] : x[i] * 0.25f;
        }
        memset(got_bits, 0xff, sizeof got_bits);
        ddph__cpu_pack_signs(x, n, got_bits);
        ref_pack_signs(x, n, want_bits);
        ck_assert_msg(memcmp(got_bits, want_bits, (n + 7) / 8) == 0,
                      "pack_signs, n = %zu", n);
        for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
            for (size_t b = 0; b < sizeof betas / sizeof *betas; b++) {
                for (size_t i = 0; i < n; i++)
                    y[i] = want[i] = x[(i * 7) % n];
                ddph__cpu_unpack_signs(got_bits, n, chunks[c], scales,
                                       betas[b], y);
                ref_unpack_signs(want_bits, n, chunks[c], scales, betas[b],
                                 want);
                /* NaN payloads aside (a compiler may swap a product's
                 * operands), the same bits. */
                for (size_t i = 0; i < n; i++)
                    ck_assert_msg(bits(y[i]) == bits(want[i]) ||
                                      (isnan(y[i]) && isnan(want[i])),
                                  "unpack_signs, n = %zu, chunk %zu, beta %g, "
                                  "element %zu: %a, not %a",
                                  n, chunks[c], (double)betas[b], i,
                                  (double)y[i], (double)want[i]);
            }
    }
}
END_TEST

START_TEST(chunk_abs_sum_and_max)
{
    const float x[] = {1, -2, 3, -4, 5, -6, 7};
    float out[3];
    ck_assert_uint_eq(ddph__chunks(7, 3), 3);
    ck_assert_uint_eq(ddph__chunks(0, 3), 0);
    ddph__cpu_chunk_abs_sum(x, 7, 3, out);
    ck_assert(out[0] == 6 && out[1] == 15 && out[2] == 7);
    ddph__cpu_chunk_abs_max(x, 7, 3, out);
    ck_assert(out[0] == 3 && out[1] == 6 && out[2] == 7);
    /* A NaN ranks above +Inf; an Inf above every number. */
    const float y[] = {1, NAN, -2, -INFINITY, 4, 1e30f};
    ddph__cpu_chunk_abs_max(y, 6, 2, out);
    ck_assert(isnan(out[0]) && isinf(out[1]) && out[2] == 1e30f);
    /* The sum is taken in double: 2^24 + 1 + 1 is exact there. */
    const float z[] = {16777216.0f, 1.0f, 1.0f};
    ddph__cpu_chunk_abs_sum(z, 3, 3, out);
    ck_assert(out[0] == 16777218.0f);
}
END_TEST

/* The vectorised maximum (16 elements a step) against the definition,
 * the largest magnitude key, on chunks long enough to use it and ends
 * that do not fill a step; NaNs, infinities and -0 placed anywhere. */
START_TEST(chunk_abs_max_matches_the_definition)
{
    enum { N = 1100 };
    static const size_t chunks[] = {1, 15, 16, 17, 33, 64, 257, 5000};
    float *x = malloc(N * sizeof *x), out[N], want[N];
    uint32_t st = 99;
    ck_assert_ptr_nonnull(x);
    for (int trial = 0; trial < 40; trial++) {
        size_t n = trial < 20 ? (size_t)trial * 13 : N - (size_t)trial;
        for (size_t i = 0; i < n; i++) {
            st = st * 1664525u + 1013904223u;
            x[i] = ((float)(st >> 8) / 16777216.0f - 0.5f) * (float)(trial + 1);
            if (st % 97 == 0)
                x[i] = trial % 2 ? NAN : -NAN;
            else if (st % 89 == 0)
                x[i] = trial % 3 ? -INFINITY : INFINITY;
            else if (st % 83 == 0)
                x[i] = -0.0f;
        }
        for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
            size_t chunk = chunks[c], nc = ddph__chunks(n, chunk);
            for (size_t j = 0; j < nc; j++) {
                uint32_t best = 0;
                for (size_t i = j * chunk; i < n && i < (j + 1) * chunk;
                     i++) {
                    uint32_t key = bits(x[i]) & 0x7fffffffu;
                    best = key > best ? key : best;
                }
                want[j] = from_bits(best);
            }
            ddph__cpu_chunk_abs_max(x, n, chunk, out);
            for (size_t j = 0; j < nc; j++)
                ck_assert_msg(bits(out[j]) == bits(want[j]),
                              "n %zu chunk %zu: chunk %zu is %08x, not %08x",
                              n, chunk, j, bits(out[j]), bits(want[j]));
        }
    }
    free(x);
}
END_TEST

Suite *cpu_ops_suite(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("Core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, f16_every_pattern_round_trips);
    tcase_add_test(tc, bf16_every_pattern_round_trips);
    tcase_add_test(tc, half_to_half_every_pattern);
    tcase_add_test(tc, f32_to_half_edge_cases);
    tcase_add_test(tc, f32_to_half_random);
    tcase_add_test(tc, cast_divide_and_half_sum);
    tcase_add_test(tc, divide_by_power_of_two_is_exact);
    tcase_add_test(tc, gemm_and_orthogonalize);
    tcase_add_test(tc, axpy_is_exact_subtraction);
    tcase_add_test(tc, every_simd_path_matches_scalar);
    tcase_add_test(tc, half_ops_match_scalar_on_every_path);
    tcase_add_test(tc, topk_picks_largest_magnitudes);
    tcase_add_test(tc, int8_quantize_rounds_and_clamps);
    tcase_add_test(tc, signs_pack_and_unpack_with_chunk_scales);
    tcase_add_test(tc, signs_match_the_element_definitions);
    tcase_add_test(tc, chunk_abs_sum_and_max);
    tcase_add_test(tc, chunk_abs_max_matches_the_definition);
    suite_add_tcase(s, tc);
    return s;
}
