/* plan_calibrate.h: `ddphook plan`'s calibration (docs/plan.md): each
 * hook's own arithmetic measured at one rank with `ddphook bench hooks`
 * on a sample of the model, kept in the calibration file (plan_calib.h)
 * with the conditions it was measured at, and never reused under other
 * ones without saying so. */
#ifndef DDPH_CLI_PLAN_CALIBRATE_H
#define DDPH_CLI_PLAN_CALIBRATE_H

#include <stdint.h>

#include "plan_args.h"
#include "plan_calib.h"

/* At most this many bytes of f32 gradients are measured: larger models
 * are sampled (each parameter's first dimension divided alike) and the
 * time scaled up by their sizes. */
#define PLAN_SAMPLE_BYTES ((double)(16 << 20))

/* What a hook's measurement depends on: the shapes, the caps, the
 * options, the sample. */
uint64_t plan_calibration_key(const plan_args *a, const plan_layout *l);

/* Fills c with every hook of `names` and the machine's sums: read from
 * the file where they were measured under the conditions of now, else
 * measured (refused on a busy machine without a->calibrate_busy), with
 * a line of progress each; saves the file when anything was measured.
 * 0 with the reason on stderr. */
int plan_calibrate(const plan_args *a, const plan_layout *l,
                   char names[][128], int nnames, plan_calib *c,
                   uint64_t key);

/* Prints the conditions the figures of `names` were measured at, and a
 * warning for each taken on a busy machine. */
void plan_say_conditions(const plan_args *a, const plan_calib *c,
                         char names[][128], int n, uint64_t key);

#endif
