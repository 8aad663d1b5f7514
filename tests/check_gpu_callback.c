/* check_gpu_callback.c: ddph_model_set_bucket_callback on GPU buckets
 * (backend = nccl), on a machine without a GPU.  The runtime loads the
 * nccl backend's module as built from its sources (tests/fake_nccl/
 * module), whose CUDA and NCCL calls resolve to the fake this program
 * links and exports (tests/fake_nccl: a stream's work runs only when it
 * is synchronised, or when a stream waiting for an event recorded after
 * it runs).  One rank, tests/fake_plugins' zeroes hook (an allreduce,
 * then zeros): its results differ from the gradients that went in.
 *
 * Checked: the callback comes once per bucket per step, in launch order,
 * with DDPH_OK; when it comes, the results are enqueued on
 * ddph_cuda_comm_stream and not yet run (nobody waited on the host); an
 * event the callback records there, waited for by another stream (as
 * ddphook.torch's CUDA futures do), brings the bucket's results into the
 * gradient memory; step_wait leaves every bucket's there, with the
 * callback or without it. */
#include "build-config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "fake_nccl/fake_nccl.h"

#define NP 3
#define N 64 /* elements a parameter: one bucket each (caps below) */
#define STEPS 2

static ddph_ctx *ctx;
static float *grads[NP];     /* fake GPU memory: the host can read it */
static cudaStream_t compute; /* the trainer's stream (ddph_set_stream) */
static cudaStream_t waiter;  /* the trainer's side: waits for the events */
static cudaEvent_t events[NP];
static cudaStream_t comm;    /* ddph_cuda_comm_stream */
static int param_of[NP];     /* a bucket's one parameter */

typedef struct seen_call {
    int bucket;
    ddph_status status;
    int enqueued_not_run; /* the results were not there before the wait */
    int results_after_wait;
} seen_call;

static seen_call calls[NP * STEPS * 2];
static int ncalls;

static float input(int p, int i) { return 0.1f + 0.001f * (float)(p * N + i); }

/* What bucket b's parameter holds: the gradients that went in (INPUT),
 * the hook's results (RESULTS: the zeroes hook reduces, then zeroes its
 * bucket), or anything else (OTHER). */
enum { INPUT, RESULTS, OTHER };

static int bucket_holds(int b)
{
    int p = param_of[b], input_seen = 1, zeros = 1;
    for (int i = 0; i < N; i++) {
        input_seen &= grads[p][i] == input(p, i);
        zeros &= grads[p][i] == 0.0f;
    }
    return input_seen ? INPUT : zeros ? RESULTS : OTHER;
}

static void on_bucket(void *user, ddph_model *model, int bucket,
                      ddph_status status, const char *message)
{
    (void)user;
    (void)model;
    (void)message;
    seen_call *c = &calls[ncalls++ % (int)(sizeof calls / sizeof *calls)];
    c->bucket = bucket;
    c->status = status;
    if (status != DDPH_OK || bucket < 0 || bucket >= NP)
        return;
    c->enqueued_not_run = bucket_holds(bucket) == INPUT;
    c->results_after_wait =
        cudaEventRecord(events[bucket], comm) == cudaSuccess &&
        cudaStreamWaitEvent(waiter, events[bucket], 0) == cudaSuccess &&
        cudaStreamSynchronize(waiter) == cudaSuccess &&
        bucket_holds(bucket) == RESULTS;
}

static char ini[256];

static void setup(void)
{
    fake_reset();
    const char *plugins = getenv("DDPH_TEST_FAKE_DIR");
    ck_assert_msg(plugins, "DDPH_TEST_FAKE_DIR is not set");
    setenv("DDPH_BACKEND_DIR", FAKE_MODULE_DIR, 1);
    snprintf(ini, sizeof ini, "/tmp/ddph-gpu-callback-%d.ini", (int)getpid());
    FILE *f = fopen(ini, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[runtime]\nbackend = nccl\nplugin_path = %s\ntimeout_s = 20\n"
               "[hook]\nname = %s/zeroes.so\n", plugins, plugins);
    fclose(f);
}

static void teardown(void) { unlink(ini); }

