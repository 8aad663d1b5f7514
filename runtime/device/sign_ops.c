/* sign_ops.c: see sign_ops.h.
 *
 * Signs travel as bits, 8 elements a byte, so both directions work a
 * whole byte (8 elements) at a time: packing gathers the 8 sign bits of
 * a byte with one movemask (SSE2) or shifts, unpacking looks the byte's
 * 8 sign masks up in a table and XORs them into the chunk's scale (a
 * sign flip is exactly what -s is), with no branch and no division in
 * the loop; only a chunk's ends that do not fall on a byte boundary go
 * element by element.  The results are those of the one-element
 * definitions in sign_ops.h, bit for bit. */
#include "build-config.h"

#include "device/sign_ops.h"

#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "device/cpu_simd.h"
#include "device/sparse_ops.h"

/* The sign bit of x as 0 or 1 (-0 and a negative NaN give 1). */
static inline unsigned sign_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u >> 31;
}

/* The 8 sign bits of x[0..7], element k in bit k. */
static inline unsigned pack_byte(const float *x)
{
#if defined(__SSE2__)
    return (unsigned)(_mm_movemask_ps(_mm_loadu_ps(x)) |
                      _mm_movemask_ps(_mm_loadu_ps(x + 4)) << 4);
#else
    unsigned b = 0;
    for (int k = 0; k < 8; k++)
        b |= sign_of(x[k]) << k;
    return b;
#endif
}

void ddph__cpu_pack_signs(const float *x, size_t n, uint8_t *bits)
{
    size_t full = n / 8;
    for (size_t j = 0; j < full; j++)
        bits[j] = (uint8_t)pack_byte(x + 8 * j);
    if (n % 8) {
        unsigned b = 0;
        for (size_t k = 0; k < n % 8; k++)
            b |= sign_of(x[full * 8 + k]) << k;
        bits[full] = (uint8_t)b;
    }
}

/* SIGN_MASKS[b][k]: the float sign bit when bit k of byte b is set. */
#define SM(b, k) ((((unsigned)(b) >> (k)) & 1u) << 31)
#define SM_ROW(b)                                                              \
    {SM(b, 0), SM(b, 1), SM(b, 2), SM(b, 3), SM(b, 4), SM(b, 5), SM(b, 6),     \
     SM(b, 7)}
#define SM_4(b) SM_ROW(b), SM_ROW((b) + 1), SM_ROW((b) + 2), SM_ROW((b) + 3)
#define SM_16(b) SM_4(b), SM_4((b) + 4), SM_4((b) + 8), SM_4((b) + 12)
#define SM_64(b) SM_16(b), SM_16((b) + 16), SM_16((b) + 32), SM_16((b) + 48)
static const uint32_t SIGN_MASKS[256][8] = {SM_64(0), SM_64(64), SM_64(128),
                                            SM_64(192)};

/* y[i] for i in [lo, hi) of one chunk of scale bits `s`, one at a time. */
static void unpack_each(const uint8_t *bits, size_t lo, size_t hi, uint32_t s,
                        float beta, float *y)
{
    for (size_t i = lo; i < hi; i++) {
        uint32_t u = s ^ ((uint32_t)(bits[i >> 3] >> (i & 7)) & 1u) << 31;
        float d;
        memcpy(&d, &u, sizeof d);
        y[i] = beta == 0.0f ? d : beta * y[i] + d;
    }
}

/* Whole bytes [j0, j1) of one chunk: elements 8 j0 .. 8 j1 - 1. */
static void unpack_bytes(const uint8_t *bits, size_t j0, size_t j1, uint32_t s,
                         float *y)
{
    for (size_t j = j0; j < j1; j++) {
        const uint32_t *m = SIGN_MASKS[bits[j]];
        uint32_t u[8];
        for (int k = 0; k < 8; k++)
            u[k] = s ^ m[k];
        memcpy(y + 8 * j, u, sizeof u);
    }
}

