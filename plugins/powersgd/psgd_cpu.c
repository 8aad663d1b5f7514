/* psgd_cpu.c: see psgd_cpu.h.  Written with GCC/clang vector extensions
 * (8 floats) rather than intrinsics, compiled twice: for the baseline ISA
 * and, on x86-64, for AVX2, picked at run time.  No FMA: each product is
 * rounded before it is added, as in the scalar tail.  The blocking below
 * only chooses which elements are computed together; each element's sum
 * is the plain loop's, so no block size, vector width or CPU changes a
 * bit. */
#include "psgd_cpu.h"

#include <string.h>

typedef float v8f __attribute__((vector_size(8 * sizeof(float))));

/* Unaligned 8-float loads and stores, by memcpy (written inline: a helper
 * returning a vector would change the ABI on a pre-AVX build). */
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v8f))
#define STORE8(p, v) memcpy((p), &(v), sizeof(v8f))
/* out's 8 floats at o, and err's at o - out + err (when err is there)
 * less them. */
#define PUT8(o, out, err, x)                                                \
    do {                                                                    \
        STORE8((o), (x));                                                   \
        if (err) {                                                          \
            float *e_ = (err) + ((o) - (out));                              \
            v8f y_;                                                         \
            LOAD8(y_, e_);                                                  \
            y_ -= (x);                                                      \
            STORE8(e_, y_);                                                 \
        }                                                                   \
    } while (0)

/* Columns per strip: Q^T is packed as strips of 16 columns, each strip's
 * r rows of 16 floats contiguous, so the sweep reads it in order (rows of
 * Q^T a power of two apart would fall into the same cache sets). */
#define STRIP 16
/* Bytes of packed Q^T a panel of strips spans: it stays in the L2 cache
 * while every row of P passes over it. */
#define PANEL_BYTES ((size_t)128 << 10)

/* Rows [0, h) of a strip of w columns at column j (s: its r x w floats):
 * one row, then 8 columns, at a time. */
static inline __attribute__((always_inline)) void
strip_plain(size_t h, size_t m, size_t r, const float *p, const float *s,
            size_t w, float *out, float *err, size_t j)
{
    for (size_t i = 0; i < h; i++) {
        const float *pi = p + i * r;
        float *o = out + i * m + j;
        size_t c = 0;
        for (; c + 8 <= w; c += 8) {
            v8f q, x;
            LOAD8(q, s + c);
            x = pi[0] * q;
            for (size_t k = 1; k < r; k++) {
                LOAD8(q, s + k * w + c);
                x += pi[k] * q;
            }
            PUT8(o + c, out, err, x);
        }
        for (; c < w; c++) {
            float x = pi[0] * s[c];
            for (size_t k = 1; k < r; k++)
                x += pi[k] * s[k * w + c];
            o[c] = x;
            if (err)
                err[o + c - out] -= x;
        }
    }
}

/* 4 rows by a whole strip at column j: eight independent sums in
 * registers, each load of Q^T used for four rows, each element of P for
 * 16 columns. */
static inline __attribute__((always_inline)) void
block_4x16(size_t m, size_t r, const float *p, const float *s, float *out,
           float *err, size_t j)
{
    const float *p0 = p, *p1 = p + r, *p2 = p + 2 * r, *p3 = p + 3 * r;
    v8f qa, qb;
    LOAD8(qa, s);
    LOAD8(qb, s + 8);
    v8f a0 = p0[0] * qa, b0 = p0[0] * qb, a1 = p1[0] * qa, b1 = p1[0] * qb;
    v8f a2 = p2[0] * qa, b2 = p2[0] * qb, a3 = p3[0] * qa, b3 = p3[0] * qb;
    for (size_t k = 1; k < r; k++) {
        LOAD8(qa, s + k * STRIP);
        LOAD8(qb, s + k * STRIP + 8);
        a0 += p0[k] * qa;
        b0 += p0[k] * qb;
        a1 += p1[k] * qa;
        b1 += p1[k] * qb;
        a2 += p2[k] * qa;
        b2 += p2[k] * qb;
        a3 += p3[k] * qa;
        b3 += p3[k] * qb;
    }
    float *o = out + j;
    PUT8(o, out, err, a0);
    PUT8(o + 8, out, err, b0);
    PUT8(o + m, out, err, a1);
    PUT8(o + m + 8, out, err, b1);
    PUT8(o + 2 * m, out, err, a2);
    PUT8(o + 2 * m + 8, out, err, b2);
    PUT8(o + 3 * m, out, err, a3);
    PUT8(o + 3 * m + 8, out, err, b3);
}

