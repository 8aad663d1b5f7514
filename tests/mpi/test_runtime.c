/* test_runtime: multi-rank behaviour of the runtime through the public API,
 * run under `mpiexec -n 2` and `-n 4` by tests/run_mpi.sh.
 *
 *   test_runtime SCENARIO
 *
 * average     every rank's gradients become the exact average, several
 *             buckets, several steps, hook called once per bucket per step
 * view        the same with gradient_as_bucket_view (no copies)
 * overlap     bucket 0's hook starts before the last gradient is ready
 * mismatch    one rank registers a different shape: every rank gets
 *             DDPH_ERR_MISMATCH naming the difference
 * hook-error  a hook failing on bucket 1 surfaces from step_wait on every
 *             rank with hook name, bucket, rank and the plugin's message;
 *             the job is broken then, and ddph_close says so at once
 * timeout     the last rank is stuck past timeout_s: the others report one
 *             timeout for the step naming bucket, hook and rank; the
 *             stuck rank hears of it at once when it wakes up
 * timeout-polled  the same with a hook that polls its nonblocking
 *             allreduce with test() (ABI minor 2)
 * shared-buckets  on one host the buckets live in one shared-memory
 *             segment (its pages are /dev/shm/ddphook-*, unlinked at once)
 *             and allreduce sums there: exact averages of f32 buckets of
 *             uneven sizes, with copies and as a view, with and without
 *             [runtime] shared_buckets; run on 3 ranks too
 * private-buckets  the same where no segment can be had, with a 32 MB
 *             p0: the buckets stay private and the averages exact (run by
 *             tests/cluster/check.sh on 2 hosts, and on one host with a
 *             /dev/shm of 40 MB)
 * shifted-buffers  a hook that sums part of its bucket at the same place
 *             on every rank, then at a place that depends on the rank:
 *             MPI's results both times (the second not in shared memory)
 * timeout-shared  timeout, with bucket 0 summed in shared memory
 * misuse      grad_ready twice, outside a step, parameters never ready
 * powersgd    exact reconstruction of rank-1 gradients sharing a column
 *             space, error feedback, bytes on the wire = the compression
 *             formula, statistics, PyTorch's invalid-option rule
 * powersgd-blocks  per-tensor and batched PowerSGD on matrices of several
 *             256 KiB row blocks: each step's result is the projection of
 *             the averaged input + error the test keeps for every rank
 * accumulate  [accumulate] steps = 1, 2, 4: the synchronised step gives
 *             the average over ranks of the summed micro-steps, hooks run
 *             once per bucket per synchronised step, nothing is sent
 *             otherwise; NO_SYNC, FORCE_SYNC, END_OF_DATA, sync_each_batch
 * two-models  two models in one step with different hooks (powersgd,
 *             fp16) share the decision; [model.NAME] accumulate_steps
 * trace       [runtime] trace = FILE: rank 0 writes one Chrome trace with
 *             every rank's buckets, hook calls and collectives
 * nonfinite   a NaN on rank 0 propagates to every rank by default; with
 *             check_finite = true rank 0's step_wait names bucket and
 *             parameter
 * local-sgd   the post_localsgd example hook ($DDPH_TEST_LOCALSGD) on 4
 *             ranks: parameters identical on all ranks exactly on
 *             averaging steps, within subgroups of 2 otherwise; then the
 *             hierarchical averager's schedule; then f32, bf16 and f64
 *             parameters averaged together (promoted, rounded back)
 * local-sgd-intra-node  the same with the default subgroups, the hosts of
 *             tests/cluster/cluster.sh (2 hosts x 2 ranks)
 * fp16-overflow  gradients of 1e5 through the fp16 hook become Inf (cast
 *             before dividing, as PyTorch), through bf16 they stay finite
 * half-buckets  fp16 and bf16 ask for host buckets kept in their half type
 *             (gradients cast straight in and back) and, with allreduce,
 *             divided as they are copied in: the same bits as with
 *             gradient_as_bucket_view, where the hook casts and divides;
 *             also fp16 under a bf16 wrapper (the host must not divide
 *             then); on 2 ranks bf16 gives exactly bf16(bf16(a)/2 +
 *             bf16(b)/2).  Run on 3 ranks too (a divisor that is not a
 *             power of two)
 * half-ring   half-precision sums of 32 KiB and more, which go round a ring
 *             of point-to-point messages: a 4.5M-element bucket and a
 *             small one, exact averages with fp16, bf16 and bf16
 *             gradients.  Run on 3 ranks too (uneven chunks)
 * sums        half-ring, and the allreduce hook on f32 gradients: run by
 *             tests/cluster/check.sh on 2 hosts x 2 ranks
 *
 * Prints "ok SCENARIO" on rank 0 and exits 0 on success. */
#include "build-config.h"

#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "rank_check.h"

#include "../bf16_host.h"


#define CHECK_OK(call, ctx)                                                  \
    CHECK((call) == DDPH_OK, "%s", ddph_last_error(ctx))

/* Writes a job file for this rank; extra is appended verbatim (to the
 * [runtime] section, where it sets bucket caps or timeout_s instead of
 * the defaults here). */
static const char *job(const char *hook_dir, const char *hook,
                       const char *extra)
{
    static char path[256];
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    snprintf(path, sizeof path, "/tmp/ddph-test-%d-%d.ini", (int)getppid(),
             rank);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    int caps = !(extra && strstr(extra, "bucket_cap_mb"));
    fprintf(f, "[runtime]\nplugin_path = %s\n%s%s\n%s\n[hook]\nname = %s\n",
            hook_dir,
            caps ? "bucket_cap_mb = 0.001\nfirst_bucket_cap_mb = 0.001\n" : "",
            extra && strstr(extra, "timeout_s") ? "" : "timeout_s = 20",
            extra ? extra : "", hook);
    fclose(f);
    return path;
}

static ddph_ctx *open_path(const char *path)
{
    ddph_ctx *ctx;
    CHECK(ddph_open(path, NULL, NULL, &ctx) == DDPH_OK, "cannot open %s",
          path);
    return ctx;
}

/* Opens a job made by job(). */
static ddph_ctx *open_job(const char *hook_dir, const char *hook,
                          const char *extra)
{
    return open_path(job(hook_dir, hook, extra));
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    CHECK(v && *v, "%s is not set (run through make check)", name);
    return v;
}

#define NP 6
static const int64_t shapes[NP][2] = {{40, 30}, {30, 1}, {64, 32},
                                      {32, 1},  {10, 64}, {10, 1}};

typedef struct model_fixture {
    ddph_model *m;
    float *grads[NP];
    size_t numel[NP];
} model_fixture;

static void setup_named(ddph_ctx *ctx, model_fixture *fx, int shape_bump,
                        const char *name)
{
    CHECK_OK(ddph_model_create(ctx, name, &fx->m), ctx);
    for (int i = 0; i < NP; i++) {
        int64_t sh[2] = {shapes[i][0] + (i == 2 ? shape_bump : 0),
                         shapes[i][1]};
        fx->numel[i] = (size_t)(sh[0] * sh[1]);
        fx->grads[i] = calloc(fx->numel[i], sizeof(float));
        char pname[32];
        snprintf(pname, sizeof pname, "p%d", i);
        CHECK_OK(ddph_model_add_param(fx->m, pname, fx->grads[i], sh, 2,
                                      DDPH_F32, DDPH_CPU, NULL),
                 ctx);
    }
}

/* The backward pass of a fixture: every parameter, last first. */
static void mark_all_ready(ddph_ctx *ctx, ddph_model *m)
{
    for (int i = NP - 1; i >= 0; i--)
        CHECK_OK(ddph_grad_ready(m, i), ctx);
}

static void fixture_free(model_fixture *fx)
{
    for (int i = 0; i < NP; i++)
        free(fx->grads[i]);
}

static void setup(ddph_ctx *ctx, model_fixture *fx, int shape_bump)
{
    setup_named(ctx, fx, shape_bump, "net");
}

static void fx_named(ddph_ctx *ctx, model_fixture *fx, const char *name)
{
    setup_named(ctx, fx, 0, name);
}

/* Small integers: x / W then a sum of W terms is exact for W = 2, 4. */
static float value(int rank, int step, int p, size_t i)
{
    return (float)((rank + 1) * (int)((i + (size_t)p) % 5) - step);
}

