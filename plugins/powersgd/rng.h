/* rng.h: the random numbers PowerSGD draws.
 *
 * seeds: numpy's legacy RandomState(random_seed) (MT19937, init_genrand),
 * with randint(1_000_000_000) drawn the legacy way: 32-bit outputs masked
 * to 30 bits, values above 999,999,999 rejected.  Every rank draws the same
 * sequence, as PyTorch's PowerSGDState.rng, and for seed 0 the first seeds
 * are 209652396, 398764591, 924231285.
 *
 * normals: for each seed, an MT19937 seeded with it feeds Box-Muller on
 * 53-bit uniforms.  This is NOT torch.randn's stream (which the design
 * does not require); it is deterministic and identical on every rank. */
#ifndef PSGD_RNG_H
#define PSGD_RNG_H

#include <stddef.h>
#include <stdint.h>

#define MT_N 624

typedef struct mt19937 {
    uint32_t mt[MT_N];
    int mti;
} mt19937;

void mt_seed(mt19937 *m, uint32_t seed);
uint32_t mt_next32(mt19937 *m);
/* numpy legacy RandomState.randint(0, high) for high <= 2^32. */
uint32_t mt_randint(mt19937 *m, uint32_t high);
/* Fills out[0..n-1] with standard normals from a generator seeded by seed. */
void normal_fill(uint32_t seed, float *out, size_t n);

#endif
