/* rng.h: the random numbers PowerSGD draws.
 *
 * seeds: numpy's legacy RandomState(random_seed) (MT19937, init_genrand),
 * with randint(1_000_000_000) drawn the legacy way: 32-bit outputs masked
 * to 30 bits, values above 999,999,999 rejected.  Every rank draws the same
 * sequence, as PyTorch's PowerSGDState.rng, and for seed 0 the first seeds
 * are 209652396, 398764591, 924231285.
 *
 * normals: torch.manual_seed(seed) then torch.randn(n) on the CPU, as
 * torch 1.13 computes it where the CPU has AVX2 (the x86-64 machines
 * PyTorch runs on): MT19937 uniforms turned into normals 16 at a time by
 * Box-Muller over avx_mathfun's Cephes polynomials (n >= 16), or one
 * double Box-Muller pair at a time, the second kept for the next call
 * (n < 16).  Written in scalar C with the same roundings, so every CPU
 * draws the same bits. */
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
/* torch's CPU generator: MT19937 and the cached second normal. */
typedef struct torch_gen {
    mt19937 mt;
    int has_next_normal;
    double next_normal;
} torch_gen;

/* torch.manual_seed(seed). */
void torch_gen_seed(torch_gen *g, uint64_t seed);
/* torch.randn(n) into out[0..n-1], continuing g. */
void torch_randn(torch_gen *g, float *out, size_t n);

#endif
