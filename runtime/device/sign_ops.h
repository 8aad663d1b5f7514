/* sign_ops.h: the device operations of sign and per-chunk hooks on host
 * memory (ABI minor 4): signs packed into bits and unpacked with a scale
 * per chunk, and the sum and the largest of |x| per chunk (e.g. the
 * scales of 1-bit compression).  cuda_ops.cu computes the same on the
 * GPU with the same definitions: bits, unpacked values and maxima are
 * identical on both; a chunk's sum is accumulated in double and rounded
 * to float on both, in a different order, so the two agree to within one
 * unit in the last place of the float. */
#ifndef DDPH_SIGN_OPS_H
#define DDPH_SIGN_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Chunks of `chunk` elements in n (the last may be short): ceil(n/chunk). */
static inline size_t ddph__chunks(size_t n, size_t chunk)
{
    return chunk ? (n + chunk - 1) / chunk : 0;
}

/* Bit i % 8 of bits[i / 8] = the sign bit of x[i] (1 for a negative
 * number, -0 and a NaN with its sign bit set); ceil(n / 8) bytes, the
 * last one's unused bits 0. */
void ddph__cpu_pack_signs(const float *x, size_t n, uint8_t *bits);
/* y[i] = beta * y[i] + (bit i ? -1 : +1) * scales[i / chunk] (beta = 0:
 * y is only written).  chunk >= 1. */
void ddph__cpu_unpack_signs(const uint8_t *bits, size_t n, size_t chunk,
                            const float *scales, float beta, float *y);
/* out[j] = the sum of |x[i]| over chunk j, in double, rounded to float. */
void ddph__cpu_chunk_abs_sum(const float *x, size_t n, size_t chunk,
                             float *out);
/* out[j] = the largest |x[i]| of chunk j, compared as the bits of |x| (a
 * NaN ranks above +Inf: a chunk with a NaN gives a NaN); 0 for an empty
 * chunk. */
void ddph__cpu_chunk_abs_max(const float *x, size_t n, size_t chunk,
                             float *out);

#endif