/* lanes > 1: the allreduce hook allows concurrent buckets, so they spread
 * over that many communication lanes; the average must not change. */
static void run_average(int view, int lanes)
{
    char extra[128];
    snprintf(extra, sizeof extra, "%s\nlanes = %d",
             view ? "gradient_as_bucket_view = true" : "", lanes);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m);
    CHECK(nb >= 3, "expected several buckets, got %d", nb);
    float *g[NP];
    for (int i = 0; i < NP; i++) {
        void *p;
        CHECK_OK(ddph_model_grad_ptr(fx.m, i, &p), ctx);
        CHECK(view ? p != fx.grads[i] : p == fx.grads[i],
              "grad_ptr of p%d", i);
        g[i] = p;
    }
    const int steps = 3;
    for (int s = 0; s < steps; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        CHECK(ddph_step_syncs(ctx), "step %d should sync", s);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx.numel[i]; k++)
                g[i][k] = value(check_rank, s, i, k);
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int i = 0; i < NP; i++)
            for (size_t k = 0; k < fx.numel[i]; k++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += value(r, s, i, k) / (float)world;
                CHECK(g[i][k] == want, "p%d[%zu] = %g, want %g at step %d", i,
                      k, g[i][k], want, s);
            }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    for (int b = 0; b < nb; b++) {
        ddph_bucket_info info;
        CHECK_OK(ddph_model_bucket_info(fx.m, b, &info), ctx);
        CHECK(info.hook_calls == (uint64_t)steps,
              "bucket %d: %llu hook calls, want %d", b,
              (unsigned long long)info.hook_calls, steps);
        CHECK(info.bytes_on_wire == (uint64_t)steps * info.bytes,
              "bucket %d: %llu bytes on the wire, want %zu per step", b,
              (unsigned long long)info.bytes_on_wire, info.bytes);
    }
    ddph_close(ctx);
    fixture_free(&fx);
}

/* Several lanes: allreduce's buckets spread over 3 lanes (copies and
 * views); fp16, which does not allow it, stays on lane 0 of the same job;
 * a job file whose lanes differ between ranks fails on every rank. */
static void run_lanes(void)
{
    run_average(0, 3);
    run_average(1, 3);
    ddph_ctx *ctx =
        open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                 "lanes = 3\n[model.half]\nhook = fp16\n[runtime]");
    model_fixture a, h;
    fx_named(ctx, &a, "net");
    fx_named(ctx, &h, "half");
    CHECK_OK(ddph_model_finalize(a.m), ctx);
    CHECK_OK(ddph_model_finalize(h.m), ctx);
    ddph_model *both[2] = {a.m, h.m};
    CHECK_OK(ddph_step_begin(ctx, both, 2), ctx);
    for (int i = NP - 1; i >= 0; i--) {
        CHECK_OK(ddph_grad_ready(a.m, i), ctx);
        CHECK_OK(ddph_grad_ready(h.m, i), ctx);
    }
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    CHECK(ddph_close(ctx) == DDPH_OK, "close");
    fixture_free(&a);
    fixture_free(&h);
    char mine[32];
    snprintf(mine, sizeof mine, "lanes = %d", check_rank == 0 ? 2 : 1);
    ddph_ctx *bad;
    ddph_status st = ddph_open(job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                                   mine),
                               NULL, NULL, &bad);
    CHECK(st == DDPH_ERR_CONFIG, "mismatched lanes opened (%s)",
          ddph_status_name(st));
}

static void run_overlap(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    ddph_bucket_info b0;
    CHECK_OK(ddph_model_bucket_info(fx.m, 0, &b0), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    /* Backward reaches bucket 0's parameters first... */
    for (int j = 0; j < b0.nparams; j++)
        CHECK_OK(ddph_grad_ready(fx.m, b0.params[j]), ctx);
    /* ...and its hook must start while parameter 0 is still not ready. */
    double waited = 0;
    for (;;) {
        ddph_bucket_info now;
        CHECK_OK(ddph_model_bucket_info(fx.m, 0, &now), ctx);
        if (now.hook_calls >= 1)
            break;
        CHECK(waited < 10.0, "bucket 0's hook did not start within 10 s "
                             "while backward was still running");
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        waited += 1e-3;
    }
    for (int i = NP - 1; i >= 0; i--) {
        int in_b0 = 0;
        for (int j = 0; j < b0.nparams; j++)
            in_b0 |= b0.params[j] == i;
        if (!in_b0)
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    }
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    ddph_close(ctx);
    fixture_free(&fx);
}

static void run_mismatch(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, check_rank == world - 1 ? 1 : 0); /* the last rank differs */
    ddph_status st = ddph_model_finalize(fx.m);
    CHECK(st == DDPH_ERR_MISMATCH, "finalize returned %s",
          ddph_status_name(st));
    const char *msg = ddph_last_error(ctx);
    char want[200];
    snprintf(want, sizeof want,
             "ranks disagree on the configuration: rank 0 has 'param 2 p2 "
             "f32 cpu shape 64x32' where rank %d has 'param 2 p2 f32 cpu "
             "shape 65x32'",
             world - 1);
    CHECK(strstr(msg, want), "message '%s' lacks '%s'", msg, want);
    ddph_close(ctx);
    fixture_free(&fx);
}

/* Ends a scenario whose job failed: ddph_close left MPI unfinalized (as
 * it must), so the process exits without MPI_Finalize once every rank has
 * checked what it had to. */
static void end_failed_job(const char *scenario)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (check_rank == 0)
        printf("ok %s\n", scenario);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
}

/* Every rank's hook fails on bucket 1 at iteration 1: every rank reports a
 * hook failure (its own or a peer's, whichever came first), the job is
 * broken from then on, and ddph_close says so without hanging. */
