/* cpu_simd.h: the vectorised f32 <-> f16/bf16 casts and their run-time
 * choice.  Every path gives results bit-identical to the scalar functions
 * of cpu_ops.h (round to nearest even, canonical quiet NaNs as PyTorch's
 * c10::Half and c10::BFloat16 produce, subnormals exact), which the tests
 * check path by path.
 *
 *   scalar   portable C
 *   avx2     AVX2 + F16C (vcvtps2ph / vcvtph2ps), 8 lanes
 *   avx512   AVX-512 F/BW/VL, 16 lanes
 *
 * AVX512-BF16's vcvtneps2bf16 is not used: it flushes subnormal inputs to
 * zero, which PyTorch's conversion does not; the avx512 path rounds with
 * integer arithmetic instead.  AVX512-FP16 adds nothing for these casts
 * (vcvtps2ph is already in AVX-512F). */
#ifndef DDPH_CPU_SIMD_H
#define DDPH_CPU_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "support/util.h"

typedef enum ddph_simd_path {
    DDPH_SIMD_SCALAR = 0,
    DDPH_SIMD_AVX2 = 1,
    DDPH_SIMD_AVX512 = 2,
    DDPH_SIMD_COUNT
} ddph_simd_path;

typedef enum ddph_cast_kind {
    DDPH_CAST_F32_F16 = 0,
    DDPH_CAST_F16_F32 = 1,
    DDPH_CAST_F32_BF16 = 2,
    DDPH_CAST_BF16_F32 = 3,
    DDPH_CAST_COUNT
} ddph_cast_kind;

/* Whether this CPU runs the path (CPUID, through the compiler's
 * __builtin_cpu_supports). */
int ddph__simd_available(ddph_simd_path path);
/* The widest available path. */
ddph_simd_path ddph__simd_best(void);
const char *ddph__simd_name(ddph_simd_path path);
/* The kind for a dtype pair, when it is one of the four. */
int ddph__cast_kind_of(ddph_dtype src, ddph_dtype dst, ddph_cast_kind *out);
/* Runs one cast on `path` (which must be available). */
void ddph__cast_run(ddph_simd_path path, ddph_cast_kind kind, const void *src,
                    void *dst, size_t n);

/* In-place half-precision arithmetic, widened to float and rounded back
 * once as the casts round: a[i] = a[i] + b[i] (ADD), a[i] * x (MUL) or
 * a[i] / x (DIV), a and b f16 (bf16 = 0) or bf16.  Runs the leading
 * elements the path vectorises and returns how many (0 on the scalar
 * path); the caller finishes the rest. */
typedef enum ddph_half_op {
    DDPH_HALF_ADD = 0,
    DDPH_HALF_MUL = 1,
    DDPH_HALF_DIV = 2
} ddph_half_op;
size_t ddph__half_op_run(ddph_simd_path path, ddph_half_op op, int bf16,
                         uint16_t *a, const uint16_t *b, float x, size_t n);

#endif
