/* sign_ops.c: see sign_ops.h. */
#include "build-config.h"

#include "device/sign_ops.h"

#include <math.h>
#include <string.h>

#include "device/sparse_ops.h"

void ddph__cpu_pack_signs(const float *x, size_t n, uint8_t *bits)
{
    size_t nbytes = (n + 7) / 8;
    for (size_t j = 0; j < nbytes; j++) {
        unsigned b = 0;
        size_t end = n - j * 8 < 8 ? n - j * 8 : 8;
        for (size_t k = 0; k < end; k++)
            b |= (unsigned)(signbit(x[j * 8 + k]) != 0) << k;
        bits[j] = (uint8_t)b;
    }
}

void ddph__cpu_unpack_signs(const uint8_t *bits, size_t n, size_t chunk,
                            const float *scales, float beta, float *y)
{
    for (size_t i = 0; i < n; i++) {
        float s = scales[i / chunk];
        float d = (bits[i >> 3] >> (i & 7)) & 1u ? -s : s;
        y[i] = beta == 0.0f ? d : beta * y[i] + d;
    }
}

/* Per chunk, the sum of |x| in double or the largest magnitude key. */
static void chunk_abs(const float *x, size_t n, size_t chunk, int want_max,
                      float *out)
{
    size_t nc = ddph__chunks(n, chunk);
    for (size_t c = 0; c < nc; c++) {
        size_t end = n - c * chunk < chunk ? n : (c + 1) * chunk;
        double sum = 0;
        uint32_t best = 0;
        for (size_t i = c * chunk; i < end; i++) {
            uint32_t key = ddph__magnitude_key(x[i]);
            best = key > best ? key : best;
            sum += fabs((double)x[i]);
        }
        if (want_max)
            memcpy(&out[c], &best, sizeof best);
        else
            out[c] = (float)sum;
    }
}

void ddph__cpu_chunk_abs_sum(const float *x, size_t n, size_t chunk,
                             float *out)
{
    chunk_abs(x, n, chunk, 0, out);
}

void ddph__cpu_chunk_abs_max(const float *x, size_t n, size_t chunk,
                             float *out)
{
    chunk_abs(x, n, chunk, 1, out);
}
