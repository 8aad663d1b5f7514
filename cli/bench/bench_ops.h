/* bench_ops.h: `ddphook bench ops`: every CPU device operation a hook
 * calls through its services (copies, casts, arithmetic, top-k, int8,
 * signs and chunks, GEMM and the orthogonaliser) timed on N MiB of f32,
 * each in turn with a memcpy of the bytes it is compared with, in the
 * same run, and printed as a ratio (1.0 = as fast as copying them). */
#ifndef DDPH_CLI_BENCH_OPS_H
#define DDPH_CLI_BENCH_OPS_H

#include <stddef.h>

/* Runs and prints the table; 0, or 1 when memory ran out or an operation
 * failed. */
int bench_ops(size_t mib, int repeats);

#endif
