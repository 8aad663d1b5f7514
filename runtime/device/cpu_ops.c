/* cpu_ops.c: see cpu_ops.h. */
#include "build-config.h"

#include "device/cpu_ops.h"
#include "device/cpu_portable.h"
#include "device/cpu_simd.h"

#include <cblas.h>
#include <sched.h>
#include <stdlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ddph__f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx > 0x7F800000u) /* NaN: the canonical quiet NaN, as c10::Half */
        return (uint16_t)(sign | 0x7E00u);
    if (absx >= 0x477FF000u) /* rounds to >= 65520: Inf */
        return (uint16_t)(sign | 0x7C00u);
    if (absx < 0x38800000u) { /* below 2^-14: subnormal half or zero */
        /* Adding 0.5 aligns the half's subnormal grid to float's ulp, so
         * the FPU's own round-to-nearest-even does the rounding. */
        float r = bits_f32(absx) + 0.5f;
        return (uint16_t)(sign | (f32_bits(r) - 0x3F000000u));
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xC8000FFFu + mant_odd; /* rebias exponent (-112 << 23) + RNE */
    return (uint16_t)(sign | (absx >> 13));
}

float ddph__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) /* Inf, or NaN made quiet (as the FPU and c10 do) */
        return bits_f32(sign | 0x7F800000u | (mant << 13) |
                        (mant ? 0x00400000u : 0));
    if (exp == 0) { /* zero / subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t ddph__f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: quiet, as c10::BFloat16 */
        return 0x7FC0u;
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float ddph__bf16_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

/* ---- generic element access (the slow, obviously right path) ------------- */

static double load(const void *p, ddph_dtype t, size_t i)
{
    switch (t) {
    case DDPH_F32:
        return ((const float *)p)[i];
    case DDPH_F64:
        return ((const double *)p)[i];
    case DDPH_F16:
        return ddph__f16_to_f32(((const uint16_t *)p)[i]);
    case DDPH_BF16:
        return ddph__bf16_to_f32(((const uint16_t *)p)[i]);
    default: /* integer dtypes: refused by the callers */
        break;
    }
    return 0;
}

/* Values from f16/bf16/f32 arrive as exact floats; rounding to the half
 * types goes through float, which is exact for them (no double rounding). */
static void store(void *p, ddph_dtype t, size_t i, double v)
{
    switch (t) {
    case DDPH_F32:
        ((float *)p)[i] = (float)v;
        return;
    case DDPH_F64:
        ((double *)p)[i] = v;
        return;
    case DDPH_F16:
        ((uint16_t *)p)[i] = ddph__f32_to_f16((float)v);
        return;
    case DDPH_BF16:
        ((uint16_t *)p)[i] = ddph__f32_to_bf16((float)v);
        return;
    default: /* integer dtypes: refused by the callers */
        break;
    }
}

int ddph__cpu_all_finite(const void *buf, ddph_dtype dtype, size_t n,
                         size_t *first_bad)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(load(buf, dtype, i))) {
            *first_bad = i;
            return 0;
        }
    return 1;
}

/* Elements per block when half types are widened to float on the stack. */
#define HALF_BLOCK 512

static int valid_dtype(ddph_dtype t)
{
    return ddph__dtype_is_float(t);
}

ddph_status ddph__cpu_cast(const void *src, ddph_dtype src_dtype, void *dst,
                           ddph_dtype dst_dtype, size_t n, double scale,
                           ddph_err *err)
{
    if (!valid_dtype(src_dtype) || !valid_dtype(dst_dtype))
        return ddph__fail(err, DDPH_ERR_INVALID, "cast: unknown dtype");
    ddph_cast_kind kind;
    if (scale == 1.0 && ddph__cast_kind_of(src_dtype, dst_dtype, &kind)) {
        ddph__cast_run(ddph__simd_best(), kind, src, dst, n);
        return DDPH_OK;
    }
    /* To the same dtype: a copy, as PyTorch's .to() of the same dtype is
     * none (a NaN keeps its payload). */
    if (src_dtype == dst_dtype && scale == 1.0) {
        if (src != dst)
            memmove(dst, src, n * ddph__dtype_size(src_dtype));
        return DDPH_OK;
    }
    /* f16 <-> bf16: through f32 in blocks, with the vector casts; the one
     * rounding is f32 -> destination, as element by element. */
    ddph_cast_kind up, down;
    if (scale == 1.0 && ddph__cast_kind_of(src_dtype, DDPH_F32, &up) &&
        ddph__cast_kind_of(DDPH_F32, dst_dtype, &down)) {
        ddph_simd_path path = ddph__simd_best();
        float tmp[HALF_BLOCK];
        const uint16_t *from = src;
        uint16_t *to = dst;
        for (size_t i = 0; i < n; i += HALF_BLOCK) {
            size_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
            ddph__cast_run(path, up, from + i, tmp, k);
            ddph__cast_run(path, down, tmp, to + i, k);
        }
        return DDPH_OK;
    }
    /* The product is formed in float for float-or-narrower types so that
     * f32 * scale rounds as PyTorch's float kernels do. */
    int via_float = src_dtype != DDPH_F64 && dst_dtype != DDPH_F64;
    for (size_t i = 0; i < n; i++) {
        double v = load(src, src_dtype, i);
        v = via_float ? (double)((float)v * (float)scale) : v * scale;
        store(dst, dst_dtype, i, v);
    }
    return DDPH_OK;
}

