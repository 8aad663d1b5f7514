/* sparse_ops.c: see sparse_ops.h. */
#include "build-config.h"

#include "sparse_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Radix select: the k-th largest key, one byte at a time from the top.
 * Returns the key T with count(key > T) < k <= count(key >= T), and in
 * *above the number of keys above T. */
static uint32_t kth_key(const float *x, size_t n, size_t k, size_t *above)
{
    uint32_t prefix = 0, mask = 0;
    size_t want = k; /* still to find among keys matching the prefix */
    *above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        size_t hist[256] = {0};
        for (size_t i = 0; i < n; i++) {
            uint32_t key = ddph__magnitude_key(x[i]);
            if ((key & mask) == prefix)
                hist[(key >> shift) & 0xff]++;
        }
        int byte = 255;
        for (; byte > 0 && hist[byte] < want; byte--) {
            want -= hist[byte];
            *above += hist[byte];
        }
        prefix |= (uint32_t)byte << shift;
        mask |= 0xffu << shift;
    }
    return prefix;
}

ddph_status ddph__cpu_topk(const float *x, size_t n, size_t k, float *values,
                           int32_t *indices, ddph_err *err)
{
    if (k > n || n > INT32_MAX)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "topk: k = %zu of n = %zu (k <= n <= 2^31-1)", k,
                          n);
    if (k == 0)
        return DDPH_OK;
    size_t above;
    uint32_t t = kth_key(x, n, k, &above);
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

void ddph__cpu_quantize_int8(const float *x, size_t n, float scale, int8_t *q)
{
    for (size_t i = 0; i < n; i++) {
        float v = rintf(x[i] / scale);
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
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
