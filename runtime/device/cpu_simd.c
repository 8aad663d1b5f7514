/* cpu_simd.c: see cpu_simd.h.  The x86 paths are compiled with function
 * target attributes, so the library runs on any x86-64 and picks a path
 * at run time. */
#include "build-config.h"

#include "device/cpu_simd.h"

#include <stdatomic.h>
#include <stdint.h>

#include "device/cpu_ops.h"

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

/* One 8-lane block of half values widened to float, and narrowed back: round to
 * nearest even, a NaN becomes the canonical quiet NaN with its sign. */
__attribute__((target("avx2,f16c"))) static inline __m256
avx2_widen(int bf16, const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (!bf16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2,f16c"))) static inline void
avx2_narrow(int bf16, uint16_t *p, __m256 x)
{
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m256i u = _mm256_castps_si256(x);
    if (!bf16) {
        __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
        __m256i canon = _mm256_or_si256(
            _mm256_srli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(
                                                      (int)0x80000000u)),
                              16),
            _mm256_set1_epi32(0x7E00));
        __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan),
                                        _mm256_extracti128_si256(nan, 1));
        __m128i can16 = _mm_packus_epi32(_mm256_castsi256_si128(canon),
                                         _mm256_extracti128_si256(canon, 1));
        _mm_storeu_si128((__m128i *)p, _mm_blendv_epi8(h, can16, nan16));
        return;
    }
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16),
                                   _mm256_set1_epi32(1));
    __m256i v = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb),
        16);
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC0), nan);
    _mm_storeu_si128((__m128i *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(v),
                                      _mm256_extracti128_si256(v, 1)));
}


__attribute__((target("avx2,f16c"))) static size_t
avx2_cast(ddph_cast_kind kind, const void *src, void *dst, size_t n)
{
    const float *f = src;
    float *fo = dst;
    const uint16_t *h = src;
    uint16_t *ho = dst;
    int bf16 = kind == DDPH_CAST_F32_BF16 || kind == DDPH_CAST_BF16_F32;
    size_t i = 0;
    switch (kind) {
    case DDPH_CAST_F32_F16:
    case DDPH_CAST_F32_BF16:
        for (; i + 8 <= n; i += 8)
            avx2_narrow(bf16, ho + i, _mm256_loadu_ps(f + i));
        return i;
    case DDPH_CAST_F16_F32:
    case DDPH_CAST_BF16_F32:
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(fo + i, avx2_widen(bf16, h + i));
        return i;
    case DDPH_CAST_COUNT:
        break;
    }
    return 0;
}

/* The three loops of a fused half-precision operation: widen, combine in
 * float, narrow, all in registers (a block path through a float buffer
 * costs three passes; this is one). */
#define HALF_OP_LOOPS(W, widen, narrow, add, mul, div, set1)                 \
    switch (op) {                                                            \
    case DDPH_HALF_ADD:                                                      \
        for (; i + W <= n; i += W)                                           \
            narrow(bf16, a + i, add(widen(bf16, a + i), widen(bf16, b + i)));\
        break;                                                               \
    case DDPH_HALF_MUL:                                                      \
        for (; i + W <= n; i += W)                                           \
            narrow(bf16, a + i, mul(widen(bf16, a + i), set1(x)));           \
        break;                                                               \
    case DDPH_HALF_DIV:                                                      \
        for (; i + W <= n; i += W)                                           \
            narrow(bf16, a + i, div(widen(bf16, a + i), set1(x)));           \
        break;                                                               \
    }

__attribute__((target("avx2,f16c"))) static size_t
avx2_half_op(ddph_half_op op, int bf16, uint16_t *a, const uint16_t *b,
             float x, size_t n)
{
    size_t i = 0;
    HALF_OP_LOOPS(8, avx2_widen, avx2_narrow, _mm256_add_ps, _mm256_mul_ps,
                  _mm256_div_ps, _mm256_set1_ps)
    return i;
}

/* ---- AVX-512 F/BW/VL: 16 lanes ------------------------------------------------ */

/* The same for 16 lanes. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512
avx512_widen(int bf16, const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (!bf16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline void
avx512_narrow(int bf16, uint16_t *p, __m512 x)
{
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512i u = _mm512_castps_si512(x);
    if (!bf16) {
        __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
        __m512i canon = _mm512_or_si512(
            _mm512_srli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(
                                                      (int)0x80000000u)),
                              16),
            _mm512_set1_epi32(0x7E00));
        h = _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(canon));
        _mm256_storeu_si256((__m256i *)p, h);
        return;
    }
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                   _mm512_set1_epi32(1));
    __m512i v = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb),
        16);
    v = _mm512_mask_mov_epi32(v, nan, _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(v));
}


__attribute__((target("avx512f,avx512bw,avx512vl"))) static size_t
avx512_cast(ddph_cast_kind kind, const void *src, void *dst, size_t n)
{
    const float *f = src;
    float *fo = dst;
    const uint16_t *h = src;
    uint16_t *ho = dst;
    int bf16 = kind == DDPH_CAST_F32_BF16 || kind == DDPH_CAST_BF16_F32;
    size_t i = 0;
    switch (kind) {
    case DDPH_CAST_F32_F16:
    case DDPH_CAST_F32_BF16:
        for (; i + 16 <= n; i += 16)
            avx512_narrow(bf16, ho + i, _mm512_loadu_ps(f + i));
        return i;
    case DDPH_CAST_F16_F32:
    case DDPH_CAST_BF16_F32:
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(fo + i, avx512_widen(bf16, h + i));
        return i;
    case DDPH_CAST_COUNT:
        break;
    }
    return 0;
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static size_t
avx512_half_op(ddph_half_op op, int bf16, uint16_t *a, const uint16_t *b,
               float x, size_t n)
{
    size_t i = 0;
    HALF_OP_LOOPS(16, avx512_widen, avx512_narrow, _mm512_add_ps,
                  _mm512_mul_ps, _mm512_div_ps, _mm512_set1_ps)
    return i;
}
#undef HALF_OP_LOOPS
#endif

#ifdef HAVE_X86_PATHS
/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
 * does not know "f16c".  Asked once: CPUID traps to the hypervisor in a
 * virtual machine (about 10 us), and the services ask on every call.
 * Racing first calls store the same answer. */
static int has_f16c(void)
{
    static _Atomic int known; /* 0 not asked, 1 no, 2 yes */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k == 0) {
        unsigned a, b, c, d;
        k = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) ? 2 : 1;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k == 2;
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

size_t ddph__half_op_run(ddph_simd_path path, ddph_half_op op, int bf16,
                         uint16_t *a, const uint16_t *b, float x, size_t n)
{
#ifdef HAVE_X86_PATHS
    if (path == DDPH_SIMD_AVX512)
        return avx512_half_op(op, bf16, a, b, x, n);
    if (path == DDPH_SIMD_AVX2)
        return avx2_half_op(op, bf16, a, b, x, n);
#else
    (void)path, (void)op, (void)bf16, (void)a, (void)b, (void)x, (void)n;
#endif
    return 0;
}