static void run_hook_error(void)
{
    char hook[512];
    snprintf(hook, sizeof hook, "%s/failing.so", env("DDPH_TEST_FAKE_DIR"));
    ddph_ctx *ctx = open_job("/nowhere", hook, NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    for (int s = 0; s < 2; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        mark_all_ready(ctx, fx.m);
        ddph_status st = ddph_step_wait(ctx);
        if (s == 0) {
            CHECK(st == DDPH_OK, "%s", ddph_last_error(ctx));
        } else {
            CHECK(st == DDPH_ERR_HOOK, "step %d: %s", s, ddph_status_name(st));
            const char *want[] = {"hook 'fake' failed on model 'net' bucket 1 (rank ",
                                  "DDPH_ERR_HOOK: fake failure on bucket 1 at "
                                  "iteration 1"};
            for (int k = 0; k < 2; k++)
                CHECK(strstr(ddph_last_error(ctx), want[k]), "'%s' lacks '%s'",
                      ddph_last_error(ctx), want[k]);
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    /* Broken: no more steps, and close returns the failure promptly. */
    CHECK(ddph_step_begin(ctx, &fx.m, 1) == DDPH_ERR_HOOK, "step after failure");
    CHECK(strstr(ddph_last_error(ctx), "step_begin: the job has failed"), "%s",
          ddph_last_error(ctx));
    double t0 = MPI_Wtime();
    CHECK(ddph_close(ctx) == DDPH_ERR_HOOK, "close of a failed job");
    CHECK(MPI_Wtime() - t0 < 1.0, "close took %.1f s", MPI_Wtime() - t0);
    fixture_free(&fx);
    end_failed_job("hook-error");
}

/* A hook that returns with a nonblocking request it never waited for:
 * the host waits for it (the bucket's memory is in flight) and fails the
 * bucket on every rank with DDPH_ERR_STATE, naming what happened. */
static void run_leaked_request(void)
{
    char hook[512];
    snprintf(hook, sizeof hook, "%s/leaks_request.so",
             env("DDPH_TEST_FAKE_DIR"));
    ddph_ctx *ctx = open_job("/nowhere", hook, NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    mark_all_ready(ctx, fx.m);
    ddph_status st = ddph_step_wait(ctx);
    CHECK(st == DDPH_ERR_STATE, "%s: %s", ddph_status_name(st),
          ddph_last_error(ctx));
    CHECK(strstr(ddph_last_error(ctx),
                 "on_bucket returned with 1 nonblocking request it never "
                 "waited for"),
          "%s", ddph_last_error(ctx));
    ddph_step_end(ctx);
    double t0 = MPI_Wtime();
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close of a failed job");
    CHECK(MPI_Wtime() - t0 < 1.0, "close took %.1f s", MPI_Wtime() - t0);
    fixture_free(&fx);
    end_failed_job("leaked-request");
}

/* The last rank is stuck (it sleeps through the others' timeout): the
 * others report within timeout_s, naming bucket, hook and rank, once for
 * the step however many buckets are in flight.  When the stuck rank wakes
 * up it hears of their failure at once, and every rank's ddph_close
 * returns the failure promptly.  extra: the job's [runtime] keys
 * (timeout_s = 1.5 at least); bump: rows added to p2. */
static void run_timeout(const char *hook_dir, const char *hook,
                        const char *extra, int bump, const char *want2,
                        const char *scenario)
{
    ddph_ctx *ctx = open_job(hook_dir, hook, extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, bump);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m);
    CHECK(nb > 2, "%d buckets: several must be in flight", nb);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    int stuck = check_rank == world - 1;
    if (stuck)
        sleep(4); /* well past timeout_s */
    double t0 = MPI_Wtime();
    mark_all_ready(ctx, fx.m);
    ddph_status st = ddph_step_wait(ctx);
    double took = MPI_Wtime() - t0;
    CHECK(st == DDPH_ERR_TIMEOUT, "%s: %s", ddph_status_name(st),
          ddph_last_error(ctx));
    const char *want = "failed on model 'net' bucket 0 (rank ";
    CHECK(strstr(ddph_last_error(ctx), want) &&
              strstr(ddph_last_error(ctx), want2),
          "'%s' lacks '%s' or '%s'", ddph_last_error(ctx), want, want2);
    if (stuck) {
        CHECK(strncmp(ddph_last_error(ctx), "rank ", 5) == 0 &&
                  strstr(ddph_last_error(ctx), " failed: "),
              "the stuck rank must name the rank that failed: %s",
              ddph_last_error(ctx));
        CHECK(took < 2.0, "the stuck rank heard it after %.1f s", took);
    } else {
        /* One timeout for the step, not one per bucket. */
        CHECK(took < 1.5 + 3, "reported after %.1f s", took);
    }
    CHECK_OK(ddph_step_end(ctx), ctx);
    double c0 = MPI_Wtime();
    CHECK(ddph_close(ctx) == DDPH_ERR_TIMEOUT, "close of a failed job");
    CHECK(MPI_Wtime() - c0 < 1.0, "close took %.1f s", MPI_Wtime() - c0);
    fixture_free(&fx);
    end_failed_job(scenario);
}

/* The same with a hook that polls its nonblocking allreduce with test():
 * test() ends it at timeout_s after its start, as a wait would.  Without
 * collective fingerprints, whose exchange before the start would time out
 * first (and is what the plain timeout scenario sees). */
static void run_timeout_polled(void)
{
    char hook[512];
    snprintf(hook, sizeof hook, "%s/polls.so", env("DDPH_TEST_FAKE_DIR"));
    run_timeout("/nowhere", hook, "timeout_s = 1.5\ncheck_collectives = false",
                0,
                "DDPH_ERR_TIMEOUT: allreduce did not complete within "
                "timeout_s = 1.5 s of its start",
                "timeout-polled");
}

static float ring_value(int rank, size_t k);

/* Model "net" of n one-dimensional host parameters p0.. of numel[i]
 * elements (zeroed, in grads[i]), finalized into nbuckets buckets. */
static ddph_model *flat_model(ddph_ctx *ctx, int n, const size_t *numel,
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
static void run_shifted_buffers(void)
{
    enum { Q = 20000 };
    char hook[512];
    snprintf(hook, sizeof hook, "%s/shifted.so", env("DDPH_TEST_FAKE_DIR"));
    ddph_ctx *ctx = open_job("/nowhere", hook,
                             "bucket_cap_mb = 1\nfirst_bucket_cap_mb = 1");
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

static void run_misuse(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK(ddph_step_begin(ctx, &fx.m, 1) == DDPH_ERR_STATE, "before finalize");
    CHECK(strstr(ddph_last_error(ctx), "model 'net' is not finalized"), "%s",
          ddph_last_error(ctx));
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK(ddph_grad_ready(fx.m, 0) == DDPH_ERR_STATE, "outside a step");
    CHECK(strstr(ddph_last_error(ctx), "grad_ready on model 'net' outside its "
                                       "step"),
          "%s", ddph_last_error(ctx));
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    /* The first rank to find unready parameters ends the job for all:
     * every rank must be inside this step before that. */
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(ddph_grad_ready(fx.m, 99) == DDPH_ERR_INVALID, "bad index");
    CHECK(strstr(ddph_last_error(ctx), "model 'net' has no parameter 99"),
          "%s", ddph_last_error(ctx));
    /* Every rank skips p0 and p1 (the last bucket), consistently. */
    for (int i = NP - 1; i >= 2; i--)
        CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    CHECK(ddph_grad_ready(fx.m, 5) == DDPH_ERR_STATE, "twice");
    CHECK(strstr(ddph_last_error(ctx), "parameter 5 'p5' marked ready twice in "
                                       "one step"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_step_wait(ctx) == DDPH_ERR_STATE, "unready parameters");
    CHECK(strstr(ddph_last_error(ctx), "2 parameters were never marked ready "
                                       "in this step: 'p1', 'p0'"),
          "%s", ddph_last_error(ctx));
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* Unready buckets never launched here: the job is over. */
    CHECK(ddph_close(ctx) == DDPH_ERR_STATE, "close after unready parameters");
    fixture_free(&fx);
    end_failed_job("misuse");
}


/* |g| = 1e5 > 65504: fp16_compress_hook casts before it divides, so the
 * value is Inf before the division could bring it in range. */
static void run_fp16_overflow(void)
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

static void run_half_buckets(void)
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
 * point-to-point messages (runtime/comm/mpi_ring.c), here a 4,500,001-element
 * bucket (blocks of 4 MiB, chunks that do not split evenly) and a small
 * one: fp16 and bf16 on f32 gradients, and allreduce on bf16 gradients.
 * The values divide by 2, 3 and 4 exactly and every partial sum is an
 * integer below 256, so the average is exact in either half type. */
static float ring_value(int rank, size_t k)
{
    return 12.0f * (float)((int)((k * 7 + (size_t)rank * 3) % 11) - 5);
}

static void half_ring_once(const char *hook, ddph_dtype dtype)
{
    static const size_t numel[2] = {4500001, 30000};
    const char *path = job(env("DDPH_TEST_PLUGIN_DIR"), hook,
                           "bucket_cap_mb = 64\nfirst_bucket_cap_mb = 0.05");
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
                CHECK(got == want, "%s, %d ranks, step %d, p%d[%zu] = %g, "
                      "want %g", hook, world, s, i, k, (double)got,
                      (double)want);
            }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    ddph_close(ctx);
    free(g[0]);
    free(g[1]);
}

static void run_half_ring(void)
{
    half_ring_once("fp16", DDPH_F32);
    half_ring_once("bf16", DDPH_F32);
    half_ring_once("allreduce", DDPH_BF16);
}

/* sums: the same on f32 gradients through the allreduce hook as well;
 * run by tests/cluster/check.sh on 2 hosts x 2 ranks, where the ring's
 * and MPICH's messages cross a shaped TCP link. */
static void run_sums(void)
{
    half_ring_once("allreduce", DDPH_F32);
    run_half_ring();
}

static void run_powersgd(void)
{
    /* start_powerSGD_iter <= 1 with error feedback: PyTorch's ValueError. */
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "powersgd",
                             "[hook.powersgd]\nstart_powerSGD_iter = 1\n"
                             "[runtime]");
    ddph_model *bad;
    CHECK_OK(ddph_model_create(ctx, "bad", &bad), ctx);
    CHECK(ddph_model_finalize(bad) == DDPH_ERR_OPTION, "start 1 accepted");
    CHECK(strstr(ddph_last_error(ctx), "start_powerSGD_iter = 1: it must be > "
                                       "1 when use_error_feedback or "
                                       "warm_start is on"),
          "%s", ddph_last_error(ctx));
    ddph_close(ctx);

    const char *path = job(env("DDPH_TEST_PLUGIN_DIR"), "powersgd",
                           "[hook.powersgd]\nmatrix_approximation_rank = 1\n"
                           "start_powerSGD_iter = 2\n[runtime]");
    ctx = open_path(path);
    int world = ddph_world_size(ctx);
    static const int64_t sh[4][2] = {{64, 32}, {64, 1}, {32, 16}, {16, 1}};
    float *g[4];
    size_t numel[4];
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "net", &m), ctx);
    for (int i = 0; i < 4; i++) {
        numel[i] = (size_t)(sh[i][0] * sh[i][1]);
        g[i] = calloc(numel[i], sizeof(float));
        char name[16];
        snprintf(name, sizeof name, "q%d", i);
        CHECK_OK(ddph_model_add_param(m, name, g[i], sh[i], i % 2 ? 1 : 2,
                                      DDPH_F32, DDPH_CPU, NULL),
                 ctx);
    }
    CHECK_OK(ddph_model_finalize(m), ctx);
    int nb = ddph_model_bucket_count(m);
    uint64_t wire_before = 0;
    for (int s = 0; s < 5; s++) {
        CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
        /* Weights: (rank+1) u v^T; biases: small integers. */
        for (int i = 3; i >= 0; i--) {
            for (size_t k = 0; k < numel[i]; k++) {
                size_t cols = (size_t)sh[i][1], r = k / cols, c = k % cols;
                g[i][k] = i % 2 ? (float)((check_rank + 1) * (int)(k % 3))
                                : (float)(check_rank + 1) * (float)(r % 5 + 1) *
                                      (float)((c % 4) + 1) * 0.125f;
            }
            CHECK_OK(ddph_grad_ready(m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        float mean_scale = 0;
        for (int r = 0; r < world; r++)
            mean_scale += (float)(r + 1);
        mean_scale /= (float)world;
        for (int i = 0; i < 4; i++)
            for (size_t k = 0; k < numel[i]; k++) {
                size_t cols = (size_t)sh[i][1], r = k / cols, c = k % cols;
                float want = i % 2 ? mean_scale * (float)(int)(k % 3)
                                   : mean_scale * (float)(r % 5 + 1) *
                                         (float)((c % 4) + 1) * 0.125f;
                CHECK(fabsf(g[i][k] - want) <= 1e-5f * (1 + fabsf(want)),
                      "step %d q%d[%zu] = %.9g, want %.9g", s, i, k, g[i][k],
                      want);
            }
        uint64_t wire = 0;
        size_t bytes = 0;
        for (int b = 0; b < nb; b++) {
            ddph_bucket_info info;
            CHECK_OK(ddph_model_bucket_info(m, b, &info), ctx);
            wire += info.bytes_on_wire;
            bytes += info.bytes;
        }
        /* Uncompressed biases (64 + 16) plus P (64 + 32) and Q (32 + 16)
         * of rank 1, in f32; plain allreduce before start_powerSGD_iter. */
        uint64_t want = s < 2 ? bytes : 4 * (80 + 96 + 48);
        CHECK(wire - wire_before == want, "step %d: %llu bytes sent, want %llu",
              s, (unsigned long long)(wire - wire_before),
              (unsigned long long)want);
        wire_before = wire;
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    ddph_stat st[8];
    size_t n;
    CHECK_OK(ddph_model_hook_stats(m, st, 8, &n), ctx);
    CHECK(n == 4 && strcmp(st[0].name, "compression_rate") == 0, "stats");
    CHECK(st[1].value == 3 * 2640.0 && st[2].value == 3 * 224.0,
          "elements before %g after %g", st[1].value, st[2].value);
    CHECK(fabs(st[0].value - 2640.0 / 224.0) < 1e-9, "rate %g", st[0].value);
    ddph_close(ctx);
    for (int i = 0; i < 4; i++)
        free(g[i]);
}


/* The hooks of ABI minor 2 (plugins/topk, plugins/int8) on the fixture's
 * several buckets: exact where the hook is lossless, error feedback that
 * loses nothing over two steps, and bytes counted both ways. */
typedef float (*grad_fn)(int rank, int step, int p, size_t i);

/* Runs `steps` steps of grads from fn; out[s][p] gets the results. */
/* The buckets' element counts of the last sparse_run. */
static size_t sparse_numel[64];
static int sparse_nbuckets;

static void sparse_run(const char *hook, const char *options, grad_fn fn,
                       int steps, float *out[][NP], model_fixture *fx,
                       uint64_t *sent, uint64_t *received)
{
    char extra[256];
    snprintf(extra, sizeof extra, "[hook.%s]\n%s\n[runtime]", hook, options);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), hook, extra);
    setup(ctx, fx, 0);
    CHECK_OK(ddph_model_finalize(fx->m), ctx);
    CHECK(ddph_model_bucket_count(fx->m) >= 3, "want several buckets");
    for (int st = 0; st < steps; st++) {
        CHECK_OK(ddph_step_begin(ctx, &fx->m, 1), ctx);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx->numel[i]; k++)
                fx->grads[i][k] = fn(check_rank, st, i, k);
            CHECK_OK(ddph_grad_ready(fx->m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int i = 0; i < NP; i++)
            memcpy(out[st][i], fx->grads[i], fx->numel[i] * sizeof(float));
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    *sent = *received = 0;
    sparse_nbuckets = ddph_model_bucket_count(fx->m);
    CHECK(sparse_nbuckets <= 64, "%d buckets", sparse_nbuckets);
    for (int b = 0; b < sparse_nbuckets; b++) {
        uint64_t sb, rb;
        ddph_bucket_info info;
        CHECK_OK(ddph_model_bucket_info(fx->m, b, &info), ctx);
        sparse_numel[b] = info.numel;
        CHECK_OK(ddph_model_bucket_traffic(fx->m, b, &sb, &rb), ctx);
        *sent += sb;
        *received += rb;
    }
    ddph_close(ctx);
}

static float topk_grad(int rank, int step, int p, size_t i)
{
    /* Distinct magnitudes per rank; step 1 sends nothing new. */
    return step ? 0.0f
                : (float)((int)((i * 7 + (size_t)p * 3) % 41) - 20) *
                      (float)(rank + 1) * 0.25f;
}

/* Values in {-127, 0, 127} whose average over an even number of ranks is
 * too: int8 with scale 1 is exact. */
static float int8_grad(int rank, int step, int p, size_t i)
{
    int sign = (int)((i + (size_t)p + (size_t)step) % 3) - 1;
    if ((i + (size_t)step) % 5 == 0 && rank % 2)
        sign = -sign; /* these average to 0 */
    return 127.0f * (float)sign;
}

static void alloc_steps(float *out[][NP], int steps)
{
    for (int st = 0; st < steps; st++)
        for (int i = 0; i < NP; i++)
            out[st][i] = malloc((size_t)(shapes[i][0] * shapes[i][1]) *
                                sizeof(float));
}

static void free_steps(float *out[][NP], int steps)
{
    for (int st = 0; st < steps; st++)
        for (int i = 0; i < NP; i++)
            free(out[st][i]);
}

/* powersgd-blocks: the CPU passes over a matrix go by blocks of rows of
 * about 256 KiB (plugins/powersgd/powersgd.c); a 500 x 321 matrix is
 * three blocks, the last one short, and batched PowerSGD's 401 x 401
 * square ends in a partly padded row.  Whatever orthonormal P (n x r) the
 * hook finds, its result P P^T avg(M) is the projection U U^T avg(M) of
 * the averaged M = input + error onto the space U its own columns span,
 * and the new error of each rank is M - result: the test keeps every
 * rank's error itself and checks each step's result against that, with
 * and without error feedback, at ranks 1 and 4 (the CPU's fused sweep,
 * plugins/powersgd/psgd_cpu.h) and 5 and 20 (OpenBLAS above
 * PSGD_CPU_MAX_RANK). */
#define PB_N 500
#define PB_M 321
#define PB_BIAS 7

/* Deterministic values in [-1, 1) per rank, step and element. */
static double pb_noise(int rank, int step, size_t k)
{
    uint64_t x = (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)(rank * 7919 + step * 104729 + 1) *
                     0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (double)(x >> 11) / 9007199254740992.0 * 2 - 1;
}

/* An orthonormal basis u (rows x rank, column-major) of the space the
 * columns of the row-major result w (rows x cols, cols_seen of them in
 * every row) span, by Gram-Schmidt in doubles; a column mostly inside the
 * basis so far is skipped.  Returns the basis's size. */
static size_t pb_basis(const float *w, size_t rows, size_t cols,
                       size_t cols_seen, size_t rank, double *u)
{
    size_t got = 0;
    for (size_t j = 0; j < cols_seen && got < rank; j++) {
        double *v = u + got * rows, norm0 = 0, norm = 0;
        for (size_t i = 0; i < rows; i++) {
            v[i] = w[i * cols + j];
            norm0 += v[i] * v[i];
        }
        for (int pass = 0; pass < 2; pass++) /* twice is enough */
            for (size_t b = 0; b < got; b++) {
                double dot = 0;
                for (size_t i = 0; i < rows; i++)
                    dot += u[b * rows + i] * v[i];
                for (size_t i = 0; i < rows; i++)
                    v[i] -= dot * u[b * rows + i];
            }
        for (size_t i = 0; i < rows; i++)
            norm += v[i] * v[i];
        if (norm <= 1e-6 * norm0 || norm == 0)
            continue;
        for (size_t i = 0; i < rows; i++)
            v[i] /= sqrt(norm);
        got++;
    }
    return got;
}

static void powersgd_blocks(const char *hook, int ef, size_t rank)
{
    int batched = strcmp(hook, "batched_powersgd") == 0;
    size_t nw = (size_t)PB_N * PB_M, nb = batched ? 0 : PB_BIAS;
    size_t side = 1;
    while (side * side < nw)
        side++;
    size_t rows = batched ? side : PB_N, cols = batched ? side : PB_M;
    size_t full = rows * cols; /* the matrix, padding included */
    char extra[256];
    snprintf(extra, sizeof extra,
             "bucket_cap_mb = 16\nfirst_bucket_cap_mb = 16\n[hook.%s]\n"
             "matrix_approximation_rank = %zu\nstart_powerSGD_iter = 2\n"
             "use_error_feedback = %s\nwarm_start = %s\n[runtime]",
             hook, rank, ef ? "true" : "false", ef ? "true" : "false");
    const char *path = job(env("DDPH_TEST_PLUGIN_DIR"), hook, extra);
    ddph_ctx *ctx = open_path(path);
    int world = ddph_world_size(ctx);
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "net", &m), ctx);
    float *w = calloc(nw, sizeof *w), *bias = calloc(PB_BIAS, sizeof *bias);
    const int64_t wshape[2] = {PB_N, PB_M}, bshape[1] = {PB_BIAS};
    CHECK_OK(ddph_model_add_param(m, "w", w, wshape, 2, DDPH_F32, DDPH_CPU,
                                  NULL),
             ctx);
    if (nb)
        CHECK_OK(ddph_model_add_param(m, "b", bias, bshape, 1, DDPH_F32,
                                      DDPH_CPU, NULL),
                 ctx);
    CHECK_OK(ddph_model_finalize(m), ctx);
    CHECK(ddph_model_bucket_count(m) == 1, "%d buckets",
          ddph_model_bucket_count(m));
    /* Every rank's error (matrix, then bias), M and avg(M), in doubles. */
    double *err = calloc((size_t)world * (full + PB_BIAS), sizeof *err);
    double *mat = calloc((size_t)world * (full + PB_BIAS), sizeof *mat);
    double *avg = calloc(full + PB_BIAS, sizeof *avg);
    double *u = calloc(rows * rank, sizeof *u);
    double *proj = calloc(cols * rank, sizeof *proj);
    CHECK(w && bias && err && mat && avg && u && proj, "out of memory");
    for (int s = 0; s < 6; s++) {
        CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
        for (size_t k = 0; k < nw; k++)
            w[k] = (float)pb_noise(check_rank, s, k);
        for (size_t k = 0; k < nb; k++)
            bias[k] = (float)pb_noise(check_rank, s, nw + k);
        for (int i = nb ? 1 : 0; i >= 0; i--)
            CHECK_OK(ddph_grad_ready(m, i), ctx);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        /* M of every rank: the input (zero-padded) plus its error. */
        int compressed = s >= 2;
        memset(avg, 0, (full + PB_BIAS) * sizeof *avg);
        for (int r = 0; r < world; r++) {
            double *mr = mat + (size_t)r * (full + PB_BIAS);
            double *er = err + (size_t)r * (full + PB_BIAS);
            for (size_t k = 0; k < full + PB_BIAS; k++) {
                double in = k < nw ? pb_noise(r, s, k)
                            : k >= full && k - full < nb
                                ? pb_noise(r, s, nw + (k - full))
                                : 0.0;
                mr[k] = in + (compressed && ef ? er[k] : 0.0);
                avg[k] += mr[k] / world;
            }
        }
        double scale = 0;
        for (size_t k = 0; k < full; k++)
            scale = fmax(scale, fabs(avg[k]));
        if (!compressed) {
            for (size_t k = 0; k < nw; k++)
                CHECK(fabs(w[k] - avg[k]) <= 1e-6, "step %d w[%zu] = %.9g, "
                      "want the average %.9g", s, k, w[k], avg[k]);
            CHECK_OK(ddph_step_end(ctx), ctx);
            continue;
        }
        /* U from the result's columns that every row shows (the last row
         * of the square has 100 bucket elements). */
        size_t seen = batched ? nw - (rows - 1) * cols : cols;
        size_t got = pb_basis(w, rows, cols, seen, rank, u);
        CHECK(got == rank, "step %d: the result spans %zu dimensions, want "
              "the rank %zu", s, got, rank);
        for (size_t b = 0; b < rank; b++) /* proj = U^T avg(M) */
            for (size_t j = 0; j < cols; j++) {
                double dot = 0;
                for (size_t i = 0; i < rows; i++)
                    dot += u[b * rows + i] * avg[i * cols + j];
                proj[b * cols + j] = dot;
            }
        size_t bad = 0;
        double worst = 0;
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j++) {
                size_t k = i * cols + j;
                double want = 0;
                for (size_t b = 0; b < rank; b++)
                    want += u[b * rows + i] * proj[b * cols + j];
                if (k < nw) {
                    double d = fabs(w[k] - want);
                    worst = fmax(worst, d);
                    bad += d > 1e-4 * scale;
                }
                for (int r = 0; r < world; r++) /* the new error */
                    err[(size_t)r * (full + PB_BIAS) + k] =
                        mat[(size_t)r * (full + PB_BIAS) + k] - want;
            }
        CHECK(bad == 0, "%s rank %zu, error feedback %s, %d ranks, step "
              "%d: %zu of %zu elements differ from the projection U U^T "
              "avg(M) by more than %.3g (worst %.3g)", hook, rank,
              ef ? "on" : "off", world, s, bad, nw, 1e-4 * scale, worst);
        for (size_t k = 0; k < nb; k++) { /* uncompressed: the average */
            CHECK(fabs(bias[k] - avg[full + k]) <= 1e-6, "step %d bias[%zu] "
                  "= %.9g, want %.9g", s, k, bias[k], avg[full + k]);
            for (int r = 0; r < world; r++)
                err[(size_t)r * (full + PB_BIAS) + full + k] =
                    mat[(size_t)r * (full + PB_BIAS) + full + k] -
                    avg[full + k];
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    ddph_close(ctx);
    free(w);
    free(bias);
    free(err);
    free(mat);
    free(avg);
    free(u);
    free(proj);
}

static void run_powersgd_blocks(void)
{
    for (size_t i = 0; i < 4; i++) {
        static const size_t ranks[4] = {1, 4, 5, 20};
        powersgd_blocks("powersgd", 1, ranks[i]);
        powersgd_blocks("powersgd", 0, ranks[i]);
        powersgd_blocks("batched_powersgd", 1, ranks[i]);
        powersgd_blocks("batched_powersgd", 0, ranks[i]);
    }
}

static void run_sparse(void)
{
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    size_t total = 0;
    for (int i = 0; i < NP; i++)
        total += (size_t)(shapes[i][0] * shapes[i][1]);
    float *out[3][NP];
    model_fixture fx;
    uint64_t sent, received;
    alloc_steps(out, 3);

    /* topk, ratio 1: every element sent; the plain average, summed in
     * rank order.  8 bytes per element out, (W-1) times that in. */
    sparse_run("topk", "ratio = 1", topk_grad, 1, out, &fx, &sent, &received);
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < fx.numel[i]; k++) {
            float want = 0;
            for (int r = 0; r < world; r++)
                want += topk_grad(r, 0, i, k);
            want /= (float)world;
            CHECK(out[0][i][k] == want, "topk ratio 1: p%d[%zu] = %g, want %g",
                  i, k, out[0][i][k], want);
        }
    CHECK(sent == 8 * total && received == 8 * total * (uint64_t)(world - 1),
          "topk ratio 1: %llu bytes sent, %llu received; want %zu, %zu",
          (unsigned long long)sent, (unsigned long long)received, 8 * total,
          8 * total * (size_t)(world - 1));
    fixture_free(&fx);

    /* topk, ratio 0.5, error feedback: step 0 sends the larger half of
     * each bucket, step 1 (zero gradients) the rest; together, the
     * average. */
    sparse_run("topk", "ratio = 0.5", topk_grad, 2, out, &fx, &sent, &received);
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < fx.numel[i]; k++) {
            float want = 0;
            for (int r = 0; r < world; r++)
                want += topk_grad(r, 0, i, k);
            want /= (float)world;
            float got = out[0][i][k] + out[1][i][k];
            CHECK(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)),
                  "topk error feedback: p%d[%zu] = %g + %g, want %g", i, k,
                  out[0][i][k], out[1][i][k], want);
        }
    fixture_free(&fx);

    /* int8 on values the scale makes exact, over 3 steps (the error stays
     * 0); bytes: per bucket of n elements and chunks of c = ceil(n / W),
     * an all-to-all of (W-1) c int8 each way, the max (4 bytes each way),
     * an allgather of c int8 plus a 4-byte scale ((W-1) times that in). */
    sparse_run("int8", "", int8_grad, 3, out, &fx, &sent, &received);
    for (int st = 0; st < 3; st++)
        for (int i = 0; i < NP; i++)
            for (size_t k = 0; k < fx.numel[i]; k++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += int8_grad(r, st, i, k);
                want /= (float)world;
                CHECK(out[st][i][k] == want, "int8 step %d: p%d[%zu] = %g, "
                      "want %g", st, i, k, out[st][i][k], want);
            }
    uint64_t want_sent = 0, want_received = 0, w = (uint64_t)world;
    for (int b = 0; b < sparse_nbuckets; b++) {
        uint64_t c = (sparse_numel[b] + w - 1) / w;
        want_sent += 3 * ((w - 1) * c + 4 + c + 4);
        want_received += 3 * ((w - 1) * c + 4 + (w - 1) * (c + 4));
    }
    CHECK(sent == want_sent && received == want_received,
          "int8: %llu bytes sent, %llu received; want %llu, %llu",
          (unsigned long long)sent, (unsigned long long)received,
          (unsigned long long)want_sent, (unsigned long long)want_received);
    fixture_free(&fx);
    free_steps(out, 3);
}

