/* cpu_simd.c: see cpu_simd.h.  The x86 paths are compiled with function
 * target attributes, so the library runs on any x86-64 and picks a path
 * at run time. */
#include "build-config.h"

#include "cpu_simd.h"

#include <stdint.h>

#include "cpu_ops.h"

static void scalar_cast(ddph_cast_kind kind, const void *src, void *dst,
                        size_t from, size_t n)
{
    switch (kind) {
    case DDPH_CAST_F32_F16:
        for (size_t i = from; i < n; i++)
            ((uint16_t *)dst)[i] = ddph__f32_to_f16(((const float *)src)[i]);
        return;
    case DDPH_CAST_F16_F32:
        for (size_t i = from; i < n; i++)
            ((float *)dst)[i] = ddph__f16_to_f32(((const uint16_t *)src)[i]);
        return;
    case DDPH_CAST_F32_BF16:
        for (size_t i = from; i < n; i++)
            ((uint16_t *)dst)[i] = ddph__f32_to_bf16(((const float *)src)[i]);
        return;
    case DDPH_CAST_BF16_F32:
        for (size_t i = from; i < n; i++)
            ((float *)dst)[i] = ddph__bf16_to_f32(((const uint16_t *)src)[i]);
        return;
    case DDPH_CAST_COUNT:
        break;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86_PATHS 1

/* ---- AVX2 + F16C: 8 lanes -------------------------------------------------- */

__attribute__((target("avx2,f16c"))) static size_t
avx2_cast(ddph_cast_kind kind, const void *src, void *dst, size_t n)
{
    size_t i = 0;
    const __m256i sign_mask = _mm256_set1_epi32((int)0x80000000u);
    switch (kind) {
    case DDPH_CAST_F32_F16: {
        const __m256i qnan = _mm256_set1_epi32(0x7E00);
        for (; i + 8 <= n; i += 8) {
            __m256 x = _mm256_loadu_ps((const float *)src + i);
            __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
            /* NaN lanes: the canonical quiet NaN with the input's sign. */
            __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
            __m256i canon = _mm256_or_si256(
                _mm256_srli_epi32(_mm256_and_si256(_mm256_castps_si256(x),
                                                   sign_mask),
                                  16),
                qnan);
            __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32),
                                            _mm256_extracti128_si256(nan32, 1));
            __m128i can16 = _mm_packus_epi32(_mm256_castsi256_si128(canon),
                                             _mm256_extracti128_si256(canon, 1));
            h = _mm_blendv_epi8(h, can16, nan16);
            _mm_storeu_si128((__m128i *)((uint16_t *)dst + i), h);
        }
        return i;
    }
    case DDPH_CAST_F16_F32:
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
            _mm256_storeu_ps((float *)dst + i, _mm256_cvtph_ps(h));
        }
        return i;
    case DDPH_CAST_F32_BF16: {
        const __m256i bias = _mm256_set1_epi32(0x7FFF);
        const __m256i one = _mm256_set1_epi32(1);
        const __m256i qnan = _mm256_set1_epi32(0x7FC0);
        for (; i + 16 <= n; i += 16) {
            __m256i r[2];
            for (int k = 0; k < 2; k++) {
                __m256 x = _mm256_loadu_ps((const float *)src + i + 8 * k);
                __m256i u = _mm256_castps_si256(x);
                __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
                __m256i v = _mm256_srli_epi32(
                    _mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
                __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
                r[k] = _mm256_blendv_epi8(v, qnan, nan);
            }
            /* packus works per 128-bit lane: restore the order after. */
            __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]),
                                                 0xD8);
            _mm256_storeu_si256((__m256i *)((uint16_t *)dst + i), p);
        }
        return i;
    }
    case DDPH_CAST_BF16_F32:
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
            __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
            _mm256_storeu_si256((__m256i *)((float *)dst + i), u);
        }
        return i;
    case DDPH_CAST_COUNT:
        break;
    }
    return 0;
}

/* ---- AVX-512 F/BW/VL: 16 lanes ------------------------------------------------ */

