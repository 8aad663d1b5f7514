/* bench_gpu.h: `ddphook bench gpu` (bench_gpu.c). */
#ifndef DDPH_CLI_BENCH_GPU_H
#define DDPH_CLI_BENCH_GPU_H

#include <stddef.h>

/* Casts against cudaMemcpy, then each hook of the comma-separated `hooks`
 * against a raw ncclAllReduce, on `mib` MiB; medians of `repeats`.
 * Returns an exit status: 0, 1 on failure, 2 without the nccl backend, 77
 * without a CUDA device. */
int bench_gpu(size_t mib, int repeats, const char *hooks,
              const char *plugin_path);

#endif
