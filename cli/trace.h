/* trace.h: gradient traces as `ddphook replay` reads them (docs/replay.md):
 * a folder with trace.ini ([trace] world_size, steps, dtype = the
 * gradients' dtype (f32, f16, bf16 or f64; f32 when absent) and one
 * [param.NAME] shape = a,b,... per parameter, in registration order) and
 * rank{R}.step{S}.f32, raw little-endian float32 whatever the dtype, all
 * parameters concatenated. */
#ifndef DDPH_CLI_TRACE_H
#define DDPH_CLI_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/types.h>

typedef struct trace_param {
    char *name;
    int64_t shape[16];
    int ndim;
    size_t numel;
} trace_param;

typedef struct trace {
    char *dir;
    int world_size;
    int steps;
    trace_param *params;
    int nparams;
    size_t total;     /* elements per rank and step */
    ddph_dtype dtype; /* of the gradients the trainer registers */
} trace;

/* Reads DIR/trace.ini; errors name file and line into msg. */
int trace_open(const char *dir, trace *t, char *msg, size_t msglen);
/* Reads rank R step S into out (t->total floats). */
int trace_read_step(const trace *t, int rank, int step, float *out, char *msg,
                    size_t msglen);
void trace_close(trace *t);

#endif
