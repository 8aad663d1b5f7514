/* rng.c: see rng.h.  MT19937 as published by Matsumoto and Nishimura. */
#include <math.h>
#include <stddef.h>

#include "rng.h"

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

static double uniform53(mt19937 *m)
{
    uint32_t a = mt_next32(m) >> 5, b = mt_next32(m) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

void normal_fill(uint32_t seed, float *out, size_t n)
{
    mt19937 m;
    mt_seed(&m, seed);
    for (size_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - uniform53(&m), u2 = uniform53(&m); /* u1 in (0,1] */
        double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
        out[i] = (float)(r * cos(t));
        if (i + 1 < n)
            out[i + 1] = (float)(r * sin(t));
    }
}