/* 1/divisor where dividing by divisor is the same as multiplying by that:
 * a power of two whose reciprocal is a normal float.  x / 2^k and
 * x * 2^-k are the same real number, so IEEE rounds them to the same
 * result (subnormals included), and a multiply runs at memory speed where
 * this machine's divider does not (475 MiB of f32: 93 ms against 40 ms).
 * 0 for any other divisor, which keeps the true division. */
static double exact_reciprocal(double divisor)
{
    int e;
    double m = frexp(divisor, &e);
    if (fabs(m) != 0.5 || e < -120 || e > 120)
        return 0;
    return 1.0 / divisor;
}

ddph_status ddph__cpu_divide(void *buf, ddph_dtype dtype, size_t n,
                             double divisor, ddph_err *err)
{
    double recip = exact_reciprocal(divisor);
    switch (dtype) {
    case DDPH_F32: {
        float *b = buf, d = (float)divisor, r = (float)recip;
        if (recip != 0)
            for (size_t i = 0; i < n; i++)
                b[i] *= r;
        else
            for (size_t i = 0; i < n; i++)
                b[i] /= d;
        return DDPH_OK;
    }
    case DDPH_F64: {
        double *b = buf;
        if (recip != 0)
            for (size_t i = 0; i < n; i++)
                b[i] *= recip;
        else
            for (size_t i = 0; i < n; i++)
                b[i] /= divisor;
        return DDPH_OK;
    }
    case DDPH_F16:
    case DDPH_BF16: {
        /* Widen, divide (or multiply) in float, round back: the same
         * single rounding as element by element; in registers where the
         * CPU allows, the tail in blocks through the vector casts. */
        float d = (float)divisor, r = (float)recip, tmp[HALF_BLOCK];
        ddph_cast_kind up = dtype == DDPH_F16 ? DDPH_CAST_F16_F32
                                              : DDPH_CAST_BF16_F32;
        ddph_cast_kind down = dtype == DDPH_F16 ? DDPH_CAST_F32_F16
                                                : DDPH_CAST_F32_BF16;
        ddph_simd_path path = ddph__simd_best();
        uint16_t *h = buf;
        size_t i = ddph__half_op_run(path, recip ? DDPH_HALF_MUL : DDPH_HALF_DIV,
                                     dtype == DDPH_BF16, h, NULL,
                                     recip ? r : d, n);
        for (; i < n; i += HALF_BLOCK) {
            size_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
            ddph__cast_run(path, up, h + i, tmp, k);
            if (recip != 0)
                for (size_t j = 0; j < k; j++)
                    tmp[j] *= r;
            else
                for (size_t j = 0; j < k; j++)
                    tmp[j] /= d;
            ddph__cast_run(path, down, tmp, h + i, k);
        }
        return DDPH_OK;
    }
    default: /* integer dtypes */
        break;
    }
    return ddph__fail(err, DDPH_ERR_INVALID, "divide: unknown dtype");
}

/* For f16/bf16 the operands are widened to float, combined in float and
 * rounded back to the half type: one rounding per addition, as gloo's
 * float16 operator+ does. */
#define ELEMENTWISE(name, expr, fused)                                       \
    void name(void *a, const void *b, ddph_dtype dtype, size_t n)            \
    {                                                                        \
        if (dtype == DDPH_F64) {                                             \
            double *x = a;                                                   \
            const double *y = b;                                             \
            for (size_t i = 0; i < n; i++) {                                 \
                double u = x[i], v = y[i];                                   \
                x[i] = (expr);                                               \
            }                                                                \
            return;                                                          \
        }                                                                    \
        if (dtype == DDPH_F32) {                                             \
            float *x = a;                                                    \
            const float *y = b;                                              \
            for (size_t i = 0; i < n; i++) {                                 \
                float u = x[i], v = y[i];                                    \
                x[i] = (expr);                                               \
            }                                                                \
            return;                                                          \
        }                                                                    \
        /* Half types: blocks widened with the vector casts. */           \
        float ua[HALF_BLOCK], vb[HALF_BLOCK];                                \
        ddph_cast_kind up = dtype == DDPH_F16 ? DDPH_CAST_F16_F32            \
                                              : DDPH_CAST_BF16_F32;          \
        ddph_cast_kind down = dtype == DDPH_F16 ? DDPH_CAST_F32_F16          \
                                                : DDPH_CAST_F32_BF16;        \
        ddph_simd_path path = ddph__simd_best();                             \
        uint16_t *ha = a;                                                    \
        const uint16_t *hb = b;                                              \
        size_t i = (fused);                                                  \
        for (; i < n; i += HALF_BLOCK) {                                     \
            size_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;              \
            ddph__cast_run(path, up, ha + i, ua, k);                         \
            ddph__cast_run(path, up, hb + i, vb, k);                         \
            for (size_t j = 0; j < k; j++) {                                 \
                float u = ua[j], v = vb[j];                                  \
                ua[j] = (expr);                                              \
            }                                                                \
            ddph__cast_run(path, down, ua, ha + i, k);                       \
        }                                                                    \
    }

