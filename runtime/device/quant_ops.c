/* quant_ops.c: see quant_ops.h.
 *
 * Rounding and unpacking go a chunk at a time, its scale (and its
 * inverse) held for the chunk.  Inside it the AVX2 path rounds 8
 * elements a step and AVX-512 16, the hash in 32-bit integer lanes, the
 * fraction and its compare with the draw in the portable loop's floats
 * and the level in integers (see avx2_round: bit for bit); the ends that
 * do not fill the lanes go element by element.  Packing is
 * integer work: AVX2 joins 32 codes a step into the same bytes the
 * portable loop writes.  Unpacking, AVX2 decodes 8 codes a step message
 * by message; AVX-512 looks 16 up a step in a table of each message's
 * 16 possible terms and adds every message's before writing y once. */
#include "build-config.h"

#include "device/quant_ops.h"

#include <string.h>

/* Elements [from, hi) of one chunk, one at a time (quant_element.h's
 * definition, which the CUDA kernels compile too); element i's level
 * goes to out[i - lo]. */
static void round_each(const float *x, size_t lo, size_t from, size_t hi,
                       float inv, float top, uint32_t key, int8_t *out)
{
    for (size_t i = from; i < hi; i++)
        out[i - lo] = ddph__quant_round_one(x[i], inv, top, key, (uint32_t)i);
}

/* y[i] for i in [lo, hi) of one chunk, one at a time. */
static void unpack_each(const uint8_t *packed, size_t lo, size_t hi, int bits,
                        float scale, float beta, float *y)
{
    for (size_t i = lo; i < hi; i++) {
        float d = ddph__quant_decode(packed, i, (unsigned)bits, scale);
        y[i] = beta == 0.0f ? d : ddph__quant_onto(beta, y[i], d);
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

/* The vector paths compute the definition's floats up to its compare,
 * then the level in integers: with v clamped to [-top, top] (which
 * changes no level: beyond the bounds the level is the bound either way),
 * f = floor(v) and the fraction d = v - f rounded to f32 as the
 * definition rounds it (for v in (-0.5, 0), v + 1 loses v's bits below
 * 2^-24: an exact fraction would round up where the definition does not),
 * the draw u = (h >> 8) * 2^-24 rounds up when u < d, and the level is
 * f + 1 there: f's integer minus the compare's all-ones mask. */

/* Rounds [lo, hi) 8 at a time, element i's level to out[i - lo];
 * returns where it stopped. */
__attribute__((target("avx2"))) static size_t
avx2_round(const float *x, size_t lo, size_t hi, float inv, float top,
           uint32_t key, int8_t *out)
{
    const __m256 vinv = _mm256_set1_ps(inv), vtop = _mm256_set1_ps(top),
                 vbot = _mm256_set1_ps(-top), unit = _mm256_set1_ps(0x1p-24f);
    const __m256i k0 = _mm256_set1_epi32((int)key),
                  phi = _mm256_set1_epi32((int)0x9E3779B9u),
                  lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    /* i * phi + k0 for the lanes, kept up to date by adding 8 * phi: the
     * same value mod 2^32 with one multiplication fewer a step. */
    __m256i hashed = _mm256_add_epi32(
        _mm256_mullo_epi32(
            _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)lo), lane),
            phi),
        k0);
    const __m256i step = _mm256_set1_epi32((int)(8u * 0x9E3779B9u));
    size_t i = lo;
    for (; i + 8 <= hi; i += 8, hashed = _mm256_add_epi32(hashed, step)) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv);
        __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        /* min/max hand back their second operand for a NaN: the bound,
         * its level replaced by 0 below. */
        v = _mm256_max_ps(_mm256_min_ps(v, vtop), vbot);
        __m256 f = _mm256_floor_ps(v);
        __m256 u = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_srli_epi32(avx2_mix(hashed), 8)), unit);
        __m256 up = _mm256_cmp_ps(u, _mm256_sub_ps(v, f), _CMP_LT_OQ);
        __m256i r = _mm256_sub_epi32(_mm256_cvtps_epi32(f),
                                     _mm256_castps_si256(up));
        r = _mm256_andnot_si256(_mm256_castps_si256(nan), r);
        __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(r),
                                      _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(void *)(out + (i - lo)),
                         _mm_packs_epi16(w16, w16));
    }
    return i;
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512i
avx512_mix(__m512i x)
{
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bu));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

