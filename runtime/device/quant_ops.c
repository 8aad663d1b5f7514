/* quant_ops.c: see quant_ops.h.
 *
 * Both operations go a chunk at a time, its scale (and its inverse) held
 * for the chunk; inside it the AVX2 path does 8 elements a step with the
 * same operations as the portable loop, in the same order (f32 multiply,
 * floor, subtract, compare, add; the hash in 32-bit integer lanes), so
 * every bit agrees; the ends that do not fill 8 lanes (or, unpacking, do
 * not start on a byte) go element by element. */
#include "build-config.h"

#include "device/quant_ops.h"

#include <float.h>
#include <math.h>
#include <string.h>

static int scale_usable(float s)
{
    return s > 0 && s <= FLT_MAX;
}

/* Elements [lo, hi) of one chunk, one at a time. */
static void round_each(const float *x, size_t lo, size_t hi, float inv,
                       float top, uint64_t seed, int8_t *q)
{
    for (size_t i = lo; i < hi; i++) {
        float v = x[i] * inv;
        if (isnan(v)) {
            q[i] = 0;
            continue;
        }
        float f = floorf(v);
        float r = f + (ddph__quant_uniform(seed, (uint32_t)i) < v - f ? 1.0f
                                                                       : 0.0f);
        r = r > top ? top : r < -top ? -top : r;
        q[i] = (int8_t)r;
    }
}

/* y[i] for i in [lo, hi) of one chunk, one at a time. */
static void unpack_each(const uint8_t *packed, size_t lo, size_t hi, int bits,
                        float scale, float beta, float *y)
{
    unsigned per = 8u / (unsigned)bits, mask = (1u << bits) - 1;
    for (size_t i = lo; i < hi; i++) {
        unsigned code = (unsigned)packed[i / per] >> (i % per * bits) & mask;
        int c = (int)code - (code >> (bits - 1) ? 1 << bits : 0);
        float d = (float)c * scale;
        y[i] = beta == 0.0f ? d : beta * y[i] + d;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_PATHS 1

__attribute__((target("avx2"))) static inline __m256i
avx2_mix(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* Rounds [lo, hi) 8 at a time; returns where it stopped. */
__attribute__((target("avx2"))) static size_t
avx2_round(const float *x, size_t lo, size_t hi, float inv, float top,
           uint64_t seed, int8_t *q)
{
    const __m256 vinv = _mm256_set1_ps(inv), vtop = _mm256_set1_ps(top),
                 vbot = _mm256_set1_ps(-top), one = _mm256_set1_ps(1.0f),
                 unit = _mm256_set1_ps(0x1p-24f);
    const __m256i k0 = _mm256_set1_epi32((int)(uint32_t)seed),
                  k1 = _mm256_set1_epi32((int)(uint32_t)(seed >> 32)),
                  phi = _mm256_set1_epi32((int)0x9E3779B9u),
                  lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv);
        __m256 f = _mm256_floor_ps(v);
        __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)i),
                                       lane);
        __m256i h = avx2_mix(_mm256_add_epi32(_mm256_mullo_epi32(idx, phi), k0));
        h = avx2_mix(_mm256_xor_si256(h, k1));
        __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)),
                                 unit);
        __m256 up = _mm256_and_ps(_mm256_cmp_ps(u, _mm256_sub_ps(v, f),
                                                _CMP_LT_OQ),
                                  one);
        __m256 r = _mm256_add_ps(f, up);
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        /* min/max hand back their second operand for a NaN: the bound,
         * then replaced by 0. */
        r = _mm256_min_ps(_mm256_max_ps(r, vbot), vtop);
        r = _mm256_andnot_ps(nan, r);
        __m256i w = _mm256_cvtps_epi32(r);
        __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(w),
                                      _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64((__m128i *)(void *)(q + i), _mm_packs_epi16(w16, w16));
    }
    return i;
}

/* Unpacks [lo, hi), lo on a byte boundary, 8 at a time; returns where it
 * stopped. */