__attribute__((target("avx512f,avx512bw,avx512vl"))) static size_t
avx512_cast(ddph_cast_kind kind, const void *src, void *dst, size_t n)
{
    size_t i = 0;
    switch (kind) {
    case DDPH_CAST_F32_F16: {
        const __m512i sign_mask = _mm512_set1_epi32((int)0x80000000u);
        const __m512i qnan = _mm512_set1_epi32(0x7E00);
        for (; i + 16 <= n; i += 16) {
            __m512 x = _mm512_loadu_ps((const float *)src + i);
            __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
            __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            __m512i canon = _mm512_or_si512(
                _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(x),
                                                   sign_mask),
                                  16),
                qnan);
            h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(canon));
            _mm256_storeu_si256((__m256i *)((uint16_t *)dst + i), h);
        }
        return i;
    }
    case DDPH_CAST_F16_F32:
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i));
            _mm512_storeu_ps((float *)dst + i, _mm512_cvtph_ps(h));
        }
        return i;
    case DDPH_CAST_F32_BF16: {
        const __m512i bias = _mm512_set1_epi32(0x7FFF);
        const __m512i one = _mm512_set1_epi32(1);
        const __m512i qnan = _mm512_set1_epi32(0x7FC0);
        for (; i + 16 <= n; i += 16) {
            __m512 x = _mm512_loadu_ps((const float *)src + i);
            __m512i u = _mm512_castps_si512(x);
            __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
            __m512i v = _mm512_srli_epi32(
                _mm512_add_epi32(_mm512_add_epi32(u, bias), lsb), 16);
            v = _mm512_mask_mov_epi32(v, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                                      qnan);
            _mm256_storeu_si256((__m256i *)((uint16_t *)dst + i),
                                _mm512_cvtepi32_epi16(v));
        }
        return i;
    }
    case DDPH_CAST_BF16_F32:
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i));
            __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
            _mm512_storeu_si512((float *)dst + i, u);
        }
        return i;
    case DDPH_CAST_COUNT:
        break;
    }
    return 0;
}
#endif

#ifdef HAVE_X86_PATHS
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
 * does not know "f16c". */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int ddph__simd_available(ddph_simd_path path)
{
    switch (path) {
    case DDPH_SIMD_SCALAR:
        return 1;
#ifdef HAVE_X86_PATHS
    case DDPH_SIMD_AVX2:
        return __builtin_cpu_supports("avx2") && has_f16c();
    case DDPH_SIMD_AVX512:
        return __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#else
    case DDPH_SIMD_AVX2:
    case DDPH_SIMD_AVX512:
        return 0;
#endif
    case DDPH_SIMD_COUNT:
        break;
    }
    return 0;
}

ddph_simd_path ddph__simd_best(void)
{
    for (int p = DDPH_SIMD_COUNT - 1; p > 0; p--)
        if (ddph__simd_available((ddph_simd_path)p))
            return (ddph_simd_path)p;
    return DDPH_SIMD_SCALAR;
}

const char *ddph__simd_name(ddph_simd_path path)
{
    static const char *const names[DDPH_SIMD_COUNT] = {"scalar", "avx2",
                                                       "avx512"};
    return (unsigned)path < DDPH_SIMD_COUNT ? names[path] : "?";
}

int ddph__cast_kind_of(ddph_dtype src, ddph_dtype dst, ddph_cast_kind *out)
{
    if (src == DDPH_F32 && dst == DDPH_F16)
        *out = DDPH_CAST_F32_F16;
    else if (src == DDPH_F16 && dst == DDPH_F32)
        *out = DDPH_CAST_F16_F32;
    else if (src == DDPH_F32 && dst == DDPH_BF16)
        *out = DDPH_CAST_F32_BF16;
    else if (src == DDPH_BF16 && dst == DDPH_F32)
        *out = DDPH_CAST_BF16_F32;
    else
        return 0;
    return 1;
}

void ddph__cast_run(ddph_simd_path path, ddph_cast_kind kind, const void *src,
                    void *dst, size_t n)
{
    size_t done = 0;
#ifdef HAVE_X86_PATHS
    if (path == DDPH_SIMD_AVX512)
        done = avx512_cast(kind, src, dst, n);
    else if (path == DDPH_SIMD_AVX2)
        done = avx2_cast(kind, src, dst, n);
#else
    (void)path;
#endif
    scalar_cast(kind, src, dst, done, n);
}