/* avx2_round 16 at a time: the same operations, so the same bits, the
 * compare in a mask register. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static size_t
avx512_round(const float *x, size_t lo, size_t hi, float inv, float top,
             uint32_t key, int8_t *out)
{
    const __m512 vinv = _mm512_set1_ps(inv), vtop = _mm512_set1_ps(top),
                 vbot = _mm512_set1_ps(-top), unit = _mm512_set1_ps(0x1p-24f);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i k0 = _mm512_set1_epi32((int)key),
                  phi = _mm512_set1_epi32((int)0x9E3779B9u),
                  lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                           11, 12, 13, 14, 15);
    /* i * phi + k0 for the lanes, kept up to date by adding 16 * phi: the
     * same value mod 2^32 with one multiplication fewer a step. */
    __m512i hashed = _mm512_add_epi32(
        _mm512_mullo_epi32(
            _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)lo), lane),
            phi),
        k0);
    const __m512i step = _mm512_set1_epi32((int)(16u * 0x9E3779B9u));
    size_t i = lo;
    for (; i + 16 <= hi; i += 16, hashed = _mm512_add_epi32(hashed, step)) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
        __mmask16 number = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        v = _mm512_max_ps(_mm512_min_ps(v, vtop), vbot);
        __m512 f = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF |
                                               _MM_FROUND_NO_EXC);
        __m512 u = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_srli_epi32(avx512_mix(hashed), 8)),
            unit);
        __mmask16 up = _mm512_cmp_ps_mask(u, _mm512_sub_ps(v, f), _CMP_LT_OQ);
        __m512i fi = _mm512_cvtps_epi32(f);
        __m512i r = _mm512_mask_add_epi32(fi, up, fi, one);
        _mm_storeu_si128((__m128i *)(void *)(out + (i - lo)),
                         _mm512_cvtepi32_epi8(_mm512_maskz_mov_epi32(number, r)));
    }
    return i;
}

/* 8 codes of `bits` bits from p, sign-extended into the lanes: lane k's
 * code moved to the top of the lane, then shifted down arithmetically.
 * The load has a constant size for each width (a memcpy of `bits` bytes
 * would be a call per 8 elements). */
__attribute__((target("avx2"))) static inline __m256i
avx2_codes(const uint8_t *p, int bits, __m256i up, __m128i down)
{
    uint32_t word = 0;
    if (bits == 4)
        memcpy(&word, p, 4);
    else {
        uint16_t half;
        memcpy(&half, p, 2);
        word = half;
    }
    return _mm256_sra_epi32(_mm256_sllv_epi32(_mm256_set1_epi32((int)word), up),
                            down);
}

/* Unpacks [lo, hi), lo on a byte boundary, 8 at a time; returns where it
 * stopped. */
__attribute__((target("avx2"))) static size_t
avx2_unpack(const uint8_t *packed, size_t lo, size_t hi, int bits,
            float scale, float beta, float *y)
{
    const __m256 vs = _mm256_set1_ps(scale), vb = _mm256_set1_ps(beta);
    const __m256i up = _mm256_sub_epi32(
        _mm256_set1_epi32(32 - bits),
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                           _mm256_set1_epi32(bits)));
    const __m128i down = _mm_cvtsi32_si128(32 - bits);
    size_t i = lo;
    if (beta == 0.0f)
        for (; i + 8 <= hi; i += 8) {
            __m256i c = avx2_codes(packed + i * (size_t)bits / 8, bits, up,
                                   down);
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(c), vs));
        }
    else
        for (; i + 8 <= hi; i += 8) {
            __m256i c = avx2_codes(packed + i * (size_t)bits / 8, bits, up,
                                   down);
            __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(c), vs);
            _mm256_storeu_ps(
                y + i, _mm256_add_ps(_mm256_mul_ps(vb, _mm256_loadu_ps(y + i)),
                                     d));
        }
    return i;
}

/* Packs the whole 32-element blocks of q[0, n) (bits 4: 16 bytes each,
 * bits 2: 8): the codes masked to `bits` bits, then pairs (and pairs of
 * pairs) joined by multiply-adds with 1 and 2^bits, which cannot carry
 * into each other; returns the elements done. */