/* STEPS steps of the model, with the callback or without it (then
 * step_wait alone copies the results back). */
static void run_steps(int with_callback)
{
    ck_assert_int_eq(ddph_open(ini, NULL, NULL, &ctx), DDPH_OK);
    ck_assert_int_eq(ddph_cuda_device(ctx), 0);
    comm = (cudaStream_t)ddph_cuda_comm_stream(ctx);
    ck_assert_ptr_nonnull(comm);
    ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreate(&waiter), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreate(&compute), cudaSuccess);
    ck_assert_int_eq(ddph_set_stream(ctx, compute), DDPH_OK);
    ddph_model *m;
    ck_assert_int_eq(ddph_model_create(ctx, "net", &m), DDPH_OK);
    for (int p = 0; p < NP; p++) {
        ck_assert_int_eq(cudaMalloc((void **)&grads[p], N * sizeof(float)),
                         cudaSuccess);
        ck_assert_int_eq(cudaEventCreateWithFlags(&events[p],
                                                  cudaEventDisableTiming),
                         cudaSuccess);
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        int64_t shape[1] = {N};
        ck_assert_int_eq(ddph_model_add_param(m, name, grads[p], shape, 1,
                                              DDPH_F32, DDPH_CUDA, NULL),
                         DDPH_OK);
    }
    /* One parameter a bucket (N floats are 256 B). */
    ck_assert_int_eq(ddph_model_set_bucket_caps(m, 200e-6, 200e-6), DDPH_OK);
    if (with_callback)
        ck_assert_int_eq(ddph_model_set_bucket_callback(m, on_bucket, NULL),
                         DDPH_OK);
    ck_assert_int_eq(ddph_model_finalize(m), DDPH_OK);
    ck_assert_int_eq(ddph_model_bucket_count(m), NP);
    for (int b = 0; b < NP; b++) {
        ddph_bucket_info info;
        ck_assert_int_eq(ddph_model_bucket_info(m, b, &info), DDPH_OK);
        ck_assert_int_eq(info.nparams, 1);
        param_of[b] = info.params[0];
    }
    for (int step = 0; step < STEPS; step++) {
        for (int p = 0; p < NP; p++)
            for (int i = 0; i < N; i++)
                grads[p][i] = input(p, i);
        ck_assert_int_eq(ddph_step_begin(ctx, &m, 1), DDPH_OK);
        for (int p = NP - 1; p >= 0; p--) /* backward: last first */
            ck_assert_int_eq(ddph_grad_ready(m, p), DDPH_OK);
        ck_assert_int_eq(ddph_step_wait(ctx), DDPH_OK);
        for (int b = 0; b < NP; b++)
            ck_assert_msg(bucket_holds(b) == RESULTS,
                          "step %d: bucket %d's results not in the "
                          "gradients after step_wait", step, b);
        ck_assert_int_eq(ddph_step_end(ctx), DDPH_OK);
        ck_assert_int_eq(ncalls, with_callback ? (step + 1) * NP : 0);
        for (int k = 0; with_callback && k < NP; k++) {
            const seen_call *c = &calls[step * NP + k];
            /* In launch order. */
            ck_assert_int_eq(c->bucket, k);
            ck_assert_int_eq(c->status, DDPH_OK);
            ck_assert_msg(c->enqueued_not_run,
                          "step %d bucket %d: the results were already in "
                          "the gradients when the callback came (a host "
                          "wait before it)", step, k);
            ck_assert_msg(c->results_after_wait,
                          "step %d bucket %d: an event recorded on the "
                          "communication stream in the callback did not "
                          "bring the bucket's results", step, k);
        }
    }
    ck_assert_int_eq(ddph_close(ctx), DDPH_OK);
}

START_TEST(callback_after_results_enqueued_on_comm_stream)
{
    run_steps(1);
}
END_TEST

START_TEST(step_wait_copies_back_without_callback)
{
    run_steps(0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_callback");
    TCase *tc = tcase_create("fake_nccl");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, callback_after_results_enqueued_on_comm_stream);
    tcase_add_test(tc, step_wait_copies_back_without_callback);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