/* Whether p (n floats) is bitwise the same on the ranks of `ranks`. */
static int same_on(const float *p, size_t n, int world, const int *ranks,
                   int nranks)
{
    float *all = malloc((size_t)world * n * sizeof *all);
    MPI_Allgather(p, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
    int same = 1;
    for (int i = 1; i < nranks; i++)
        same &= memcmp(all + (size_t)ranks[0] * n, all + (size_t)ranks[i] * n,
                       n * sizeof *all) == 0;
    free(all);
    return same;
}

/* One local-SGD run: `steps` steps of SGD on a 2-parameter model; expect(t)
 * says at step t whether parameters must agree on all ranks (2), only
 * within subgroups of 2 (1), or nowhere (0). */
static void local_sgd_run(const char *options, int steps, int (*expect)(int))
{
    char extra[512];
    snprintf(extra, sizeof extra, "[hook.post_localsgd]\n%s\n[runtime]",
             options);
    ddph_ctx *ctx = open_job("/nowhere", env("DDPH_TEST_LOCALSGD"), extra);
    int world = ddph_world_size(ctx);
    CHECK(world == 4, "local-sgd runs on 4 ranks, not %d", world);
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "net", &m), ctx);
    enum { N0 = 300, N1 = 20 };
    static float p0[N0], p1[N1], g0[N0], g1[N1];
    int64_t s0[1] = {N0}, s1[1] = {N1};
    for (int k = 0; k < N0; k++)
        p0[k] = 1.0f;
    for (int k = 0; k < N1; k++)
        p1[k] = -1.0f;
    CHECK_OK(ddph_model_add_param(m, "w", g0, s0, 1, DDPH_F32, DDPH_CPU, NULL),
             ctx);
    CHECK_OK(ddph_model_add_param(m, "b", g1, s1, 1, DDPH_F32, DDPH_CPU, NULL),
             ctx);
    CHECK_OK(ddph_model_set_param_data(m, 0, p0), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 1, p1), ctx);
    CHECK_OK(ddph_model_finalize(m), ctx);
    int all[4] = {0, 1, 2, 3}, pair[2] = {check_rank & ~1, check_rank | 1};
    int other[2] = {0, 2};
    for (int t = 0; t < steps; t++) {
        CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
        for (int k = 0; k < N1; k++)
            g1[k] = (float)((check_rank + 1) * (k % 3 + 1) * (t + 1));
        CHECK_OK(ddph_grad_ready(m, 1), ctx);
        for (int k = 0; k < N0; k++)
            g0[k] = (float)((check_rank * 7 + k) % 11) * 0.5f - (float)t;
        CHECK_OK(ddph_grad_ready(m, 0), ctx);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int k = 0; k < N0; k++) /* the optimizer: plain SGD */
            p0[k] -= 0.125f * g0[k];
        for (int k = 0; k < N1; k++)
            p1[k] -= 0.125f * g1[k];
        CHECK_OK(ddph_step_end(ctx), ctx);
        int want = expect(t);
        int on_all = same_on(p0, N0, world, all, 4) &&
                     same_on(p1, N1, world, all, 4);
        int in_pair = same_on(p0, N0, world, pair, 2);
        int pairs_differ = !same_on(p0, N0, world, other, 2);
        CHECK(want != 2 || on_all, "step %d: parameters differ across ranks "
                                   "on an averaging step", t);
        CHECK(want != 1 || (in_pair && pairs_differ),
              "step %d: want identical within subgroups (%d) and different "
              "across them (%d)",
              t, in_pair, pairs_differ);
        CHECK(want != 0 || !in_pair, "step %d: subgroup agrees without "
                                     "averaging", t);
    }
    ddph_close(ctx);
}