__attribute__((target("avx2"))) static size_t
avx2_pack(const int8_t *q, size_t n, int bits, uint8_t *out)
{
    const __m256i mask = _mm256_set1_epi8((char)((1 << bits) - 1));
    const __m256i pair = _mm256_set1_epi16((short)(1 | (1 << bits) << 8));
    const __m256i quad = _mm256_set1_epi32(1 | 16 << 16);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i c = _mm256_and_si256(
            _mm256_loadu_si256((const __m256i *)(const void *)(q + i)), mask);
        __m256i w = _mm256_maddubs_epi16(c, pair); /* a + b << bits */
        uint8_t *to = out + i * (size_t)bits / 8;
        if (bits == 4) {
            __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w),
                                         _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128((__m128i *)(void *)to, b);
        } else {
            __m256i d = _mm256_madd_epi16(w, quad); /* ab + cd << 4 */
            __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(d),
                                        _mm256_extracti128_si256(d, 1));
            _mm_storel_epi64((__m128i *)(void *)to, _mm_packus_epi16(h, h));
        }
    }
    return i;
}

/* 16 codes of `bits` bits from p as the lanes' table indices: each lane
 * gets its code's byte (a shuffle), shifted to put the code in its low
 * bits; a permute uses only an index's low 4 bits, so the codes above
 * them need no mask (2 bits: the table repeats every 4). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512i
avx512_codes(const uint8_t *p, int bits)
{
    __m128i raw, spread;
    if (bits == 4) {
        uint64_t word;
        memcpy(&word, p, 8);
        raw = _mm_cvtsi64_si128((long long)word);
        spread = _mm_shuffle_epi8(
            raw, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
        return _mm512_srlv_epi32(
            _mm512_cvtepu8_epi32(spread),
            _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
    }
    uint32_t word;
    memcpy(&word, p, 4);
    raw = _mm_cvtsi32_si128((int)word);
    spread = _mm_shuffle_epi8(
        raw, _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    return _mm512_srlv_epi32(
        _mm512_cvtepu8_epi32(spread),
        _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6));
}

/* Sums messages [0, count) onto y[lo, hi) of one chunk (lo on a byte
 * boundary), 16 elements a step, returns where it stopped.  Each
 * message's 16 possible terms, code times its chunk's scale, are a table
 * made once per chunk with the same f32 multiply as the portable
 * decoding; the terms are added in message order in a register and y is
 * written once: the same operations per element, so the same bits.
 * Message r's codes and chunk scale are r * stride bytes on. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static size_t
avx512_unpack(const uint8_t *packed, const float *scale, int count,
              size_t stride, size_t lo, size_t hi, int bits, float beta,
              float *y)
{
    /* Sign-extended codes by index (2 bits: 0, 1, -2, -1, four times). */
    const __m512 codes =
        bits == 4 ? _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4,
                                   -3, -2, -1)
                  : _mm512_setr_ps(0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1,
                                   0, 1, -2, -1);
    const __m512 vb = _mm512_set1_ps(beta);
    size_t i = lo;
    /* Eight messages' tables at a time in registers; the next eight go
     * onto what the first wrote (y holds the same f32 as the register). */
    for (int r0 = 0; r0 < count; r0 += 8) {
        int m = count - r0 < 8 ? count - r0 : 8;
        __m512 table[8];
        const uint8_t *from[8];
        for (int k = 0; k < m; k++) {
            float sc = *ddph__quant_message_scales(scale, r0 + k, stride);
            table[k] = _mm512_mul_ps(codes, _mm512_set1_ps(sc));
            from[k] = packed + (size_t)(r0 + k) * stride;
        }
        int onto = r0 > 0 || beta != 0.0f;
        __m512 b = r0 > 0 ? _mm512_set1_ps(1.0f) : vb;
        for (i = lo; i + 16 <= hi; i += 16) {
            size_t byte = i * (size_t)bits / 8;
            __m512 acc = _mm512_permutexvar_ps(avx512_codes(from[0] + byte, bits),
                                               table[0]);
            if (onto)
                acc = _mm512_add_ps(_mm512_mul_ps(b, _mm512_loadu_ps(y + i)),
                                    acc);
            for (int k = 1; k < m; k++)
                acc = _mm512_add_ps(
                    acc, _mm512_permutexvar_ps(
                             avx512_codes(from[k] + byte, bits), table[k]));
            _mm512_storeu_ps(y + i, acc);
        }
    }
    return i;
}
#endif

/* Rounds the elements [lo, hi) of one chunk of scale `scale`, element i's
 * level to out[i - lo]. */
