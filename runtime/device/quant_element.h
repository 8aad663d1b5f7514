/* quant_element.h: one element of quant_ops.h's operations (stochastic
 * rounding's draw and rounding, a code's decoding, a byte of codes),
 * compiled both into the CPU's portable loops (quant_ops.c) and into the
 * CUDA kernels (backends/nccl/cuda_ops.cu), so that both devices compute
 * the one definition: codes go from rank to rank, CPU and GPU alike.
 * Its float operations are each rounded on their own on both: plain C on
 * the CPU (built with -ffp-contract=off), __fmul_rn and friends on the
 * GPU, where nvcc would otherwise fuse a multiply and a subtract into one
 * FMA.  Nothing but C headers, so that nvcc takes it. */
#ifndef DDPH_QUANT_ELEMENT_H
#define DDPH_QUANT_ELEMENT_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DDPH_QUANT_HD __host__ __device__
#else
#define DDPH_QUANT_HD
#endif
#ifdef __CUDA_ARCH__
#define DDPH_QMUL(a, b) __fmul_rn(a, b)
#define DDPH_QADD(a, b) __fadd_rn(a, b)
#define DDPH_QSUB(a, b) __fsub_rn(a, b)
#define DDPH_QDIV(a, b) __fdiv_rn(a, b)
#else
#define DDPH_QMUL(a, b) ((a) * (b))
#define DDPH_QADD(a, b) ((a) + (b))
#define DDPH_QSUB(a, b) ((a) - (b))
#define DDPH_QDIV(a, b) ((a) / (b))
#endif

/* One round of a 32-bit integer hash (Wellons' lowbias32). */
static inline DDPH_QUANT_HD uint32_t ddph__quant_mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* The 32-bit key of a 64-bit seed, made once per call: both halves of
 * the seed through the hash, so that seeds that differ in either half
 * draw differently. */
static inline DDPH_QUANT_HD uint32_t ddph__quant_key(uint64_t seed)
{
    return ddph__quant_mix((uint32_t)seed ^
                           ddph__quant_mix((uint32_t)(seed >> 32) +
                                           0x9E3779B9u));
}

/* The uniform number in [0, 1) that element i draws under a seed's key:
 * 24 bits of one round of the hash of i * phi + key, exact in float (one
 * round per element: the draw is most of rounding's work). */
static inline DDPH_QUANT_HD float ddph__quant_uniform(uint32_t key,
                                                    uint32_t i)
{
    uint32_t h = ddph__quant_mix(i * 0x9E3779B9u + key);
    return DDPH_QMUL((float)(h >> 8), 0x1p-24f);
}

/* A chunk's scale rounds its elements only when positive and finite. */
static inline DDPH_QUANT_HD int ddph__quant_scale_usable(float s)
{
    return s > 0 && s <= FLT_MAX;
}

static inline DDPH_QUANT_HD float ddph__quant_inverse(float s)
{
    return DDPH_QDIV(1.0f, s);
}

/* Element i's level: x * inv rounded down or up at random (up with
 * probability its fraction), clamped to [-top, top]; a NaN gives 0. */
static inline DDPH_QUANT_HD int8_t ddph__quant_round_one(float x, float inv,
                                                         float top,
                                                         uint32_t key,
                                                         uint32_t i)
{
    float v = DDPH_QMUL(x, inv);
    if (isnan(v))
        return 0;
    float f = floorf(v);
    float r = DDPH_QADD(f, ddph__quant_uniform(key, i) < DDPH_QSUB(v, f)
                               ? 1.0f
                               : 0.0f);
    r = r > top ? top : r < -top ? -top : r;
    return (int8_t)r;
}

/* Byte j of the codes of q[0..n): element j * per + k in bits
 * [k * bits, + bits), its low bits; the bits past n 0. */
static inline DDPH_QUANT_HD uint8_t ddph__quant_pack_byte(const int8_t *q,
                                                          size_t n, size_t j,
                                                          unsigned bits)
{
    unsigned per = 8u / bits, mask = (1u << bits) - 1, b = 0;
    for (unsigned k = 0; k < per && j * per + k < n; k++)
        b |= ((unsigned)q[j * per + k] & mask) << (k * bits);
    return (uint8_t)b;
}

/* Element i's code, sign-extended, times its chunk's scale. */
static inline DDPH_QUANT_HD float ddph__quant_decode(const uint8_t *packed,
                                                     size_t i, unsigned bits,
                                                     float scale)
{
    unsigned per = 8u / bits, mask = (1u << bits) - 1;
    unsigned code = (unsigned)packed[i / per] >> (i % per * bits) & mask;
    int c = (int)code - (code >> (bits - 1) ? 1 << bits : 0);
    return DDPH_QMUL((float)c, scale);
}

/* beta * y + d, for unpacking onto y (beta != 0). */
static inline DDPH_QUANT_HD float ddph__quant_onto(float beta, float y, float d)
{
    return DDPH_QADD(DDPH_QMUL(beta, y), d);
}

/* Message r's scales, r * stride bytes after the first message's (its
 * codes are as far after the first's codes). */
static inline DDPH_QUANT_HD const float *
ddph__quant_message_scales(const float *scales, int r, size_t stride)
{
    return (const float *)(const void *)((const char *)scales +
                                         (size_t)r * stride);
}

/* Element i (of chunk j) of the sum of `count` messages, message r's
 * codes and scales r * stride bytes after the first's: the first decoded
 * onto beta * y (beta = 0: y unread), the others added in order. */
static inline DDPH_QUANT_HD float ddph__quant_sum_one(
    const uint8_t *packed, const float *scales, int count, size_t stride,
    size_t i, size_t j, unsigned bits, float beta, float y)
{
    float acc = ddph__quant_decode(packed, i, bits, scales[j]);
    if (beta != 0.0f)
        acc = ddph__quant_onto(beta, y, acc);
    for (int r = 1; r < count; r++) {
        const uint8_t *p = packed + (size_t)r * stride;
        const float *s = ddph__quant_message_scales(scales, r, stride);
        acc = DDPH_QADD(acc, ddph__quant_decode(p, i, bits, s[j]));
    }
    return acc;
}

#endif
