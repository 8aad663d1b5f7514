/* bf16_host.h: bfloat16 on the host for the tests' own data, independent
 * of the runtime's casts: from float (finite), rounded to nearest even,
 * and back (exact). */
#ifndef DDPH_TESTS_BF16_HOST_H
#define DDPH_TESTS_BF16_HOST_H

#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