/* The strip at column j of the packed Q^T (the last one may be narrower). */
static const float *strip_at(const float *packed, size_t r, size_t j)
{
    return packed + j * r;
}

/* Up to this rank the sweep is bound by memory, not by the products:
 * one row at a time, written in order, is faster than blocks of four rows
 * (rank 4, 1024 x 1024, one core: 0.28 ms against 0.34). */
#define ROW_SWEEP_MAX_RANK 4

static inline __attribute__((always_inline)) void
reconstruct_rows(size_t h, size_t m, size_t r, const float *p,
                 const float *packed, float *out, float *err)
{
    if (r <= ROW_SWEEP_MAX_RANK) {
        for (size_t i = 0; i < h; i++) {
            const float *pi = p + i * r;
            float *o = out + i * m, *e = err ? err + i * m : NULL;
            size_t j = 0;
            for (; j + STRIP <= m; j += STRIP) /* a constant width */
                strip_plain(1, m, r, pi, strip_at(packed, r, j), STRIP, o,
                            e, j);
            if (j < m)
                strip_plain(1, m, r, pi, strip_at(packed, r, j), m - j, o,
                            e, j);
        }
        return;
    }
    size_t panel = PANEL_BYTES / (r * sizeof(float)) / STRIP * STRIP;
    panel = panel < STRIP ? STRIP : panel;
    for (size_t j0 = 0; j0 < m; j0 += panel) {
        size_t to = m - j0 < panel ? m : j0 + panel;
        size_t i = 0;
        for (; i + 4 <= h; i += 4) {
            const float *pi = p + i * r;
            float *o = out + i * m, *e = err ? err + i * m : NULL;
            size_t j = j0;
            for (; j + STRIP <= to; j += STRIP)
                block_4x16(m, r, pi, strip_at(packed, r, j), o, e, j);
            if (j < to)
                strip_plain(4, m, r, pi, strip_at(packed, r, j), to - j, o,
                            e, j);
        }
        if (i == h)
            continue;
        for (size_t j = j0; j < to; j += STRIP) {
            size_t w = to - j < STRIP ? to - j : STRIP;
            strip_plain(h - i, m, r, p + i * r, strip_at(packed, r, j), w,
                        out + i * m, err ? err + i * m : NULL, j);
        }
    }
}

static void reconstruct_base(size_t h, size_t m, size_t r, const float *p,
                             const float *packed, float *out, float *err)
{
    reconstruct_rows(h, m, r, p, packed, out, err);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void
reconstruct_avx2(size_t h, size_t m, size_t r, const float *p,
                 const float *packed, float *out, float *err)
{
    reconstruct_rows(h, m, r, p, packed, out, err);
}
#endif

void psgd_cpu_pack(size_t m, size_t r, const float *q, float *packed)
{
    for (size_t j = 0; j < m; j += STRIP) {
        size_t w = m - j < STRIP ? m - j : STRIP;
        float *s = packed + j * r;
        for (size_t c = 0; c < w; c++)
            for (size_t k = 0; k < r; k++)
                s[k * w + c] = q[(j + c) * r + k];
    }
}

void psgd_cpu_reconstruct(size_t h, size_t m, size_t r, const float *p,
                          const float *packed, float *out, float *err)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        reconstruct_avx2(h, m, r, p, packed, out, err);
        return;
    }
#endif
    reconstruct_base(h, m, r, p, packed, out, err);
}