static void round_chunk(ddph_simd_path path, const float *x, size_t lo,
                        size_t hi, float scale, float top, uint32_t key,
                        int8_t *out)
{
    if (!ddph__quant_scale_usable(scale)) {
        memset(out, 0, hi - lo);
        return;
    }
    float inv = ddph__quant_inverse(scale);
    size_t i = lo;
#ifdef HAVE_X86_PATHS
    if (path == DDPH_SIMD_AVX512)
        i = avx512_round(x, lo, hi, inv, top, key, out);
    else if (path == DDPH_SIMD_AVX2)
        i = avx2_round(x, lo, hi, inv, top, key, out);
#else
    (void)path;
#endif
    round_each(x, lo, i, hi, inv, top, key, out);
}

void ddph__cpu_round_stochastic(ddph_simd_path path, const float *x, size_t n,
                                size_t chunk, const float *scales, int levels,
                                uint64_t seed, int8_t *q)
{
    float top = (float)levels;
    uint32_t key = ddph__quant_key(seed);
    for (size_t lo = 0, j = 0; lo < n; lo += chunk, j++) {
        size_t hi = n - lo < chunk ? n : lo + chunk;
        round_chunk(path, x, lo, hi, scales[j], top, key, q + lo);
    }
}

void ddph__cpu_pack_bits(const int8_t *q, size_t n, int bits, uint8_t *out)
{
    unsigned per = 8u / (unsigned)bits;
    size_t done = 0;
#ifdef HAVE_X86_PATHS
    if (ddph__simd_available(DDPH_SIMD_AVX2))
        done = avx2_pack(q, n, bits, out);
#endif
    /* The rest of the whole bytes with the layout spelled out, then the
     * last byte's codes. */
    size_t full = n / per;
    if (bits == 4)
        for (size_t j = done / 2; j < full; j++)
            out[j] = (uint8_t)(((unsigned)q[2 * j] & 15u) |
                               ((unsigned)q[2 * j + 1] & 15u) << 4);
    else
        for (size_t j = done / 4; j < full; j++)
            out[j] = (uint8_t)(((unsigned)q[4 * j] & 3u) |
                               ((unsigned)q[4 * j + 1] & 3u) << 2 |
                               ((unsigned)q[4 * j + 2] & 3u) << 4 |
                               ((unsigned)q[4 * j + 3] & 3u) << 6);
    if (n % per)
        out[full] = ddph__quant_pack_byte(q, n, full, (unsigned)bits);
}

/* The elements [lo, hi) of one chunk, message by message. */
static void unpack_chunk(ddph_simd_path path, const uint8_t *packed,
                         size_t lo, size_t hi, int bits, const float *scale,
                         int count, size_t stride, float beta, float *y)
{
    size_t per = 8 / (size_t)bits;
    size_t aligned = (lo + per - 1) / per * per;
    aligned = aligned < hi ? aligned : hi;
    /* AVX-512 sums every message in one pass over its part of the chunk;
     * the elements before it (not on a byte) and after it go one by one,
     * message by message below: the same order for each element. */
    size_t simd_hi = aligned;
#ifdef HAVE_X86_PATHS
    if (path == DDPH_SIMD_AVX512)
        simd_hi = avx512_unpack(packed, scale, count, stride, aligned, hi,
                                bits, beta, y);
#else
    (void)path;
#endif
    for (int r = 0; r < count; r++) {
        const uint8_t *codes = packed + (size_t)r * stride;
        float sc = *ddph__quant_message_scales(scale, r, stride);
        float b = r == 0 ? beta : 1.0f;
        unpack_each(codes, lo, aligned, bits, sc, b, y);
        size_t i = simd_hi;
#ifdef HAVE_X86_PATHS
        if (path == DDPH_SIMD_AVX2)
            i = avx2_unpack(codes, aligned, hi, bits, sc, b, y);
#endif
        unpack_each(codes, i, hi, bits, sc, b, y);
    }
}

void ddph__cpu_unpack_bits(ddph_simd_path path, const uint8_t *packed,
                           size_t n, int bits, size_t chunk,
                           const float *scales, int count, size_t stride,
                           float beta, float *y)
{
    /* Every message onto a chunk of y while it is in cache: y goes to
     * memory once, whatever the count. */
    for (size_t lo = 0, j = 0; lo < n; lo += chunk, j++) {
        size_t hi = n - lo < chunk ? n : lo + chunk;
        unpack_chunk(path, packed, lo, hi, bits, scales + j, count, stride,
                     beta, y);
    }
}
