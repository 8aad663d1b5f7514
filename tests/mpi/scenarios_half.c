/* scenarios_half.c: the scenarios of test_runtime's registry on half-precision buckets, overflow and the ring. */
#include "build-config.h"

#include "scenario.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bf16_host.h"

/* |g| = 1e5 > 65504: fp16_compress_hook casts before it divides, so the
 * value is Inf before the division could bring it in range. */
void run_fp16_overflow(void)
{
    static const char *const hooks[] = {"fp16", "bf16"};
    for (int h = 0; h < 2; h++) {
        ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), hooks[h], NULL);
        model_fixture fx;
        setup(ctx, &fx, 0);
        CHECK_OK(ddph_model_finalize(fx.m), ctx);
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx.numel[i]; k++)
                fx.grads[i][k] = (k % 2 ? -1e5f : 1e5f);
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int i = 0; i < NP; i++)
            for (size_t k = 0; k < fx.numel[i]; k++) {
                float g = fx.grads[i][k], want = k % 2 ? -1e5f : 1e5f;
                if (h == 0)
                    CHECK(g == (k % 2 ? -1.0f / 0.0f : 1.0f / 0.0f),
                          "fp16: p%d[%zu] = %g, want Inf", i, k, g);
                else
                    CHECK(fabsf(g - want) <= 0.005f * fabsf(want),
                          "bf16: p%d[%zu] = %g, want about %g", i, k, g, want);
            }
        CHECK_OK(ddph_step_end(ctx), ctx);
        ddph_close(ctx);
        fixture_free(&fx);
    }
}


/* A gradient value with a wide spread of magnitudes (down into the fp16
 * subnormals, up to 1e3), different on every rank. */
static float spread_value(int rank, int step, int p, size_t i)
{
    uint32_t x = (uint32_t)(rank * 7919 + step * 104729 + p * 1299709) +
                 (uint32_t)i * 2654435761u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    float mant = (float)(x & 0xFFFF) / 65536.0f - 0.5f;
    return ldexpf(mant, (int)(x >> 16) % 36 - 26);
}

/* One step of `hook` on spread values; returns the averaged gradients of
 * every parameter, concatenated (caller frees). */
static float *half_bucket_step(const char *hook, const char *wrapper,
                               int view, size_t *total)
{
    char extra[160];
    snprintf(extra, sizeof extra,
             "gradient_as_bucket_view = %s\n[model.net]\nwrapper = %s\n"
             "[runtime]",
             view ? "true" : "false", wrapper);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), hook, extra);
    int rank = ddph_rank(ctx);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    *total = 0;
    for (int i = 0; i < NP; i++)
        *total += fx.numel[i];
    float *out = malloc(*total * sizeof *out);
    CHECK(out != NULL, "out of memory");
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    for (int i = NP - 1; i >= 0; i--) {
        void *p;
        CHECK_OK(ddph_model_grad_ptr(fx.m, i, &p), ctx);
        for (size_t k = 0; k < fx.numel[i]; k++)
            ((float *)p)[k] = spread_value(rank, 0, i, k);
        CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    }
    CHECK_OK(ddph_step_wait(ctx), ctx);
    size_t at = 0;
    for (int i = 0; i < NP; i++) {
        void *p;
        CHECK_OK(ddph_model_grad_ptr(fx.m, i, &p), ctx);
        memcpy(out + at, p, fx.numel[i] * sizeof *out);
        at += fx.numel[i];
    }
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK_OK(ddph_close(ctx), ctx);
    fixture_free(&fx);
    return out;
}

