/* tester.h: what the files of ddphook-plugin-test share: the tester's
 * state, the table's rows, the model of realistic, odd and empty tensors
 * and the runs made on it, and each group of checks:
 *
 *   plugin_test.c     arguments, the sweep over world sizes, valgrind, the
 *                     verdict
 *   tester_runs.c     the model, the runs, loading and the per-step numerics
 *   tester_learning.c error feedback and training
 *   tester_faults.c   heap growth, state, failures injected into the
 *                     collectives, buckets kept past their call */
#ifndef DDPH_CLI_TESTER_H
#define DDPH_CLI_TESTER_H

#include "build-config.h"

#include <errno.h>
#include <getopt.h>
#ifdef HAVE_MALLINFO2
#include <malloc.h>
#endif
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#ifdef HAVE_VALGRIND_MEMCHECK_H
#include <valgrind/memcheck.h>
#endif

#include <ddphook/ddphook.h>

#include "backends/registry.h"
#include "plugin/hook.h"
#include "plugin/loader.h"
#include "plugin/options.h"

/* Set in the tester that runs under valgrind: it leaves the verdict to
 * the process that started valgrind. */
#define UNDER_VALGRIND "DDPH_PLUGIN_TEST_UNDER_VALGRIND"

/* The error an exact hook's f32 average may have (the sum's rounding). */
#define EXACT_RTOL 1e-5

typedef struct tester {
    const char *plugin;
    char name[128];
    char options[4096]; /* INI lines */
    double rtol;           /* < 0 until known: --rtol, or the hook's */
    const char *rtol_from; /* where it came from, for the table */
    int error_feedback;    /* DDPH_PLUGIN_ERROR_FEEDBACK */
    int concurrent;        /* DDPH_PLUGIN_CONCURRENT_BUCKETS */
    int steps;
    int ef_steps; /* the most steps of the error-feedback check */
    unsigned only;  /* --only: the groups of checks to run (0: all) */
    const char *only_text;
    int rank, world;
    int failed;
    char dir[256];
    /* Runs opened while set keep the gradients in the buckets
     * (gradient_as_bucket_view): the hook gets them undivided and in
     * their own dtype, whatever its flags ask of copies. */
    int as_view;
    /* Communication lanes of the runs opened ([runtime] lanes; 0: 1). */
    int lanes;
} tester;

/* One row; status is agreed over all ranks (any failure fails the row). */
void row(tester *t, int ok, int skipped, const char *check,
         const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- the model and its runs (tester_runs.c) ---- */

typedef struct shape_set {
    const char *label;
    int n;
    int64_t shapes[8][4];
    int ndims[8];
    double cap_mb; /* bucket_cap_mb (first_bucket_cap_mb is half) */
} shape_set;

extern const shape_set realistic, odd, empty, large;

typedef struct run {
    ddph_ctx *ctx;
    ddph_model *m;
    float *g[8];   /* where the gradients are (ddph_model_grad_ptr) */
    float *own[8]; /* the run's allocations, given to add_param */
    size_t numel[8];
    int n;
} run;

float grad_value(int rank, int step, int p, size_t i);
const char *write_job(tester *t, const char *wrapper, double cap_mb);
int run_open(tester *t, run *r, const shape_set *set, const char *wrapper,
             char *why, size_t whylen);
void run_close(run *r);
int run_step(run *r, int s, char *why, size_t whylen, int rank);
/* Where a step's largest error vs the average is: for the message that
 * shows an off-by-one (the last element of a tensor) at a glance. */
typedef struct worst_at {
    int step, tensor;
    size_t element, numel;
} worst_at;
double error_vs_average(const run *r, int s, int world, worst_at *at);
uint32_t checksum(const run *r);
int same_everywhere(uint64_t v);

/* ---- the groups of checks ---- */

int check_load(tester *t);
void check_create_destroy(tester *t);
void check_numerics(tester *t, const shape_set *set, const char *wrapper,
                    double rtol, const char *label);
/* The fewest steps an error-feedback run may have (--ef-steps). */
#define EF_MIN_K 128
void check_error_feedback(tester *t);
void check_training(tester *t);
void check_heap(tester *t);
void check_save_load(tester *t);
void check_buffer_kept(tester *t, ddph_comm comm, const ddph_logger *log);
void check_error_path(tester *t, ddph_comm comm, const ddph_logger *log);

#endif