/* The sum runs fused in registers where the CPU allows (it is the MPI
 * reduction of every half-precision allreduce); max and min are rare. */
ELEMENTWISE(ddph__cpu_add, u + v,
            ddph__half_op_run(path, DDPH_HALF_ADD, dtype == DDPH_BF16, ha, hb,
                              0, n))
ELEMENTWISE(ddph__cpu_max, (u > v || isnan(u)) ? u : v, 0)
ELEMENTWISE(ddph__cpu_min, (u < v || isnan(u)) ? u : v, 0)
#undef ELEMENTWISE

ddph_status ddph__cpu_gemm(int trans_a, int trans_b, size_t m, size_t n,
                           size_t k, float alpha, const float *a, size_t lda,
                           const float *b, size_t ldb, float beta, float *c,
                           size_t ldc, ddph_err *err)
{
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return ddph__fail(err, DDPH_ERR_INVALID, "gemm: dimension too large");
    if (m == 0 || n == 0)
        return DDPH_OK;
    if (k <= DDPH__PORTABLE_GEMM_MAX_K) /* the same bits on every CPU */
        return ddph__portable_gemm(trans_a, trans_b, m, n, k, alpha, a, lda,
                                   b, ldb, beta, c, ldc, err);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return DDPH_OK;
}

void ddph__cpu_axpy(size_t n, float alpha, const float *x, float *y)
{
    /* BLAS counts in int: large vectors go in chunks. */
    const size_t chunk = (size_t)1 << 30;
    for (size_t at = 0; at < n; at += chunk) {
        size_t len = n - at < chunk ? n - at : chunk;
        cblas_saxpy((int)len, alpha, x + at, 1, y + at, 1);
    }
}

/* PyTorch's _orthogonalize_gram_schmidt: column by column, normalise, then
 * remove its component from every later column. */
static void gram_schmidt(float *x, size_t rows, size_t cols, double eps)
{
    for (size_t i = 0; i < cols; i++) {
        double ss = 0;
        for (size_t r = 0; r < rows; r++)
            ss += (double)x[r * cols + i] * x[r * cols + i];
        float norm = (float)sqrt(ss);
        float denom = eps == 0 ? norm : norm + (float)eps;
        for (size_t r = 0; r < rows; r++)
            x[r * cols + i] /= denom;
        for (size_t j = i + 1; j < cols; j++) {
            double dot = 0;
            for (size_t r = 0; r < rows; r++)
                dot += (double)x[r * cols + i] * x[r * cols + j];
            float d = (float)dot;
            for (size_t r = 0; r < rows; r++)
                x[r * cols + j] -= d * x[r * cols + i];
        }
    }
}

ddph_status ddph__cpu_orthogonalize(float *x, size_t rows, size_t cols,
                                    double eps, ddph_err *err)
{
    if (cols == 0 || rows == 0)
        return DDPH_OK; /* nothing to orthogonalise */
    if (cols > rows)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "orthogonalize: %zu columns > %zu rows", cols, rows);
    if (cols <= 2) {
        gram_schmidt(x, rows, cols, eps);
        return DDPH_OK;
    }
    /* Its input is the same on every rank and its result is kept: the
     * portable QR, not LAPACK's CPU-specific kernels (cpu_portable.h). */
    return ddph__portable_qr(x, rows, cols, err);
}

int ddph__cpu_blas_threads(int ranks_on_host)
{
    /* The user's choice wins. */
    if (getenv("OPENBLAS_NUM_THREADS") || getenv("OMP_NUM_THREADS"))
        return openblas_get_num_threads();
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                           : 1;
    /* One core of each rank's share stays with its communication thread,
     * which polls MPI while the GEMMs run, and the network stack. */
    int n = (ranks_on_host > 0 ? cpus / ranks_on_host : cpus) - 1;
    n = n < 1 ? 1 : n;
    openblas_set_num_threads(n);
    return n;
}
