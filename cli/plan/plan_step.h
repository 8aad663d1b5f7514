/* plan_step.h: what `ddphook plan` assumes of a step beside the
 * collectives: the compute time (given, or estimated from the model's
 * FLOPs and a device's rate, and said so), the device the hooks'
 * arithmetic runs on, and the margin a lossy hook must clear to be
 * recommended. */
#ifndef DDPH_CLI_PLAN_STEP_H
#define DDPH_CLI_PLAN_STEP_H

#include <stddef.h>

#include "cli/gpu_profile.h"
#include "cli/presets.h"

/* The cost model's own error, as validated (docs/plan.md): a hook that
 * changes the gradients is recommended only when it is predicted this
 * much faster than allreduce. */
#define PLAN_MARGIN 0.15

/* The share of a device's dense matrix rate a training step sustains by
 * default (MFU of published runs: 30-50%). */
#define PLAN_UTILIZATION 0.35

typedef struct plan_step_inputs {
    const char *model;  /* a preset's name, or NULL (shapes, trace) */
    size_t numel;       /* the model's parameters */
    int batch;          /* samples a rank, or -1: the preset's */
    const preset_device *device; /* NULL: this machine's CPU */
    int f32;            /* the step runs in f32, not f16/bf16 */
    double utilization; /* of the device's matrix rate */
} plan_step_inputs;

/* The compute time of one step, forward + backward (3 forward passes),
 * and in `how` what it was made of.  -1 (with the reason in how) when it
 * cannot be estimated: no device to run it on. */
double plan_estimate_compute(const plan_step_inputs *in, char *how,
                             size_t cap);

/* Seconds per byte of an f32 sum (a += b) on the device: three bytes
 * move for each byte summed. */
double plan_device_add(const preset_device *d);

/* The device as `ddphook bench gpu --profile` measured it: its memory
 * bandwidth the profile's copy rate and, from a profile of several GPUs
 * of one host, the rate between two of them its allreduce's bus
 * bandwidth; the matrix rates (which the profile does not measure) are
 * base's.  The label (in `label`, cap bytes) says which is which. */
void plan_device_measured(const preset_device *base, const gpu_profile *p,
                          preset_device *out, char *label, size_t cap);

/* The hook's arithmetic at one rank on `bytes` of f32 gradients as the
 * profile measured it, or -1 when it holds no such figure (not there,
 * or measured on several ranks, where its step includes their
 * communication). */
double plan_profile_hook(const gpu_profile *p, const char *hook,
                         double bytes);

#endif
