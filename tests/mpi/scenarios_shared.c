/* scenarios_shared.c: the scenarios of test_runtime's registry on buckets in shared memory. */
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

/* Model "net" of n one-dimensional host parameters p0.. of numel[i]
 * elements (zeroed, in grads[i]), finalized into nbuckets buckets. */
ddph_model *flat_model(ddph_ctx *ctx, int n, const size_t *numel,
                              ddph_dtype dtype, void **grads, int nbuckets)
{
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "net", &m), ctx);
    for (int i = 0; i < n; i++) {
        grads[i] = calloc(numel[i], dtype == DDPH_F32 ? 4 : 2);
        CHECK(grads[i] != NULL, "out of memory");
        int64_t shape[1] = {(int64_t)numel[i]};
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        CHECK_OK(ddph_model_add_param(m, name, grads[i], shape, 1, dtype,
                                      DDPH_CPU, NULL),
                 ctx);
    }
    CHECK_OK(ddph_model_finalize(m), ctx);
    CHECK(ddph_model_bucket_count(m) == nbuckets, "%d buckets, want %d",
          ddph_model_bucket_count(m), nbuckets);
    return m;
}

/* The file a mapping of this process comes from, for the address p ("" if
 * anonymous or not mapped). */
static void mapping_of(const void *p, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL, "/proc/self/maps");
    char line[512];
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 ||
            (uintptr_t)p < lo || (uintptr_t)p >= hi)
            continue;
        snprintf(out, cap, "%s", line + at);
        out[strcspn(out, "\n")] = '\0';
        break;
    }
    fclose(f);
}

/* One job: three f32 parameters (p0 of `big` elements, 30001 and 7: an
 * uneven bucket of 120 KB and a small one that goes through MPI), two
 * steps of exact averages (ring_value divides by 2, 3 and 4).  With
 * `expect` the buckets must be in shared memory when the job asks for it,
 * else never. */
static void shared_buckets_once(int view, int shared, int expect, size_t big)
{
    const size_t numel[3] = {big, 30001, 7};
    char extra[160];
    snprintf(extra, sizeof extra,
             "bucket_cap_mb = 0.1\nfirst_bucket_cap_mb = 0.00001\n"
             "gradient_as_bucket_view = %s\nshared_buckets = %s",
             view ? "true" : "false", shared ? "true" : "false");
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    void *own[3];
    float *g[3];
    ddph_model *m = flat_model(ctx, 3, numel, DDPH_F32, own, 3);
    /* No name is left in /dev/shm once finalize returns (an unnamed
     * segment never has one). */
    if (check_rank == 0 && shared) {
        char cmd[96];
        snprintf(cmd, sizeof cmd, "ls /dev/shm/ddphook-%ld-* >/dev/null 2>&1",
                 (long)getpid());
        CHECK(system(cmd) != 0, "a /dev/shm/ddphook-%ld-* file is left",
              (long)getpid());
    }
    for (int i = 0; i < 3; i++) {
        void *p;
        CHECK_OK(ddph_model_grad_ptr(m, i, &p), ctx);
        g[i] = p;
        char file[256];
        mapping_of(p, file, sizeof file);
        /* An unnamed segment maps as "/dev/shm/#123 (deleted)", a named
         * one (where O_TMPFILE is not supported) as /dev/shm/ddphook-*. */
        int in_shm = strncmp(file, "/dev/shm/", 9) == 0;
        CHECK(in_shm == (view && shared && expect),
              "p%d (view %d, shared_buckets %d) is in memory from '%s'", i,
              view, shared, file);
    }
    for (int s = 0; s < 2; s++) {
        CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
        for (int i = 2; i >= 0; i--) {
            for (size_t k = 0; k < numel[i]; k++)
                g[i][k] = ring_value(check_rank, k + (size_t)(i + s));
            CHECK_OK(ddph_grad_ready(m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int i = 0; i < 3; i++)
            for (size_t k = 0; k < numel[i]; k++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += ring_value(r, k + (size_t)(i + s)) / (float)world;
                CHECK(g[i][k] == want,
                      "view %d shared %d step %d: p%d[%zu] = %g, want %g",
                      view, shared, s, i, k, (double)g[i][k], (double)want);
            }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    CHECK_OK(ddph_close(ctx), ctx);
    for (int i = 0; i < 3; i++)
        free(own[i]);
}

/* expect: whether the buckets can be shared here; big: p0's elements. */
static void run_shared_buckets(int expect, size_t big)
{
    for (int view = 0; view < 2; view++)
        for (int shared = 1; shared >= 0; shared--)
            shared_buckets_once(view, shared, expect, big);
}

/* A hook (tests/fake_plugins/shifted) that sums a quarter of its bucket
 * at the same place on every rank, then a quarter at a place that depends
 * on the rank (Q2 on even ranks, Q3 on odd ones): each must get MPI's
 * result, the second one summed over the other ranks' quarters. */
void run_shifted_buffers(void)
{
    enum { Q = 20000 };
    char hook[512];
    snprintf(hook, sizeof hook, "%s/shifted.so", env("DDPH_TEST_FAKE_DIR"));
    /* Without the fingerprints, which refuse sums of different places
     * (tests/step_agreement.sh): what the sums do is the question here. */
    ddph_ctx *ctx = open_job("/nowhere", hook,
                             "bucket_cap_mb = 1\nfirst_bucket_cap_mb = 1\n"
                             "check_collectives = false");
    int world = ddph_world_size(ctx);
    const size_t numel[1] = {4 * Q};
    void *grad;
    ddph_model *m = flat_model(ctx, 1, numel, DDPH_F32, &grad, 1);
    float *g = grad;
    CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
    for (size_t k = 0; k < 4 * Q; k++)
        g[k] = ring_value(check_rank, k);
    CHECK_OK(ddph_grad_ready(m, 0), ctx);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    size_t mine = (size_t)(2 + check_rank % 2) * Q;
    for (size_t k = 0; k < 4 * Q; k++) {
        float want = ring_value(check_rank, k) / (float)world;
        size_t j = k % Q;
        if (k / Q == 1 || (k >= mine && k < mine + Q)) {
            want = 0;
            for (int r = 0; r < world; r++) {
                size_t at = k / Q == 1 ? k : (size_t)(2 + r % 2) * Q + j;
                want += ring_value(r, at) / (float)world;
            }
        }
        CHECK(g[k] == want, "quarter %zu element %zu: %g, want %g", k / Q, j,
              (double)g[k], (double)want);
    }
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK_OK(ddph_close(ctx), ctx);
    free(grad);
}


void run_shared_buckets_here(void)
{
    run_shared_buckets(1, 100000);
}

void run_private_buckets(void)
{
    run_shared_buckets(0, 8000000);
}
