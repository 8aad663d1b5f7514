/* gpu_profile.h: a GPU's measured arithmetic, written by `ddphook bench
 * gpu --profile FILE` and read by `ddphook plan --device-profile FILE`
 * (docs/plan.md):
 *
 *   ddphook-gpu-profile 1
 *   device NAME                    the GPU as CUDA names it
 *   ranks W PER_HOST               ranks of the run, ranks on each host
 *   mib N                          MiB of f32 each figure was measured on
 *   copy BYTES_PER_S               device-to-device cudaMemcpy, bytes read
 *                                  plus written a second
 *   cast KIND SECONDS_PER_ELEMENT  f32_to_f16, f16_to_f32, f32_to_bf16,
 *                                  bf16_to_f32 (each once)
 *   allreduce BUS_BYTES_PER_S      a raw ncclAllReduce (nccl-tests' bus
 *                                  bandwidth; at one rank a copy's rate)
 *   hook NAME SECONDS_PER_BYTE     the hook's step through the runtime over
 *                                  the f32 bytes it reduced (at one rank:
 *                                  its arithmetic and copies alone)
 *   end COUNT                      the number of hook lines
 *
 * Lines in this order, hook lines any number (each name once).  A file
 * that is not exactly this is refused with its file and line. */
#ifndef DDPH_CLI_GPU_PROFILE_H
#define DDPH_CLI_GPU_PROFILE_H

#include <stddef.h>

#define GPU_PROFILE_MAX_HOOKS 64
#define GPU_PROFILE_CASTS 4

typedef struct gpu_profile_hook {
    char name[128];
    double seconds_per_byte;
} gpu_profile_hook;

typedef struct gpu_profile {
    char device[256];
    int ranks, per_host;
    double mib;
    double copy_bytes_per_s;
    double cast_seconds[GPU_PROFILE_CASTS]; /* per element, gpu_profile_casts order */
    double allreduce_bus_bytes_per_s;
    gpu_profile_hook hooks[GPU_PROFILE_MAX_HOOKS];
    int nhooks;
} gpu_profile;

/* The cast kinds, in the file's order. */
extern const char *const gpu_profile_casts[GPU_PROFILE_CASTS];

/* Reads `path` into *p.  1, or 0 with the reason (PATH:LINE: ...) in msg. */
int gpu_profile_load(const char *path, gpu_profile *p, char *msg, size_t cap);
/* Writes *p to `path` (replaced atomically).  1, or 0 with the reason. */
int gpu_profile_save(const char *path, const gpu_profile *p, char *msg,
                     size_t cap);
/* The hook `name`'s entry, or NULL. */
const gpu_profile_hook *gpu_profile_find(const gpu_profile *p,
                                         const char *name);

#endif