/* start 3, subgroups of 2, period 4 after 3 warm-up steps: global before
 * step 3, averaged at steps 3, 7, 11, subgroup-local otherwise. */
static int periodic_schedule(int t)
{
    return t < 3 || (t - 3) % 4 == 0 ? 2 : 1;
}

/* No gradient communication at all; hierarchical 2:2,4:4: every 4 steps
 * over all ranks, every other step within pairs, else nowhere. */
static int hierarchical_schedule(int t)
{
    return t % 4 == 0 ? 2 : t % 2 == 0 ? 1 : 0;
}

/* Parameters of mixed dtypes averaged at every step (period 1): the
 * concatenation is promoted as torch.cat does (here to f64), averaged and
 * rounded back to each parameter's dtype.  Rank r's f32 and bf16 values
 * are r +- k/4, whose averages are exact in every dtype; the f64 ones,
 * 1 + k + r * 1e-9, average to 1 + k + 1.5e-9, which f32 cannot hold. */
static void local_sgd_dtypes(void)
{
    ddph_ctx *ctx = open_job("/nowhere", env("DDPH_TEST_LOCALSGD"),
                             "[hook.post_localsgd]\nstart_localSGD_iter = 0\n"
                             "post_local_gradient_allreduce = false\n"
                             "period = 1\n[runtime]");
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "mixed", &m), ctx);
    enum { N = 40 };
    static float w[N], gw[N];
    static uint16_t h[N], gh[N];
    static double d[N], gd[N];
    int64_t shape[1] = {N};
    CHECK_OK(ddph_model_add_param(m, "w", gw, shape, 1, DDPH_F32, DDPH_CPU,
                                  NULL), ctx);
    CHECK_OK(ddph_model_add_param(m, "h", gh, shape, 1, DDPH_BF16, DDPH_CPU,
                                  NULL), ctx);
    CHECK_OK(ddph_model_add_param(m, "d", gd, shape, 1, DDPH_F64, DDPH_CPU,
                                  NULL), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 0, w), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 1, h), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 2, d), ctx);
    CHECK_OK(ddph_model_finalize(m), ctx);
    for (int k = 0; k < N; k++) {
        w[k] = (float)check_rank + 0.25f * (float)k;
        h[k] = bf16_from_float((float)check_rank - 0.25f * (float)k);
        d[k] = 1.0 + k + check_rank * 1e-9;
    }
    CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
    for (int i = 2; i >= 0; i--)
        CHECK_OK(ddph_grad_ready(m, i), ctx);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    for (int k = 0; k < N; k++) {
        CHECK(w[k] == 1.5f + 0.25f * (float)k, "w[%d] = %g", k, w[k]);
        CHECK(bf16_to_float(h[k]) == 1.5f - 0.25f * (float)k, "h[%d] = %g", k,
              bf16_to_float(h[k]));
        CHECK(fabs(d[k] - (1.0 + k + 1.5e-9)) < 1e-12, "d[%d] = %.12g", k,
              d[k]);
    }
    ddph_close(ctx);
}

