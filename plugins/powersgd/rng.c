/* rng.c: see rng.h.  MT19937 as published by Matsumoto and Nishimura. */
#include <math.h>
#include <stddef.h>

#include "rng.h"

#define PI 3.14159265358979323846 /* c10::pi<double> */

void mt_seed(mt19937 *m, uint32_t seed)
{
    m->mt[0] = seed;
    for (int i = 1; i < MT_N; i++)
        m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) +
                   (uint32_t)i;
    m->mti = MT_N;
}

uint32_t mt_next32(mt19937 *m)
{
    static const uint32_t mag01[2] = {0u, 0x9908B0DFu};
    if (m->mti >= MT_N) {
        int k;
        uint32_t y;
        for (k = 0; k < MT_N - 397; k++) {
            y = (m->mt[k] & 0x80000000u) | (m->mt[k + 1] & 0x7FFFFFFFu);
            m->mt[k] = m->mt[k + 397] ^ (y >> 1) ^ mag01[y & 1];
        }
        for (; k < MT_N - 1; k++) {
            y = (m->mt[k] & 0x80000000u) | (m->mt[k + 1] & 0x7FFFFFFFu);
            m->mt[k] = m->mt[k + (397 - MT_N)] ^ (y >> 1) ^ mag01[y & 1];
        }
        y = (m->mt[MT_N - 1] & 0x80000000u) | (m->mt[0] & 0x7FFFFFFFu);
        m->mt[MT_N - 1] = m->mt[396] ^ (y >> 1) ^ mag01[y & 1];
        m->mti = 0;
    }
    uint32_t y = m->mt[m->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    y ^= y >> 18;
    return y;
}

uint32_t mt_randint(mt19937 *m, uint32_t high)
{
    uint32_t max = high - 1, mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t v;
    do
        v = mt_next32(m) & mask;
    while (v > max);
    return v;
}

/* torch's uniform_real_distribution<float>(0, 1): 24 bits of one draw. */
static float uniform24(mt19937 *m)
{
    return (float)(mt_next32(m) & 0xFFFFFFu) * (1.0f / 16777216.0f);
}

/* torch's uniform_real_distribution<double>(0, 1): random64() is the first
 * draw in the high word and the second in the low; 53 bits of it. */
static double uniform53(mt19937 *m)
{
    uint64_t hi = mt_next32(m), lo = mt_next32(m);
    return (double)(((hi << 32) | lo) & ((1ull << 53) - 1)) *
           (1.0 / 9007199254740992.0);
}

void torch_gen_seed(torch_gen *g, uint64_t seed)
{
    mt_seed(&g->mt, (uint32_t)seed);
    g->has_next_normal = 0;
}

/* at::normal_distribution<double>, with the generator's cached second
 * sample of each Box-Muller pair. */
static double normal_double(torch_gen *g)
{
    if (g->has_next_normal) {
        g->has_next_normal = 0;
        return g->next_normal;
    }
    double u1 = uniform53(&g->mt), u2 = uniform53(&g->mt);
    double r = sqrt(-2.0 * log(1.0 - u2)), theta = 2.0 * PI * u1;
    g->next_normal = r * sin(theta);
    g->has_next_normal = 1;
    return r * cos(theta);
}

/* avx_mathfun.h's log256_ps (Cephes' logf), one lane, with the products
 * that torch's AVX2 build fuses written as fmaf. */
static float cephes_logf(float x)
{
    const float sqrthf = 0.707106781186547524f;
    union { float f; uint32_t u; } v = {x < 1.17549435e-38f ? 1.17549435e-38f : x};
    int exponent = (int)(v.u >> 23) - 0x7f;
    v.u = (v.u & ~0x7f800000u) | 0x3f000000u; /* the mantissa in [0.5, 1) */
    float e = (float)exponent + 1.0f;
    x = v.f;
    float tmp = x < sqrthf ? x : 0.0f;
    if (x < sqrthf)
        e -= 1.0f;
    x = x - 1.0f + tmp;
    float z = x * x;
    float y = 7.0376836292e-2f;
    y = fmaf(y, x, -1.1514610310e-1f);
    y = fmaf(y, x, 1.1676998740e-1f);
    y = fmaf(y, x, -1.2420140846e-1f);
    y = fmaf(y, x, 1.4249322787e-1f);
    y = fmaf(y, x, -1.6668057665e-1f);
    y = fmaf(y, x, 2.0000714765e-1f);
    y = fmaf(y, x, -2.4999993993e-1f);
    y = fmaf(y, x, 3.3333331174e-1f);
    y = y * x;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = fmaf(z, -0.5f, y);
    x = x + y;
    return fmaf(e, 0.693359375f, x);
}

/* avx_mathfun.h's sincos256_ps (Cephes' sinf/cosf), one lane, likewise. */
static void cephes_sincosf(float x, float *s, float *c)
{
    union { float f; uint32_t u; } v = {x};
    uint32_t sign_sin = v.u & 0x80000000u;
    v.u &= 0x7fffffffu;
    x = v.f;
    int j = ((int)(x * 1.27323954473516f) + 1) & ~1; /* truncates, as cvttps */
    float y = (float)j;
    sign_sin ^= (uint32_t)(j & 4) << 29;
    uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    int poly_is_cos = (j & 2) == 0;
    x = fmaf(y, -0.78515625f, x); /* x - y pi/4 in three parts */
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    float z = x * x;
    float yc = fmaf(2.443315711809948e-5f, z, -1.388731625493765e-3f);
    yc = fmaf(yc, z, 4.166664568298827e-2f);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;
    float ys = fmaf(-1.9515295891e-4f, z, 8.3321608736e-3f);
    ys = fmaf(ys, z, -1.6666654611e-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);
    union { float f; uint32_t u; } so = {poly_is_cos ? ys : yc},
                                  co = {poly_is_cos ? yc : ys};
    so.u ^= sign_sin;
    co.u ^= sign_cos;
    *s = so.f;
    *c = co.f;
}

/* normal_fill_16_AVX2: Box-Muller on the uniform pairs (j, j + 8). */
static void normal_fill_16(float *d)
{
    const float two_pi = (float)(2.0 * PI);
    for (int j = 0; j < 8; j++) {
        float radius = sqrtf(-2.0f * cephes_logf(1.0f - d[j]));
        float s, c;
        cephes_sincosf(two_pi * d[j + 8], &s, &c);
        d[j] = radius * c;
        d[j + 8] = radius * s;
    }
}

void torch_randn(torch_gen *g, float *out, size_t n)
{
    if (n < 16) {
        for (size_t i = 0; i < n; i++)
            out[i] = (float)normal_double(g);
        return;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = uniform24(&g->mt);
    for (size_t i = 0; i + 16 <= n; i += 16)
        normal_fill_16(out + i);
    if (n % 16) { /* torch draws the last 16 again */
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++)
            tail[i] = uniform24(&g->mt);
        normal_fill_16(tail);
    }
}
