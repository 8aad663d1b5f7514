/* quant_ops.h: the device operations of quantizing compressors (QSGD,
 * TernGrad; ABI minor 6) on host memory: stochastic rounding to integer
 * levels with a scale per chunk, its random numbers drawn from a seed the
 * hook gives (a counter-based hash of the seed and the element's index,
 * so the result does not depend on the order of the work), and codes of
 * 2 or 4 bits packed into bytes and unpacked with a scale per chunk.
 * The vectorised paths give the same bits as the portable one (the tests
 * check each path): codes go from rank to rank, and a rank must be able
 * to recompute what another one sent. */
#ifndef DDPH_QUANT_OPS_H
#define DDPH_QUANT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "device/cpu_simd.h"

/* One round of a 32-bit integer hash (Wellons' lowbias32). */
static inline uint32_t ddph__quant_mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* The uniform number in [0, 1) that element i draws under seed: 24 bits
 * of the hash, exact in float. */
static inline float ddph__quant_uniform(uint64_t seed, uint32_t i)
{
    uint32_t h = ddph__quant_mix(i * 0x9E3779B9u + (uint32_t)seed);
    h = ddph__quant_mix(h ^ (uint32_t)(seed >> 32));
    return (float)(h >> 8) * 0x1p-24f;
}

/* q[i] = x[i] / scales[i / chunk] rounded to one of the two integers
 * around it at random, up with probability its fraction (so that the
 * expected q[i] * scale is x[i]), then clamped to [-levels, levels]:
 *   v = x[i] * inv (inv = 1 / scale rounded to f32), lo = floor(v),
 *   q = lo + (u(seed, i) < v - lo), in f32;
 * a NaN gives 0, an infinity +-levels; every element of a chunk whose
 * scale is not positive and finite gives 0 (a chunk of zeros: scale 0).
 * 1 <= levels <= 127, chunk >= 1, n < 2^32. */
void ddph__cpu_round_stochastic(ddph_simd_path path, const float *x, size_t n,
                                size_t chunk, const float *scales, int levels,
                                uint64_t seed, int8_t *q);

/* bits (2 or 4) per code: element i in bits [i * bits % 8, +bits) of byte
 * i * bits / 8, the low `bits` bits of q[i]'s two's complement (a q in
 * [-2^(bits-1), 2^(bits-1)) comes back unchanged); ceil(n * bits / 8)
 * bytes, the last one's unused bits 0. */
void ddph__cpu_pack_bits(const int8_t *q, size_t n, int bits, uint8_t *out);
/* y[i] = beta * y[i] + code(i) * scales[i / chunk] (code sign-extended,
 * in f32; beta = 0: y is only written). */
void ddph__cpu_unpack_bits(ddph_simd_path path, const uint8_t *packed,
                           size_t n, int bits, size_t chunk,
                           const float *scales, float beta, float *y);

#endif
