/* presets.h: parameter shapes of well-known models, for `ddphook bench`:
 * gpt2-124m (its 2-D weights, biases and layer norms), resnet50 (convs,
 * batch norms, the classifier), gpt-example (examples/train_gpt's default
 * model) and mlp (examples/train_mnist); or a shapes file. */
#ifndef DDPH_CLI_PRESETS_H
#define DDPH_CLI_PRESETS_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/types.h>

typedef struct preset_param {
    char name[48];
    int64_t shape[4];
    int ndim;
} preset_param;

/* Fills *out (malloc'd, registration order) and *n; 0 for an unknown name. */
int preset_load(const char *name, preset_param **out, int *n);
/* A shapes file, as `ddphook bench shapes` prints one: a parameter a
 * line, NAME D0 [D1 ...] (at most 1023 characters; blank lines and lines
 * starting with # are skipped; dimensions past the fourth are folded into
 * it).  1, or 0 with the reason (file:line) in msg. */
int preset_read_file(const char *path, preset_param **out, int *n,
                     char *msg, size_t cap);
/* The parameters of a gradient trace (trace.h) and its dtype; 0 with the
 * reason in msg. */
int preset_from_trace(const char *dir, preset_param **out, int *n,
                      ddph_dtype *dtype, char *msg, size_t cap);
/* The work of a preset model's step, for `ddphook plan`'s estimate of
 * the compute time: forward FLOPs of one sample (published figures:
 * 2 FLOPs a multiply-add) and the samples a rank takes in a step by
 * default.  0 for a name that is not a preset. */
typedef struct preset_work {
    double forward_flops; /* one sample */
    int batch;            /* samples a rank, by default */
    const char *sample;   /* what a sample is */
    const char *source;   /* where the figures come from */
} preset_work;
int preset_work_of(const char *name, preset_work *out);

/* A device's published rates, for `ddphook plan --device`. */
typedef struct preset_device {
    const char *name;
    const char *label;
    double half_flops; /* dense f16/bf16 matrix products, FLOP/s */
    double f32_flops;  /* f32 (no tensor cores), FLOP/s */
    double mem_bw;     /* memory bytes/s */
    double nvlink_bw;  /* bytes/s each way between two GPUs of a host */
} preset_device;
/* The device `name` (v100, a100, h100), or NULL. */
const preset_device *preset_device_find(const char *name);

/* Total elements. */
size_t preset_numel(const preset_param *p, int n);

#endif
