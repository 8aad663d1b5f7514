/* sparse_ops.c: see sparse_ops.h. */
#include "build-config.h"

#include "device/sparse_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The k-th largest key T, with count(key > T) < k <= count(key >= T), and
 * in *above the count of keys above T.  One pass histograms the top 16
 * bits (8 exponent bits and 7 of the mantissa: a bin spans a factor of
 * 1 + 1/128 in magnitude); a second pass collects the keys of the bin that
 * holds the k-th, and a sort of those few settles the low 16 bits. */
#define TOP_BINS 65536

static int compare_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static ddph_status kth_key(const float *x, size_t n, size_t k, uint32_t *t,
                           size_t *above, ddph_err *err)
{
    uint32_t *hist = calloc(TOP_BINS, sizeof *hist);
    if (!hist)
        return ddph__fail(err, DDPH_ERR_NOMEM, "topk: out of memory");
    for (size_t i = 0; i < n; i++)
        hist[ddph__magnitude_key(x[i]) >> 16]++;
    size_t want = k;
    uint32_t bin = TOP_BINS - 1;
    *above = 0;
    for (; bin > 0 && hist[bin] < want; bin--) {
        want -= hist[bin];
        *above += hist[bin];
    }
    size_t m = hist[bin];
    free(hist);
    uint32_t *cand = malloc((m ? m : 1) * sizeof *cand);
    if (!cand)
        return ddph__fail(err, DDPH_ERR_NOMEM, "topk: out of memory");
    size_t got = 0;
    for (size_t i = 0; i < n && got < m; i++) {
        uint32_t key = ddph__magnitude_key(x[i]);
        if (key >> 16 == bin)
            cand[got++] = key;
    }
    qsort(cand, got, sizeof *cand, compare_desc);
    /* The want-th largest of the bin; the ones before it that are larger
     * count as above. */
    *t = cand[want - 1];
    for (size_t j = 0; j < want - 1; j++)
        *above += cand[j] > *t;
    free(cand);
    return DDPH_OK;
}

ddph_status ddph__topk_check(size_t n, size_t k, ddph_err *err)
{
    if (k > n || n > INT32_MAX)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "topk: k = %zu of n = %zu (k <= n <= 2^31-1)", k,
                          n);
    return DDPH_OK;
}

ddph_status ddph__cpu_topk(const float *x, size_t n, size_t k, float *values,
                           int32_t *indices, ddph_err *err)
{
    if (ddph__topk_check(n, k, err) != DDPH_OK)
        return DDPH_ERR_INVALID;
    if (k == 0)
        return DDPH_OK;
    size_t above = 0;
    uint32_t t = 0;
    ddph_status st = kth_key(x, n, k, &t, &above, err);
    if (st != DDPH_OK)
        return st;
    size_t ties = k - above, out = 0;
    for (size_t i = 0; i < n && out < k; i++) {
        uint32_t key = ddph__magnitude_key(x[i]);
        if (key > t || (key == t && ties > 0)) {
            if (key == t)
                ties--;
            if (indices)
                indices[out] = (int32_t)i;
            if (values)
                values[out] = x[i];
            out++;
        }
    }
    return DDPH_OK;
}

void ddph__cpu_gather(const float *x, const int32_t *idx, size_t k, float *out)
{
    for (size_t j = 0; j < k; j++)
        out[j] = x[idx[j]];
}

void ddph__cpu_scatter_add(float *y, const int32_t *idx, const float *v,
                           size_t k, float alpha)
{
    if (alpha == 1.0f) {
        for (size_t j = 0; j < k; j++)
            y[idx[j]] += v[j];
        return;
    }
    for (size_t j = 0; j < k; j++)
        y[idx[j]] += alpha * v[j];
}

float ddph__cpu_absmax(const float *x, size_t n)
{
    float m = 0;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        nan |= a != a;
        m = a > m ? a : m;
    }
    return nan ? NAN : m;
}

/* Clamping before rounding gives the same as after (the bounds are
 * integers), and below 2^22 adding and removing 1.5 * 2^23 rounds to the
 * nearest even integer in the default rounding mode: rintf without the
 * library call. */
void ddph__cpu_quantize_int8(const float *x, size_t n, float scale, int8_t *q)
{
    const float magic = 12582912.0f, inv = 1.0f / scale;
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        v = (v + magic) - magic;
        q[i] = v == v ? (int8_t)v : 0;
    }
}

void ddph__cpu_dequantize_int8(const int8_t *q, size_t n, float scale,
                               float beta, float *y)
{
    if (beta == 0.0f) {
        for (size_t i = 0; i < n; i++)
            y[i] = scale * (float)q[i];
        return;
    }
    for (size_t i = 0; i < n; i++)
        y[i] = beta * y[i] + scale * (float)q[i];
}
