/* quant_hash.h: the random draws of stochastic rounding (quant_ops.h),
 * a counter-based hash of the hook's seed and the element's index.  On
 * its own, with nothing but stdint.h, so that the CUDA kernels
 * (backends/nccl/cuda_ops.cu) compile this very code: both devices draw
 * the same numbers by construction. */
#ifndef DDPH_QUANT_HASH_H
#define DDPH_QUANT_HASH_H

#include <stdint.h>

#ifdef __CUDACC__
#define DDPH_QUANT_HD __host__ __device__
#else
#define DDPH_QUANT_HD
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

/* The uniform number in [0, 1) that element i draws under seed: 24 bits
 * of the hash, exact in float. */
static inline DDPH_QUANT_HD float ddph__quant_uniform(uint64_t seed,
                                                    uint32_t i)
{
    uint32_t h = ddph__quant_mix(i * 0x9E3779B9u + (uint32_t)seed);
    h = ddph__quant_mix(h ^ (uint32_t)(seed >> 32));
    return (float)(h >> 8) * 0x1p-24f;
}

#endif