__attribute__((target("avx2"))) static size_t
avx2_unpack(const uint8_t *packed, size_t lo, size_t hi, int bits,
            float scale, float beta, float *y)
{
    const __m256 vs = _mm256_set1_ps(scale), vb = _mm256_set1_ps(beta);
    /* Lane k's code moved to the top of the lane, then shifted down
     * arithmetically: sign-extended. */
    const __m256i up = _mm256_sub_epi32(
        _mm256_set1_epi32(32 - bits),
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                           _mm256_set1_epi32(bits)));
    const __m128i down = _mm_cvtsi32_si128(32 - bits);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        uint32_t word = 0;
        memcpy(&word, packed + i * (size_t)bits / 8, (size_t)bits);
        __m256i c = _mm256_sra_epi32(
            _mm256_sllv_epi32(_mm256_set1_epi32((int)word), up), down);
        __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(c), vs);
        if (beta != 0.0f)
            d = _mm256_add_ps(_mm256_mul_ps(vb, _mm256_loadu_ps(y + i)), d);
        _mm256_storeu_ps(y + i, d);
    }
    return i;
}
#endif

void ddph__cpu_round_stochastic(ddph_simd_path path, const float *x, size_t n,
                                size_t chunk, const float *scales, int levels,
                                uint64_t seed, int8_t *q)
{
    float top = (float)levels;
    for (size_t lo = 0, j = 0; lo < n; lo += chunk, j++) {
        size_t hi = n - lo < chunk ? n : lo + chunk;
        if (!scale_usable(scales[j])) {
            memset(q + lo, 0, hi - lo);
            continue;
        }
        float inv = 1.0f / scales[j];
        size_t i = lo;
#ifdef HAVE_X86_PATHS
        if (path != DDPH_SIMD_SCALAR)
            i = avx2_round(x, lo, hi, inv, top, seed, q);
#else
        (void)path;
#endif
        round_each(x, i, hi, inv, top, seed, q);
    }
}

void ddph__cpu_pack_bits(const int8_t *q, size_t n, int bits, uint8_t *out)
{
    unsigned per = 8u / (unsigned)bits, mask = (1u << bits) - 1;
    size_t full = n / per;
    /* The whole bytes with the layout spelled out (the compiler
     * vectorises these loops; a loop over k would not be). */
    if (bits == 4)
        for (size_t j = 0; j < full; j++)
            out[j] = (uint8_t)(((unsigned)q[2 * j] & 15u) |
                               ((unsigned)q[2 * j + 1] & 15u) << 4);
    else
        for (size_t j = 0; j < full; j++)
            out[j] = (uint8_t)(((unsigned)q[4 * j] & 3u) |
                               ((unsigned)q[4 * j + 1] & 3u) << 2 |
                               ((unsigned)q[4 * j + 2] & 3u) << 4 |
                               ((unsigned)q[4 * j + 3] & 3u) << 6);
    if (n % per) {
        unsigned b = 0;
        for (unsigned k = 0; k < n % per; k++)
            b |= ((unsigned)q[full * per + k] & mask) << (k * (unsigned)bits);
        out[full] = (uint8_t)b;
    }
}

void ddph__cpu_unpack_bits(ddph_simd_path path, const uint8_t *packed,
                           size_t n, int bits, size_t chunk,
                           const float *scales, float beta, float *y)
{
    size_t per = 8 / (size_t)bits;
    for (size_t lo = 0, j = 0; lo < n; lo += chunk, j++) {
        size_t hi = n - lo < chunk ? n : lo + chunk;
        size_t i = lo;
#ifdef HAVE_X86_PATHS
        if (path != DDPH_SIMD_SCALAR) {
            size_t aligned = (lo + per - 1) / per * per;
            aligned = aligned < hi ? aligned : hi;
            unpack_each(packed, lo, aligned, bits, scales[j], beta, y);
            i = avx2_unpack(packed, aligned, hi, bits, scales[j], beta, y);
        }
#else
        (void)path;
#endif
        unpack_each(packed, i, hi, bits, scales[j], beta, y);
    }
}