/* On tests/cluster/cluster.sh's 2 hosts x 2 ranks: the default
 * subgroups are the hosts (group_intra_node), so ranks 0-1 and 2-3 agree
 * between global averages and the two hosts do not. */
static void run_local_sgd_intra_node(void)
{
    local_sgd_run("start_localSGD_iter = 3\nperiod = 4\nwarmup_steps = 3", 12,
                  periodic_schedule);
    local_sgd_run("start_localSGD_iter = 0\npost_local_gradient_allreduce = "
                  "false\nperiod_group_size = 2:2,4:4",
                  9, hierarchical_schedule);
}

static void run_local_sgd(void)
{
    local_sgd_run("start_localSGD_iter = 3\nsubgroup_size = 2\nperiod = 4\n"
                  "warmup_steps = 3",
                  12, periodic_schedule);
    local_sgd_run("start_localSGD_iter = 0\npost_local_gradient_allreduce = "
                  "false\nsubgroup_size = 2\nperiod_group_size = 2:2,4:4",
                  9, hierarchical_schedule);
    local_sgd_dtypes();
}


/* Runs `micro` backward passes of the fixture's model with the given flags
 * per pass, accumulating like .grad; checks every synchronised result. */
static void accumulate_run(const char *extra, int micro, const unsigned *flags,
                           const int *want_sync)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m), synced = 0, window_start = 0;
    for (int s = 0; s < micro; s++) {
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1, flags ? flags[s] : 0),
                 ctx);
        CHECK(ddph_step_syncs(ctx) == want_sync[s], "%s: step %d syncs %d, "
                                                    "want %d",
              extra, s, ddph_step_syncs(ctx), want_sync[s]);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx.numel[i]; k++)
                fx.grads[i][k] += value(check_rank, s, i, k);
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        if (want_sync[s]) {
            synced++;
            for (int i = 0; i < NP; i++)
                for (size_t k = 0; k < fx.numel[i]; k++) {
                    float want = 0;
                    for (int r = 0; r < world; r++) {
                        float sum = 0;
                        for (int t = window_start; t <= s; t++)
                            sum += value(r, t, i, k);
                        want += sum / (float)world;
                    }
                    CHECK(fx.grads[i][k] == want,
                          "%s: step %d p%d[%zu] = %g, want %g", extra, s, i,
                          k, fx.grads[i][k], want);
                    fx.grads[i][k] = 0; /* optimizer.zero_grad() */
                }
            window_start = s + 1;
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
        for (int b = 0; b < nb; b++) {
            ddph_bucket_info info;
            CHECK_OK(ddph_model_bucket_info(fx.m, b, &info), ctx);
            CHECK(info.hook_calls == (uint64_t)synced, "%s: bucket %d: %llu "
                                                       "hook calls after %d "
                                                       "synced steps",
                  extra, b, (unsigned long long)info.hook_calls, synced);
            CHECK(info.bytes_on_wire == (uint64_t)synced * info.bytes,
                  "%s: bytes sent on steps that did not sync", extra);
        }
    }
    ddph_close(ctx);
    fixture_free(&fx);
}

