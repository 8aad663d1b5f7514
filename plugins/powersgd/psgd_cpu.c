/* psgd_cpu.c: see psgd_cpu.h.  Written with GCC/clang vector extensions
 * (8 floats) rather than intrinsics, compiled twice: for the baseline ISA
 * and, on x86-64, for AVX2, picked at run time.  No FMA: each product is
 * rounded before it is added, as in the scalar tail. */
#include "psgd_cpu.h"

#include <string.h>

typedef float v8f __attribute__((vector_size(8 * sizeof(float))));

/* Unaligned 8-float loads and stores, by memcpy (written inline: a helper
 * returning a vector would change the ABI on a pre-AVX build). */
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v8f))
#define STORE8(p, v) memcpy((p), &(v), sizeof(v8f))

static inline __attribute__((always_inline)) void
reconstruct_rows(size_t h, size_t m, size_t r, const float *p,
                 const float *qt, float *out, float *err)
{
    for (size_t i = 0; i < h; i++) {
        const float *pi = p + i * r;
        float *o = out + i * m;
        float *e = err ? err + i * m : NULL;
        size_t j = 0;
        for (; j + 8 <= m; j += 8) {
            v8f q, x;
            LOAD8(q, qt + j);
            x = pi[0] * q;
            for (size_t k = 1; k < r; k++) {
                LOAD8(q, qt + k * m + j);
                x += pi[k] * q;
            }
            STORE8(o + j, x);
            if (e) {
                v8f y;
                LOAD8(y, e + j);
                y -= x;
                STORE8(e + j, y);
            }
        }
        for (; j < m; j++) {
            float x = pi[0] * qt[j];
            for (size_t k = 1; k < r; k++)
                x += pi[k] * qt[k * m + j];
            o[j] = x;
            if (e)
                e[j] -= x;
        }
    }
}

static void reconstruct_base(size_t h, size_t m, size_t r, const float *p,
                             const float *qt, float *out, float *err)
{
    reconstruct_rows(h, m, r, p, qt, out, err);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void
reconstruct_avx2(size_t h, size_t m, size_t r, const float *p,
                 const float *qt, float *out, float *err)
{
    reconstruct_rows(h, m, r, p, qt, out, err);
}
#endif

void psgd_cpu_reconstruct(size_t h, size_t m, size_t r, const float *p,
                          const float *qt, float *out, float *err)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        reconstruct_avx2(h, m, r, p, qt, out, err);
        return;
    }
#endif
    reconstruct_base(h, m, r, p, qt, out, err);
}
