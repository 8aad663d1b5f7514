/* quant_ops.h: the device operations of quantizing compressors (QSGD,
 * TernGrad; ABI minor 6) on host memory: stochastic rounding to integer
 * levels with a scale per chunk, its random numbers drawn from a seed the
 * hook gives (a counter-based hash of the seed and the element's index,
 * so the result does not depend on the order of the work), and codes of
 * 2 or 4 bits packed into bytes and unpacked with a scale per chunk.
 * The vectorised paths give the same bits as the portable one (the tests
 * check each path; an unpacked NaN is a NaN on each, but which NaN, its
 * sign and payload, depends on the order a path's adds take their
 * operands, which C leaves to the compiler): codes go from rank to rank, and a rank must be able
 * to recompute what another one sent. */
#ifndef DDPH_QUANT_OPS_H
#define DDPH_QUANT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "device/cpu_simd.h"
#include "device/quant_element.h"

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
/* The sum of `count` messages' codes, each times its chunk's scale:
 * y[i] = beta * y[i] + code_0(i) * scales_0[i / chunk] + code_1(i) *
 * scales_1[i / chunk] + ..., added in that order (code sign-extended, in
 * f32; beta = 0: y is only written), message r's codes and scales
 * r * stride bytes after packed and scales; y is written once.  The same
 * bits as a call for each message in turn, the first with beta, the
 * others with 1.  count >= 1; stride a multiple of 4 when count > 1. */
void ddph__cpu_unpack_bits(ddph_simd_path path, const uint8_t *packed,
                           size_t n, int bits, size_t chunk,
                           const float *scales, int count, size_t stride,
                           float beta, float *y);

#endif