static void run_accumulate(void)
{
    static const int every[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    static const int two[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    static const int four[8] = {0, 0, 0, 1, 0, 0, 0, 1};
    accumulate_run("[accumulate]\nsteps = 1\n[runtime]", 8, NULL, every);
    accumulate_run("[accumulate]\nsteps = 2\n[runtime]", 8, NULL, two);
    accumulate_run("[accumulate]\nsteps = 4\n[runtime]", 8, NULL, four);
    accumulate_run("[accumulate]\nsteps = 4\nsync_each_batch = true\n"
                   "[runtime]",
                   8, NULL, every);
    /* Flags: no_sync holds off the 4th step; a forced sync in the middle
     * (trigger_sync_in_backward); the end of data syncs a partial window. */
    static const unsigned flags[7] = {0, 0, 0, DDPH_STEP_NO_SYNC, 0,
                                      DDPH_STEP_FORCE_SYNC, DDPH_STEP_END_OF_DATA};
    static const int flagged[7] = {0, 0, 0, 0, 1, 1, 1};
    accumulate_run("[accumulate]\nsteps = 4\n[runtime]", 7, flags, flagged);
}

/* gen: PowerSGD (start 2) with accumulate_steps = 2 of its own; disc:
 * fp16 with the job's steps = 4.  Together in one step they share one
 * decision; alone, each follows its own window. */
static void run_two_models(void)
{
    ddph_ctx *ctx = open_job(
        env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
        "[accumulate]\nsteps = 4\n[model.gen]\nhook = powersgd\n"
        "accumulate_steps = 2\n[model.disc]\nhook = fp16\n"
        "[hook.powersgd]\nstart_powerSGD_iter = 2\n[runtime]");
    model_fixture gen, disc;
    fx_named(ctx, &gen, "gen");
    fx_named(ctx, &disc, "disc");
    /* What the job chose, before finalize: a trainer scales its loss. */
    CHECK(ddph_model_accumulate_steps(gen.m) == 2 &&
              ddph_model_accumulate_steps(disc.m) == 4 &&
              ddph_model_accumulate_steps(NULL) == -1,
          "accumulate_steps %d %d", ddph_model_accumulate_steps(gen.m),
          ddph_model_accumulate_steps(disc.m));
    CHECK(strcmp(ddph_model_hook_name(gen.m), "powersgd") == 0, "gen's hook");
    CHECK_OK(ddph_model_finalize(gen.m), ctx);
    CHECK_OK(ddph_model_finalize(disc.m), ctx);
    CHECK(strcmp(ddph_model_hook_name(disc.m), "fp16") == 0, "disc's hook");
    /* ddph_describe: the resolved job, then each model's hook. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK_OK(ddph_describe(ctx, mem), ctx);
    fclose(mem);
    static const char *const needles[] = {
        "[accumulate]\nsteps = 4 ", "\n[model.gen]\nhook = powersgd\n",
        "; model 'gen': 6 parameters, accumulate_steps 2, 3 buckets",
        "hook powersgd 1.0.0 wrapper none\n",
        "hook option start_powerSGD_iter = 2",
        "; model 'disc': 6 parameters, accumulate_steps 4, 3 buckets",
        "hook fp16 1.0.0 wrapper none\n"};
    for (size_t i = 0; i < sizeof needles / sizeof *needles; i++)
        CHECK(strstr(text, needles[i]), "describe lacks '%s' in:\n%s",
              needles[i], text);
    free(text);
    ddph_model *both[2] = {gen.m, disc.m};
    /* Together: gen's window of 2 decides for both. */
    for (int s = 0; s < 4; s++) {
        CHECK_OK(ddph_step_begin(ctx, both, 2), ctx);
        CHECK(ddph_step_syncs(ctx) == (s % 2 == 1), "together, step %d", s);
        for (int i = NP - 1; i >= 0; i--) {
            CHECK_OK(ddph_grad_ready(disc.m, i), ctx);
            CHECK_OK(ddph_grad_ready(gen.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    /* Alone: disc waits for its own 4. */
    for (int s = 0; s < 4; s++) {
        CHECK_OK(ddph_step_begin(ctx, &disc.m, 1), ctx);
        CHECK(ddph_step_syncs(ctx) == (s == 3), "disc alone, step %d", s);
        for (int i = NP - 1; i >= 0; i--)
            CHECK_OK(ddph_grad_ready(disc.m, i), ctx);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    /* A model of the job not given to step_begin is not in the step. */
    CHECK_OK(ddph_step_begin(ctx, &disc.m, 1), ctx);
    CHECK(ddph_grad_ready(gen.m, 0) == DDPH_ERR_STATE, "gen outside its step");
    CHECK(strstr(ddph_last_error(ctx), "grad_ready on model 'gen' outside its "
                                       "step"),
          "%s", ddph_last_error(ctx));
    for (int i = NP - 1; i >= 0; i--)
        CHECK_OK(ddph_grad_ready(disc.m, i), ctx);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* gen's hook counted its 2 synchronised steps only. */
    ddph_stat st[4];
    size_t n;
    CHECK_OK(ddph_model_hook_stats(gen.m, st, 4, &n), ctx);
    CHECK(n == 4 && st[3].value == 2.0, "gen's PowerSGD iteration %g, want 2",
          st[3].value);
    ddph_bucket_info info;
    CHECK_OK(ddph_model_bucket_info(disc.m, 0, &info), ctx);
    CHECK(info.hook_calls == 3, "disc: %llu hook calls, want 2 together + 1 "
                                "alone",
          (unsigned long long)info.hook_calls);
    ddph_close(ctx);
    fixture_free(&gen);
    fixture_free(&disc);
}


static void run_trace(void)
{
    char path[256], extra[300];
    snprintf(path, sizeof path, "/tmp/ddph-trace-%d.json", (int)getppid());
    /* Two lanes: bucket 1 runs on lane 1, its own track. */
    snprintf(extra, sizeof extra, "trace = %s\nlanes = 2", path);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    for (int s = 0; s < 2; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        mark_all_ready(ctx, fx.m);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    ddph_close(ctx);
    if (check_rank == 0) {
        FILE *f = fopen(path, "r");
        CHECK(f != NULL, "%s was not written", path);
        static char text[1 << 20];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        char want[128];
        snprintf(want, sizeof want, "\"name\":\"rank %d\"", world - 1);
        const char *needles[] = {"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[",
                                 "\"name\":\"hook allreduce: net bucket 0\"",
                                 "\"name\":\"net bucket 2 ready\"",
                                 "\"name\":\"allreduce ", "step_wait",
                                 "\"name\":\"communication\"",
                                 "\"name\":\"communication lane 1\"",
                                 "\"tid\":2,", want, "\n]}\n"};
        for (size_t i = 0; i < sizeof needles / sizeof *needles; i++)
            CHECK(strstr(text, needles[i]), "trace lacks %s", needles[i]);
        unlink(path);
    }
    fixture_free(&fx);
}


static void nonfinite_run(int check)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", check ? "check_finite = true" : NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    for (int i = NP - 1; i >= 0; i--) {
        for (size_t k = 0; k < fx.numel[i]; k++)
            fx.grads[i][k] = 1.0f;
        if (check_rank == 0 && i == 2)
            fx.grads[i][7] = 0.0f / 0.0f;
        CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    }
    ddph_status st = ddph_step_wait(ctx);
    if (check) {
        /* Every rank hears of rank 0's NaN, with its message. */
        CHECK(st == DDPH_ERR_NONFINITE, "%s", ddph_status_name(st));
        CHECK(strstr(ddph_last_error(ctx), "model 'net' bucket 1 (rank 0): "
                                           "gradient of 'p2' is not finite at "
                                           "element 7"),
              "%s", ddph_last_error(ctx));
        CHECK(check_rank == 0 ||
                  strncmp(ddph_last_error(ctx), "rank 0 failed: ", 15) == 0,
              "%s", ddph_last_error(ctx));
    } else {
        CHECK(st == DDPH_OK, "%s", ddph_last_error(ctx));
        /* Propagated faithfully: NaN exactly where it was, on every rank. */
        CHECK(isnan(fx.grads[2][7]) && fx.grads[2][6] == 1.0f,
              "p2[7] = %g, p2[6] = %g", fx.grads[2][7], fx.grads[2][6]);
    }
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* A NaN does not break the job: it closes cleanly. */
    CHECK_OK(ddph_close(ctx), NULL);
    fixture_free(&fx);
}

static void run_nonfinite(void)
{
    nonfinite_run(0);
    nonfinite_run(1);
}

static void finalize_stuck(int sig)
{
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_runtime SCENARIO (see the source)\n");
        return 2;
    }
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &check_rank);
    const char *s = argv[1];
    if (strcmp(s, "average") == 0)
        run_average(0, 1);
    else if (strcmp(s, "view") == 0)
        run_average(1, 1);
    else if (strcmp(s, "lanes") == 0)
        run_lanes();
    else if (strcmp(s, "overlap") == 0)
        run_overlap();
    else if (strcmp(s, "mismatch") == 0)
        run_mismatch();
    else if (strcmp(s, "hook-error") == 0)
        run_hook_error();
    else if (strcmp(s, "leaked-request") == 0)
        run_leaked_request();
    else if (strcmp(s, "timeout") == 0)
        run_timeout(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                    "timeout_s = 1.5", 0,
                    "DDPH_ERR_TIMEOUT: allreduce did not complete within "
                    "timeout_s = 1.5 s",
                    s);
    else if (strcmp(s, "timeout-polled") == 0)
        run_timeout_polled();
    else if (strcmp(s, "shared-buckets") == 0)
        run_shared_buckets(1, 100000);
    else if (strcmp(s, "shifted-buffers") == 0)
        run_shifted_buffers();
    else if (strcmp(s, "private-buckets") == 0)
        run_shared_buckets(0, 8000000);
    else if (strcmp(s, "timeout-shared") == 0)
        /* Bucket 0 (p5..p2, 267 KB) is summed in shared memory, p1 and p0
         * go through MPI. */
        run_timeout(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                    "timeout_s = 1.5\nfirst_bucket_cap_mb = 0.2\n"
                    "bucket_cap_mb = 0.0001",
                    2000,
                    "DDPH_ERR_TIMEOUT: allreduce did not complete within "
                    "timeout_s = 1.5 s",
                    s);
    else if (strcmp(s, "misuse") == 0)
        run_misuse();
    else if (strcmp(s, "powersgd") == 0)
        run_powersgd();
    else if (strcmp(s, "powersgd-blocks") == 0)
        run_powersgd_blocks();
    else if (strcmp(s, "sparse") == 0)
        run_sparse();
    else if (strcmp(s, "accumulate") == 0)
        run_accumulate();
    else if (strcmp(s, "two-models") == 0)
        run_two_models();
    else if (strcmp(s, "trace") == 0)
        run_trace();
    else if (strcmp(s, "nonfinite") == 0)
        run_nonfinite();
    else if (strcmp(s, "local-sgd") == 0)
        run_local_sgd();
    else if (strcmp(s, "local-sgd-intra-node") == 0)
        run_local_sgd_intra_node();
    else if (strcmp(s, "fp16-overflow") == 0)
        run_fp16_overflow();
    else if (strcmp(s, "half-buckets") == 0)
        run_half_buckets();
    else if (strcmp(s, "half-ring") == 0)
        run_half_ring();
    else if (strcmp(s, "sums") == 0)
        run_sums();
    else {
        fprintf(stderr, "unknown scenario '%s'\n", s);
        return 2;
    }
    char path[256];
    snprintf(path, sizeof path, "/tmp/ddph-test-%d-%d.ini", (int)getppid(),
             check_rank);
    unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
    if (check_rank == 0)
        printf("ok %s\n", s);
    fflush(stdout);
    /* Every rank has passed its checks: MPICH 4.0's finalize may deadlock
     * between simulated hosts (runtime/comm/backend_mpi.h), which is not what
     * this program tests. */
    signal(SIGALRM, finalize_stuck);
    alarm(20);
    MPI_Finalize();
    return 0;
}