static void unpack_bytes_beta(const uint8_t *bits, size_t j0, size_t j1,
                              uint32_t s, float beta, float *y)
{
    for (size_t j = j0; j < j1; j++) {
        const uint32_t *m = SIGN_MASKS[bits[j]];
        uint32_t u[8];
        float d[8];
        for (int k = 0; k < 8; k++)
            u[k] = s ^ m[k];
        memcpy(d, u, sizeof d);
        float *o = y + 8 * j;
        for (int k = 0; k < 8; k++)
            o[k] = beta * o[k] + d[k];
    }
}

void ddph__cpu_unpack_signs(const uint8_t *bits, size_t n, size_t chunk,
                            const float *scales, float beta, float *y)
{
    size_t nc = ddph__chunks(n, chunk);
    for (size_t c = 0; c < nc; c++) {
        size_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;
        uint32_t s;
        memcpy(&s, &scales[c], sizeof s);
        /* The chunk's whole bytes, and its ends outside them. */
        size_t j0 = (lo + 7) / 8, j1 = hi / 8;
        if (j0 >= j1) {
            unpack_each(bits, lo, hi, s, beta, y);
            continue;
        }
        unpack_each(bits, lo, 8 * j0, s, beta, y);
        if (beta == 0.0f)
            unpack_bytes(bits, j0, j1, s, y);
        else
            unpack_bytes_beta(bits, j0, j1, s, beta, y);
        unpack_each(bits, 8 * j1, hi, s, beta, y);
    }
}
/* The largest magnitude key of x[lo, hi), from `best` on. */
static uint32_t max_key_each(const float *x, size_t lo, size_t hi,
                             uint32_t best)
{
    for (size_t i = lo; i < hi; i++) {
        uint32_t key = ddph__magnitude_key(x[i]);
        best = key > best ? key : best;
    }
    return best;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_MAX 1
/* The same, 16 elements a step in two accumulators (the keys are the
 * float bits less the sign: an unsigned integer maximum, exact in any
 * order); the tail that does not fill 16 goes element by element. */
__attribute__((target("avx2"))) static uint32_t
max_key_avx2(const float *x, size_t lo, size_t hi)
{
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    __m256i a = _mm256_setzero_si256(), b = a;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        __m256i v =
            _mm256_loadu_si256((const __m256i *)(const void *)(x + i + 8));
        a = _mm256_max_epu32(a, _mm256_and_si256(u, magnitude));
        b = _mm256_max_epu32(b, _mm256_and_si256(v, magnitude));
    }
    a = _mm256_max_epu32(a, b);
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(a),
                              _mm256_extracti128_si256(a, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return max_key_each(x, i, hi, (uint32_t)_mm_cvtsi128_si32(m));
}
#endif

/* Per chunk, the sum of |x| in double (in index order). */
static void chunk_abs_sum(const float *x, size_t n, size_t chunk, float *out)
{
    size_t nc = ddph__chunks(n, chunk);
    for (size_t c = 0; c < nc; c++) {
        size_t end = n - c * chunk < chunk ? n : (c + 1) * chunk;
        double sum = 0;
        for (size_t i = c * chunk; i < end; i++)
            sum += fabs((double)x[i]);
        out[c] = (float)sum;
    }
}

/* Per chunk, the largest magnitude key, stored as its float. */
static void chunk_abs_max(const float *x, size_t n, size_t chunk, float *out)
{
    size_t nc = ddph__chunks(n, chunk);
#ifdef HAVE_AVX2_MAX
    int avx2 = ddph__simd_available(DDPH_SIMD_AVX2);
#endif
    for (size_t c = 0; c < nc; c++) {
        size_t lo = c * chunk, end = n - lo < chunk ? n : lo + chunk;
        uint32_t best;
#ifdef HAVE_AVX2_MAX
        if (avx2)
            best = max_key_avx2(x, lo, end);
        else
#endif
            best = max_key_each(x, lo, end, 0);
        memcpy(&out[c], &best, sizeof best);
    }
}

void ddph__cpu_chunk_abs_sum(const float *x, size_t n, size_t chunk,
                             float *out)
{
    chunk_abs_sum(x, n, chunk, out);
}

void ddph__cpu_chunk_abs_max(const float *x, size_t n, size_t chunk,
                             float *out)
{
    chunk_abs_max(x, n, chunk, out);
}
