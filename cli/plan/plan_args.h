/* plan_args.h: what `ddphook plan` is asked (its options, parsed and
 * checked) and the model it is asked about (the parameters and the
 * runtime's buckets), shared by plan.c and plan_calibrate.c. */
#ifndef DDPH_CLI_PLAN_ARGS_H
#define DDPH_CLI_PLAN_ARGS_H

#include <stddef.h>

#include "cli/bench_common.h"
#include "plan_model.h"
#include "cli/presets.h"

#define ALL_HOOKS "allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8"
#define MAX_HOOKS 16

typedef struct plan_args {
    const char *model, *shapes, *trace, *job, *hooks, *calibration;
    const char *plugin_path, *csv, *collective, *device_profile;
    bench_options options;
    plan_cluster cluster;
    double rate_bits, efficiency, compute, backward_share, utilization;
    const char *device, *collectives;
    int batch, f32, intra_set;
    double cap_mb, first_cap_mb;
    int psgd_rank, recalibrate, no_calibration, repeats;
    int calibrate_busy; /* measure even on a busy machine (flagged) */
    double busy_load;   /* runnable tasks a CPU that make the machine busy */
} plan_args;

/* Parses and checks the command line into *a (defaults first).  -1: go
 * on; else the exit status (0 after --help, 2 for a bad argument, said
 * on stderr). */
int plan_args_parse(int argc, char **argv, plan_args *a);

/* A number of s in [lo, hi]: 1, or 0 if not. */
int plan_parse_real(const char *s, double lo, double hi, double *out);

/* The model's parameters and the buckets the runtime makes of them. */
typedef struct plan_layout {
    preset_param *params;
    int nparams;
    size_t numel;
    char label[300];
    int nbuckets;
    size_t *bucket_numel;
    int *bucket_first, *bucket_count; /* into order[] */
    int *order;                       /* parameter indices, bucket by bucket */
} plan_layout;

#endif