void run_half_buckets(void)
{
    static const char *const hooks[][2] = {{"fp16", "none"},
                                           {"bf16", "none"},
                                           {"allreduce", "none"},
                                           {"allreduce", "fp16"},
                                           {"fp16", "bf16"}};
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (int h = 0; h < 5; h++) {
        size_t n, n2;
        float *copied = half_bucket_step(hooks[h][0], hooks[h][1], 0, &n);
        float *viewed = half_bucket_step(hooks[h][0], hooks[h][1], 1, &n2);
        CHECK(n == n2, "sizes");
        for (size_t k = 0; k < n; k++)
            CHECK(memcmp(&copied[k], &viewed[k], sizeof(float)) == 0,
                  "%s (wrapper %s) element %zu: %a with copies, %a as a view",
                  hooks[h][0], hooks[h][1], k, (double)copied[k],
                  (double)viewed[k]);
        /* bf16 on 2 ranks, independently: each rank's value rounded to
         * bf16, halved (exact), summed in float and rounded once. */
        if (h == 1 && world == 2) {
            size_t k = 0;
            for (int i = 0; i < NP; i++)
                for (size_t e = 0; e < (size_t)(shapes[i][0] * shapes[i][1]);
                     e++, k++) {
                    float a = bf16_to_float(bf16_from_float(
                                  spread_value(0, 0, i, e))) / 2,
                          b = bf16_to_float(bf16_from_float(
                                  spread_value(1, 0, i, e))) / 2;
                    float want = bf16_to_float(bf16_from_float(a + b));
                    CHECK(copied[k] == want, "bf16 p%d[%zu]: %a, want %a", i,
                          e, (double)copied[k], (double)want);
                }
        }
        free(copied);
        free(viewed);
    }
}


/* half-ring: half-precision sums of 32 KiB and more go round a ring of
 * point-to-point messages (runtime/backends/mpi/mpi_allreduce.c), here a 4,500,001-element
 * bucket (blocks of 4 MiB, chunks that do not split evenly) and a small
 * one: fp16 and bf16 on f32 gradients, and allreduce on bf16 gradients.
 * On one host the large bucket is summed in shared memory unless
 * shared_buckets = false, so both are run.
 * The values divide by 2, 3 and 4 exactly and every partial sum is an
 * integer below 256, so the average is exact in either half type. */
float ring_value(int rank, size_t k)
{
    return 12.0f * (float)((int)((k * 7 + (size_t)rank * 3) % 11) - 5);
}

static void half_ring_once(const char *hook, ddph_dtype dtype, int shared)
{
    static const size_t numel[2] = {4500001, 30000};
#define HALF_RING_CAPS "bucket_cap_mb = 64\nfirst_bucket_cap_mb = 0.05"
    const char *path = job(env("DDPH_TEST_PLUGIN_DIR"), hook,
                           shared ? HALF_RING_CAPS
                                  : HALF_RING_CAPS "\nshared_buckets = false");
#undef HALF_RING_CAPS
    ddph_ctx *ctx = open_path(path);
    int world = ddph_world_size(ctx);
    void *g[2];
    ddph_model *m = flat_model(ctx, 2, numel, dtype, g, 2);
    for (int s = 0; s < 2; s++) {
        CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
        for (int i = 1; i >= 0; i--) {
            for (size_t k = 0; k < numel[i]; k++) {
                float v = ring_value(check_rank, k + (size_t)i);
                if (dtype == DDPH_F32)
                    ((float *)g[i])[k] = v;
                else
                    ((uint16_t *)g[i])[k] = bf16_from_float(v);
            }
            CHECK_OK(ddph_grad_ready(m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int i = 0; i < 2; i++)
            for (size_t k = 0; k < numel[i]; k++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += ring_value(r, k + (size_t)i);
                want /= (float)world;
                float got = dtype == DDPH_F32
                                ? ((float *)g[i])[k]
                                : bf16_to_float(((uint16_t *)g[i])[k]);
                CHECK(got == want, "%s, %d ranks, shared_buckets %d, "
                      "step %d, p%d[%zu] = %g, want %g", hook, world, shared,
                      s, i, k, (double)got, (double)want);
            }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    ddph_close(ctx);
    free(g[0]);
    free(g[1]);
}

void run_half_ring(void)
{
    for (int shared = 1; shared >= 0; shared--) {
        half_ring_once("fp16", DDPH_F32, shared);
        half_ring_once("bf16", DDPH_F32, shared);
        half_ring_once("allreduce", DDPH_BF16, shared);
    }
}

/* sums: the same on f32 gradients through the allreduce hook as well;
 * run by tests/cluster/check.sh on 2 hosts x 2 ranks, where the ring's
 * and MPICH's messages cross a shaped TCP link, and on 3 hosts x 1 rank,
 * where the f32 sums go round the ring too (mpi_allreduce.c). */
void run_sums(void)
{
    half_ring_once("allreduce", DDPH_F32, 1);
    run_half_ring();
}
