/* bench.c: `ddphook bench`: speed measured against a baseline in the same
 * run, printed as a ratio (docs/performance.md).
 *
 *   ddphook bench casts [--mib N] [--repeats R]
 *     For a buffer of N MiB of f32 (and the matching half buffer) each cast
 *     is timed on every SIMD path this CPU has and compared with memcpy of
 *     the same N MiB: ratio = memcpy time / cast time (1.0 = as fast as
 *     copying the f32 bytes once).  Medians of R runs, buffers pre-faulted.
 *
 *   ddphook bench ops [--mib N] [--repeats R]
 *     Every CPU device operation of the services against memcpy of the same
 *     bytes, each timed in turn with its memcpy (bench_ops.c).
 *
 *   mpiexec -n W ddphook bench hooks [--model NAME | --mib N] [--hooks LIST]
 *   mpiexec -n W ddphook bench powersgd [...]
 *     Each hook reduces the model's gradients through the real runtime;
 *     the baseline, in the same run, is a loop of blocking MPI_Allreduce
 *     over the same buckets (the best the engine does on the same work),
 *     with one MPI_Allreduce of all the bytes as a second column.
 *     ratio = baseline time / hook time.
 *
 *   [mpiexec -n W] ddphook bench gpu [--mib N] [--hooks LIST] [--repeats R]
 *     The nccl backend: cast kernels against cudaMemcpy, hooks on GPU
 *     memory against a raw ncclAllReduce (bench_gpu.c). */
#include "build-config.h"

#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "backends/mpi/backend_mpi.h"
#include "cli/bench_common.h"
#include "bench_ops.h"
#include "cli/commands.h"
#include "core/cli_internal.h"
#include "support/config.h"
#include "device/cpu_ops.h"
#include "cli/presets.h"
#include "support/safe_file.h"
#include "cli/trace.h"
#include "device/cpu_simd.h"
#include "support/util.h"

static const char bench_usage[] =
    "usage: ddphook bench casts [--mib N] [--repeats R]\n"
    "       ddphook bench ops [--mib N] [--repeats R]\n"
    "       mpiexec -n W ddphook bench hooks [--model NAME | --trace DIR |\n"
    "           --shapes FILE | --mib N]\n"
    "           [--hooks LIST] [--repeats R] [--bucket-cap-mb X|auto]\n"
    "           [--rank R] [--view] [--lanes N] [--private-buckets] [--dtype T]\n"
    "           [--plugin-path DIRS] [--option NAME.KEY=VALUE]... [--csv FILE]\n"
    "           [--stats]\n"
    "       mpiexec -n W ddphook bench powersgd [same options]\n"
    "       ddphook bench shapes [--model NAME]\n"
    "       [mpiexec -n W] ddphook bench gpu [--mib N] [--hooks LIST]\n"
    "           [--repeats R] [--plugin-path DIRS] [--profile FILE]\n"
    "\n"
    "  casts      f32<->f16/bf16 casts on every SIMD path of this CPU, as a\n"
    "             ratio to memcpy of the same f32 bytes (default 64 MiB,\n"
    "             median of 7 runs)\n"
    "  ops        every CPU device operation a hook calls through its\n"
    "             services (copy, zero, axpy, casts, divide, top-k, gather,\n"
    "             scatter-add, absmax, int8, pack/unpack_signs,\n"
    "             chunk_abs_sum/max, GEMM, orthogonalize) on N MiB of f32\n"
    "             (default 64), each timed in turn with a memcpy of the\n"
    "             bytes it is compared with (its f32 input or output):\n"
    "             x memcpy = memcpy time / op time, median of R (default 7)\n"
    "  hooks      each hook of LIST (default allreduce,fp16,bf16,powersgd,\n"
    "             batched_powersgd,topk,int8) on the gradients of a model preset\n"
    "             (gpt2-124m, resnet50, resnet18-cifar, lstm-wikitext2, gpt-example,\n"
    "             mlp;\n"
    "             default resnet50),\n"
    "             of the parameters of a gradient trace, of a shapes file\n"
    "             (lines of NAME D0 [D1 ...], as `bench shapes` prints), or\n"
    "             of one 1024-row matrix of N MiB: bytes sent and received per step, time\n"
    "             per step (median of R, default 10), bus bandwidth, and the\n"
    "             ratio to the raw engine in the same run: a loop of\n"
    "             blocking MPI_Allreduce over the same buckets (and, second,\n"
    "             one MPI_Allreduce of all the bytes), summed as f32.\n"
    "             PowerSGD variants start compressing after 2\n"
    "             warm-up steps, with rank R (default 4).  --view uses\n"
    "             gradient_as_bucket_view (no copies in or out); --lanes N\n"
    "             sets [runtime] lanes (default 1); --private-buckets\n"
    "             sets [runtime] shared_buckets = false (on one host,\n"
    "             allreduce then goes through MPI too); --dtype T\n"
    "             registers gradients of dtype T (f32, f16, bf16, f64;\n"
    "             default f32, or the trace's); --csv FILE writes the table.\n"
    "             A hook named NAME/unchecked runs NAME with [runtime]\n"
    "             check_collectives = false: what the fingerprints cost.\n"
    "             --option NAME.KEY=VALUE (repeatable) sets a [hook.NAME]\n"
    "             option of the hooks named NAME (e.g. topk.ratio=0.05;\n"
    "             NAME is a .so's file name without .so); --plugin-path\n"
    "             DIRS are searched before the installed plugin folder.\n"
    "             --stats prints each hook's own statistics (rank 0's)\n"
    "             under its row.\n"
    "  powersgd   hooks with --model gpt2-124m and --hooks allreduce,\n"
    "             powersgd,batched_powersgd by default\n"
    "  shapes     the model preset's parameters, one a line in registration\n"
    "             order: NAME D0 [D1 ...] (what a peer benchmark, e.g.\n"
    "             tests/cluster/peers/pytorch_ddp.py, builds its model from)\n"
    "  gpu        the nccl backend, one GPU per rank (needs a CUDA device):\n"
    "             the CUDA cast kernels on N MiB (default 64) as a ratio to\n"
    "             a device-to-device cudaMemcpy of the same f32 bytes (both\n"
    "             timed with CUDA events); then each hook of LIST (default\n"
    "             allreduce,fp16) on one 1024-row f32 matrix of N MiB in\n"
    "             GPU memory: time per step, bytes on the wire, bus\n"
    "             bandwidth (nccl-tests' 2(W-1)/W factor; the algorithm\n"
    "             bandwidth with one rank) and the ratio to a raw\n"
    "             ncclAllReduce of the same f32 bytes in the same run\n"
    "             (median of R, default 20); --profile FILE also writes the\n"
    "             figures as `ddphook plan --device-profile FILE` reads them\n"
    "             (docs/plan.md)\n";

/* `bench gpu` is ddphook-bench-gpu, beside this program (built with the
 * nccl backend; it links CUDA, which ddphook does not). */
static int run_bench_gpu(size_t mib, int repeats, const char *hooks,
                         const char *plugin_path, const char *profile)
{
    char self[4096], prog[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "ddphook bench gpu: /proc/self/exe: %s\n",
                strerror(errno));
        return 1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(prog, sizeof prog, "%s/ddphook-bench-gpu", self);
    char mib_s[32], repeats_s[32];
    snprintf(mib_s, sizeof mib_s, "%zu", mib);
    snprintf(repeats_s, sizeof repeats_s, "%d", repeats);
    char *args[12] = {prog, "--mib", mib_s, "--repeats", repeats_s, "--hooks",
                      (char *)hooks};
    int k = 7;
    if (plugin_path) {
        args[k++] = "--plugin-path";
        args[k++] = (char *)plugin_path;
    }
    if (profile) {
        args[k++] = "--profile";
        args[k++] = (char *)profile;
    }
    args[k] = NULL;
    execv(prog, args);
    fprintf(stderr,
            "ddphook bench gpu: cannot run %s (%s): it is built and installed "
            "with the nccl backend (configure --with-cuda)\n",
            prog, strerror(errno));
    return 2;
}

static int bench_casts(size_t mib, int repeats)
{
    size_t n = mib * 1048576 / 4;
    float *f32 = NULL, *f32b = NULL;
    uint16_t *h16 = NULL;
    if (posix_memalign((void **)&f32, 64, n * 4) ||
        posix_memalign((void **)&f32b, 64, n * 4) ||
        posix_memalign((void **)&h16, 64, n * 2)) {
        fprintf(stderr, "ddphook bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        f32[i] = (float)((i * 2654435761u) % 100000) * 1e-3f - 50.0f;
    memset(f32b, 0, n * 4);
    memset(h16, 0, n * 2);
    double *t = malloc((size_t)repeats * sizeof *t);
    for (int r = 0; r < repeats; r++) {
        double t0 = ddph__now();
        memcpy(f32b, f32, n * 4);
        t[r] = ddph__now() - t0;
    }
    double base = bench_median(t, repeats);
    printf("memcpy of %zu MiB: %.2f ms (%.2f GB/s), the baseline\n\n", mib,
           base * 1e3, (double)n * 4 / base / 1e9);
    printf("%-11s %-7s %10s %12s %14s\n", "cast", "path", "ms", "Gelem/s",
           "x memcpy");
    static const char *const names[] = {"f32->f16", "f16->f32", "f32->bf16",
                                        "bf16->f32"};
    double worst_best = 1e9;
    for (int k = 0; k < DDPH_CAST_COUNT; k++) {
        int from16 = k == DDPH_CAST_F16_F32 || k == DDPH_CAST_BF16_F32;
        const void *src = from16 ? (const void *)h16 : (const void *)f32;
        void *dst = from16 ? (void *)f32b : (void *)h16;
        double best_ratio = 0;
        for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
            if (!ddph__simd_available((ddph_simd_path)p))
                continue;
            for (int r = 0; r < repeats; r++) {
                double t0 = ddph__now();
                ddph__cast_run((ddph_simd_path)p, (ddph_cast_kind)k, src, dst, n);
                t[r] = ddph__now() - t0;
            }
            double m = bench_median(t, repeats);
            double ratio = base / m;
            if (ratio > best_ratio && p == (int)ddph__simd_best())
                best_ratio = ratio;
            printf("%-11s %-7s %10.2f %12.2f %13.2fx\n", names[k],
                   ddph__simd_name((ddph_simd_path)p), m * 1e3,
                   (double)n / m / 1e9, ratio);
        }
        if (best_ratio < worst_best)
            worst_best = best_ratio;
    }
    printf("\ndefault path on this CPU: %s; its slowest cast runs at %.2fx "
           "memcpy\n",
           ddph__simd_name(ddph__simd_best()), worst_best);
    free(t);
    free(f32);
    free(f32b);
    free(h16);
    return 0;
}


/* ---- hooks on model gradients ------------------------------------------- */

typedef struct hook_bench {
    const char *model, *hooks, *plugin_path, *csv, *trace_dir, *shapes;
    const char *dtype_name; /* --dtype, or NULL */
    bench_options options;  /* --option NAME.KEY=VALUE */
    ddph_dtype dtype;
    size_t mib;
    int repeats, rank, view, lanes, private_buckets, stats;
    double cap_mb;
} hook_bench;

static double barrier_time(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime();
}

/* Median over ranks is not needed: the slowest rank's time is the step's. */
static double slowest(double t)
{
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

/* Bytes the model's hooks sent and received so far, all buckets. */
static void traffic(ddph_model *m, uint64_t *sent, uint64_t *received)
{
    *sent = *received = 0;
    for (int b = 0; b < ddph_model_bucket_count(m); b++) {
        uint64_t sb = 0, rb = 0;
        ddph_model_bucket_traffic(m, b, &sb, &rb);
        *sent += sb;
        *received += rb;
    }
}

/* pristine: the gradients in hb->dtype, parameter after parameter. */
static int bench_one_hook(const hook_bench *hb, const char *hook,
                          const preset_param *pp, int np, const char *pristine,
                          size_t total, int rank, double *median_s,
                          double *wire_per_step, double *recv_per_step,
                          char *stats, size_t stats_cap)
{
    char path[256], keys[320];
    /* "NAME/unchecked": the hook without collective fingerprints
     * ([runtime] check_collectives = false), to see what they cost. */
    char name[512];
    snprintf(name, sizeof name, "%s", hook);
    size_t nl = strlen(name), sl = strlen("/unchecked");
    int unchecked = nl > sl && strcmp(name + nl - sl, "/unchecked") == 0;
    if (unchecked)
        name[nl - sl] = '\0';
    char cap[BENCH_CAP_LEN];
    snprintf(keys, sizeof keys,
             "bucket_cap_mb = %s\ntimeout_s = 600\n"
             "gradient_as_bucket_view = %s\nlanes = %d\n"
             "shared_buckets = %s\ncheck_collectives = %s\n",
             bench_cap_text(hb->cap_mb, cap), hb->view ? "true" : "false", hb->lanes,
             hb->private_buckets ? "false" : "true",
             unchecked ? "false" : "true");
    if (!bench_write_job(path, sizeof path, rank, keys, hb->plugin_path, name,
                         hb->rank, &hb->options))
        return 0;
    ddph_ctx *ctx;
    ddph_model *m;
    int ok = 0;
    if (ddph_open(path, NULL, NULL, &ctx) != DDPH_OK)
        return 0;
    size_t es = ddph__dtype_size(hb->dtype);
    char *grads = malloc(total * es);
    char **ptr = calloc((size_t)np, sizeof *ptr);
    size_t *numel = calloc((size_t)np, sizeof *numel);
    double *t = calloc((size_t)hb->repeats, sizeof *t);
    if (!grads || !ptr || !numel || !t ||
        ddph_model_create(ctx, "bench", &m) != DDPH_OK)
        goto out;
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        numel[i] = preset_numel(&pp[i], 1);
        if (ddph_model_add_param(m, pp[i].name, grads + off * es, pp[i].shape,
                                 pp[i].ndim, hb->dtype, DDPH_CPU,
                                 NULL) != DDPH_OK)
            goto out;
        off += numel[i];
    }
    if (ddph_model_finalize(m) != DDPH_OK)
        goto out;
    for (int i = 0; i < np; i++) {
        void *p;
        ddph_model_grad_ptr(m, i, &p);
        ptr[i] = p;
    }
    const int warmup = 3;
    uint64_t wire0 = 0, recv0 = 0;
    for (int s = 0; s < warmup + hb->repeats; s++) {
        off = 0;
        for (int i = 0; i < np; i++) { /* fresh gradients, outside the clock */
            memcpy(ptr[i], pristine + off * es, numel[i] * es);
            off += numel[i];
        }
        if (s == warmup)
            traffic(m, &wire0, &recv0);
        /* A step counter rewritten in place: only on a terminal (in a
         * log it would be one long line). */
        if (rank == 0 && isatty(STDERR_FILENO))
            fprintf(stderr, "\r  %-22s step %2d/%d", hook, s + 1,
                    warmup + hb->repeats);
        double t0 = barrier_time();
        if (ddph_step_begin(ctx, &m, 1) != DDPH_OK)
            goto out;
        for (int i = np - 1; i >= 0; i--)
            if (ddph_grad_ready(m, i) != DDPH_OK)
                goto out;
        if (ddph_step_wait(ctx) != DDPH_OK)
            goto out;
        double dt = slowest(MPI_Wtime() - t0);
        if (ddph_step_end(ctx) != DDPH_OK)
            goto out;
        if (s >= warmup)
            t[s - warmup] = dt;
    }
    uint64_t wire = 0, recv = 0;
    traffic(m, &wire, &recv);
    *wire_per_step = (double)(wire - wire0) / hb->repeats;
    *recv_per_step = (double)(recv - recv0) / hb->repeats;
    *median_s = bench_median(t, hb->repeats);
    stats[0] = '\0';
    if (hb->stats)
        ddph__model_stats_line(m, stats, stats_cap);
    ok = 1;
out:
    if (!ok)
        fprintf(stderr, "\nddphook bench: %s: %s\n", hook, ddph_last_error(ctx));
    ddph_close(ctx);
    unlink(path);
    free(grads);
    free(ptr);
    free(numel);
    free(t);
    return ok;
}

/* Runs every hook of hb->hooks; a trace without --dtype sets hb->dtype. */
/* The bucket layout the runtime makes of these parameters (in bytes of
 * hb->dtype): the raw baseline reduces the same buckets.  NULL gradients
 * are allowed with gradient_as_bucket_view, which does not change the
 * layout. */
static size_t *bucket_bytes(const hook_bench *hb, const preset_param *pp,
                            int np, int rank, int *nb)
{
    char path[256], keys[256], cap[BENCH_CAP_LEN];
    snprintf(keys, sizeof keys,
             "bucket_cap_mb = %s\ntimeout_s = 600\n"
             "gradient_as_bucket_view = true\nshared_buckets = false\n",
             bench_cap_text(hb->cap_mb, cap));
    if (!bench_write_job(path, sizeof path, rank, keys, hb->plugin_path,
                         "allreduce", hb->rank, NULL))
        return NULL;
    ddph_ctx *ctx;
    ddph_model *m;
    size_t *out = NULL;
    *nb = 0;
    if (ddph_open(path, NULL, NULL, &ctx) != DDPH_OK)
        return NULL;
    int ok = ddph_model_create(ctx, "layout", &m) == DDPH_OK;
    for (int i = 0; ok && i < np; i++)
        ok = ddph_model_add_param(m, pp[i].name, NULL, pp[i].shape,
                                  pp[i].ndim, hb->dtype, DDPH_CPU,
                                  NULL) == DDPH_OK;
    ok = ok && ddph_model_finalize(m) == DDPH_OK;
    if (ok && (out = calloc((size_t)ddph_model_bucket_count(m) + 1,
                            sizeof *out))) {
        *nb = ddph_model_bucket_count(m);
        for (int b = 0; b < *nb; b++) {
            ddph_bucket_info info;
            ddph_model_bucket_info(m, b, &info);
            out[b] = info.bytes;
        }
    }
    if (!ok)
        fprintf(stderr, "ddphook bench: bucket layout: %s\n",
                ddph_last_error(ctx));
    ddph_close(ctx);
    unlink(path);
    return out;
}

/* Median seconds of a raw MPI_Allreduce of `buf` in pieces of the given
 * byte counts, summed as f32 (MPI has no half types: the runtime brings
 * its own reduction for them), one blocking call after the other.  With
 * `split`, each piece goes in calls of at most DDPH__MPI_PIECE_BYTES, as
 * the runtime issues them (MPICH is far slower on larger messages here). */
static double raw_allreduce(float *buf, const size_t *bytes, int n,
                            int split, int repeats, double *t)
{
    const size_t most = split ? DDPH__MPI_PIECE_BYTES / 4 : (size_t)1 << 30;
    for (int s = 0; s < repeats + 1; s++) {
        double t0 = barrier_time();
        float *p = buf;
        for (int b = 0; b < n; b++) {
            size_t count = (bytes[b] + 3) / 4;
            for (size_t done = 0; done < count;) {
                size_t k = count - done < most ? count - done : most;
                MPI_Allreduce(MPI_IN_PLACE, p + done, (int)k, MPI_FLOAT,
                              MPI_SUM, MPI_COMM_WORLD);
                done += k;
            }
            p += count;
        }
        double dt = slowest(MPI_Wtime() - t0);
        if (s > 0)
            t[s - 1] = dt;
    }
    return bench_median(t, repeats);
}

/* The parameters to reduce: a trace's shapes, one matrix of --mib, or a
 * preset model; label names them.  0, or an exit status (said on rank 0). */
static int bench_shapes(hook_bench *hb, int rank, preset_param **out, int *np,
                        char *label, size_t cap)
{
    preset_param *pp = NULL;
    if (hb->trace_dir) { /* the shapes of a gradient trace (docs/replay.md) */
        char msg[4200];
        ddph_dtype dtype;
        if (!preset_from_trace(hb->trace_dir, &pp, np, &dtype, msg,
                               sizeof msg)) {
            if (rank == 0)
                fprintf(stderr, "ddphook bench: %s\n", msg);
            return 1;
        }
        if (!hb->dtype_name)
            hb->dtype = dtype;
        snprintf(label, cap, "trace %s", hb->trace_dir);
    } else if (hb->shapes) { /* NAME D0 [D1 ...] lines (presets.h) */
        char msg[4200];
        if (!preset_read_file(hb->shapes, &pp, np, msg, sizeof msg)) {
            if (rank == 0)
                fprintf(stderr, "ddphook bench: %s\n", msg);
            return 2;
        }
        snprintf(label, cap, "shapes %s", hb->shapes);
    } else if (hb->mib) {
        size_t n = hb->mib * 1048576 / 4;
        if ((pp = calloc(1, sizeof *pp)))
            *pp = (preset_param){"matrix", {1024, (int64_t)(n / 1024)}, 2};
        *np = 1;
        snprintf(label, cap, "one 1024 x %zu matrix", n / 1024);
    } else if (!preset_load(hb->model, &pp, np)) {
        if (rank == 0)
            fprintf(stderr, "ddphook bench: unknown model '%s' (gpt2-124m, "
                            "resnet50, resnet18-cifar, lstm-wikitext2, gpt-example, mlp)\n",
                    hb->model);
        return 2;
    } else {
        snprintf(label, cap, "%s", hb->model);
    }
    if (!pp) {
        fprintf(stderr, "ddphook bench: out of memory\n");
        return 1;
    }
    *out = pp;
    return 0;
}

/* Every rank's gradients, uniform in [-0.5, 0.5) from a seed of its own,
 * in hb->dtype; NULL when out of memory. */
static char *bench_gradients(const hook_bench *hb, size_t total, int rank)
{
    float *values = malloc((total ? total : 1) * sizeof *values);
    char *grads = malloc((total ? total : 1) * ddph__dtype_size(hb->dtype));
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1);
    for (size_t i = 0; values && i < total; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        values[i] = (float)((double)(x >> 11) / 9007199254740992.0) - 0.5f;
    }
    ddph_err e;
    if (!values || !grads ||
        ddph__cpu_cast(values, DDPH_F32, grads, hb->dtype, total, 1.0, &e) !=
            DDPH_OK) {
        free(grads);
        grads = NULL;
    }
    free(values);
    return grads;
}

static int bench_hooks(hook_bench *hb)
{
    int inited = 0, provided, rank, world;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    preset_param *pp = NULL;
    int np = 0, nb = 0;
    char label[64];
    char *pristine = NULL, *csv_text = NULL, *list = NULL;
    size_t *bb = NULL;
    float *raw = NULL;
    double *t = NULL;
    FILE *csv = NULL; /* the table, written to --csv at the end */
    size_t csv_len = 0, total = 0;
    int rc = bench_shapes(hb, rank, &pp, &np, label, sizeof label);
    if (rc)
        goto out;
    total = preset_numel(pp, np);
    size_t bytes_total = total * ddph__dtype_size(hb->dtype);
    if (!(pristine = bench_gradients(hb, total, rank))) {
        fprintf(stderr, "ddphook bench: out of memory\n");
        rc = 1;
        goto out;
    }
    /* Baselines: the best the engine does on the same work.  A loop of
     * blocking MPI_Allreduce over the same buckets, and one call over all
     * the bytes (a bound no bucketed scheme reaches). */
    bb = bucket_bytes(hb, pp, np, rank, &nb);
    size_t raw_n = 0;
    for (int b = 0; b < nb; b++)
        raw_n += (bb[b] + 3) / 4;
    raw = calloc(raw_n ? raw_n : 1, sizeof *raw);
    t = calloc((size_t)hb->repeats, sizeof *t);
    if (!bb || !raw || !t) {
        fprintf(stderr, "ddphook bench: cannot make the baseline\n");
        rc = 1;
        goto out;
    }
    double base = raw_allreduce(raw, bb, nb, 1, hb->repeats, t);
    size_t one = bytes_total;
    double base_one = raw_allreduce(raw, &one, 1, 0, hb->repeats, t);
    double bytes = (double)bytes_total, bus = 2.0 * (world - 1) / world;
    if (rank == 0) {
        char cap[BENCH_CAP_LEN];
        printf("ddphook bench hooks: %s, %d parameters, %.4g MiB of %s "
               "gradients, %d ranks, bucket_cap_mb %s%s, median of %d steps\n",
               label, np, bytes / 1048576, ddph__dtype_name(hb->dtype), world,
               bench_cap_text(hb->cap_mb, cap),
               hb->view ? ", gradient_as_bucket_view" : "", hb->repeats);
        printf("baseline: raw MPI_Allreduce over the same %d buckets (calls "
               "of at most %zu MiB): %.2f ms, bus bandwidth %.2f GB/s\n"
               "          one raw MPI_Allreduce of all %.4g MiB: %.2f ms\n\n",
               nb, DDPH__MPI_PIECE_BYTES >> 20, base * 1e3,
               bytes * bus / base / 1e9, bytes / 1048576, base_one * 1e3);
        printf("%-20s %14s %14s %12s %12s %14s %12s\n", "hook", "sent/step",
               "recv/step", "ms/step", "busbw GB/s", "x raw buckets",
               "x one call");
        if (hb->csv && !(csv = open_memstream(&csv_text, &csv_len)))
            fprintf(stderr, "ddphook bench: out of memory for %s\n", hb->csv);
        if (csv)
            fprintf(csv, "hook,bytes_per_step,seconds_per_step,busbw_gbs,"
                         "ratio_to_raw_buckets,ratio_to_raw_one_call,"
                         "raw_buckets_seconds,bytes_received_per_step\n");
    }
    list = ddph__strdup(hb->hooks);
    char *save = NULL;
    for (char *h = list ? strtok_r(list, ",", &save) : NULL; h;
         h = strtok_r(NULL, ",", &save)) {
        double med = 0, wire = 0, recv = 0;
        char stats[1024];
        if (!bench_one_hook(hb, h, pp, np, pristine, total, rank, &med, &wire,
                            &recv, stats, sizeof stats)) {
            rc = 1;
            continue;
        }
        double busbw = wire * bus / med / 1e9;
        if (rank == 0) {
            if (isatty(STDERR_FILENO))
                fprintf(stderr, "\r%60s\r", "");
            printf("%-20s %14.0f %14.0f %12.2f %12.2f %13.2fx %11.2fx\n", h,
                   wire, recv, med * 1e3, busbw, base / med, base_one / med);
            if (hb->stats)
                printf("  stats: %s\n", stats);
            fflush(stdout);
            if (csv)
                fprintf(csv, "%s,%.0f,%.6f,%.4f,%.4f,%.4f,%.6f,%.0f\n", h,
                        wire, med, busbw, base / med, base_one / med, base,
                        recv);
        }
    }
    if (csv && fclose(csv) == 0) {
        /* Like a checkpoint: a link planted at the path is replaced. */
        ddph_err werr;
        if (ddph__file_write_atomic(hb->csv, csv_text, csv_len, "csv",
                                    &werr) != DDPH_OK)
            fprintf(stderr, "ddphook bench: %s\n", werr.msg);
    }
out:
    free(csv_text);
    free(list);
    free(pp);
    free(pristine);
    free(raw);
    free(bb);
    free(t);
    if (!inited) {
        if (rc == 0)
            MPI_Barrier(MPI_COMM_WORLD);
        ddph__mpi_finalize_watched(30); /* see backend_mpi.h */
    }
    return rc;
}

static int print_shapes(const char *model)
{
    preset_param *p;
    int n;
    if (!preset_load(model, &p, &n)) {
        fprintf(stderr, "ddphook bench shapes: unknown model '%s' (gpt2-124m, "
                        "resnet50, resnet18-cifar, lstm-wikitext2, gpt-example, mlp)\n",
                model);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        printf("%s", p[i].name);
        for (int d = 0; d < p[i].ndim; d++)
            printf(" %lld", (long long)p[i].shape[d]);
        putchar('\n');
    }
    free(p);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    size_t mib = 0;
    const char *profile = NULL; /* bench gpu --profile FILE */
    int repeats = 0;
    hook_bench hb = {.model = NULL, .hooks = NULL, .rank = 4, .cap_mb = 25,
                     .lanes = 1};
    static const struct option opts[] = {
        {"mib", required_argument, NULL, 'm'},
        {"repeats", required_argument, NULL, 'r'},
        {"model", required_argument, NULL, 'M'},
        {"trace", required_argument, NULL, 'T'},
        {"shapes", required_argument, NULL, 'F'},
        {"hooks", required_argument, NULL, 'H'},
        {"plugin-path", required_argument, NULL, 'p'},
        {"option", required_argument, NULL, 'o'},
        {"bucket-cap-mb", required_argument, NULL, 'b'},
        {"rank", required_argument, NULL, 'R'},
        {"view", no_argument, NULL, 'v'},
        {"lanes", required_argument, NULL, 'L'},
        {"private-buckets", no_argument, NULL, 'P'},
        {"stats", no_argument, NULL, 'S'},
        {"csv", required_argument, NULL, 'c'},
        {"profile", required_argument, NULL, 'G'},
        {"dtype", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': mib = (size_t)strtoul(optarg, NULL, 10); break;
        case 'r': repeats = atoi(optarg); break;
        case 'M': hb.model = optarg; break;
        case 'T': hb.trace_dir = optarg; break;
        case 'F': hb.shapes = optarg; break;
        case 'H': hb.hooks = optarg; break;
        case 'p': hb.plugin_path = optarg; break;
        case 'o': {
            const char *dot = strchr(optarg, '.'), *eq = strchr(optarg, '=');
            if (!dot || !eq || dot > eq || dot == optarg || eq == dot + 1) {
                fprintf(stderr, "ddphook bench: --option %s: NAME.KEY=VALUE "
                                "(e.g. topk.ratio=0.05)\n",
                        optarg);
                return 2;
            }
            if (hb.options.n == (int)(sizeof hb.options.items /
                                      sizeof *hb.options.items)) {
                fprintf(stderr, "ddphook bench: more than %d --option\n",
                        hb.options.n);
                return 2;
            }
            hb.options.items[hb.options.n++] = optarg;
            break;
        }
        case 'b':
            if (!bench_parse_cap(optarg, &hb.cap_mb)) {
                fprintf(stderr, "ddphook bench: --bucket-cap-mb %s: not auto "
                                "or MiB in [2^-20, 65536]\n", optarg);
                return 2;
            }
            break;
        case 'R': hb.rank = atoi(optarg); break;
        case 'v': hb.view = 1; break;
        case 'L': hb.lanes = atoi(optarg); break;
        case 'P': hb.private_buckets = 1; break;
        case 'S': hb.stats = 1; break;
        case 'c': hb.csv = optarg; break;
        case 'G': profile = optarg; break;
        case 'd': hb.dtype_name = optarg; break;
        default:
            fputs(bench_usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind >= argc || repeats < 0 || hb.rank < 1 ||
        hb.lanes < 1 || hb.lanes > DDPH__MAX_LANES) {
        fputs(bench_usage, stderr);
        return 2;
    }
    if (hb.dtype_name && !ddph__dtype_parse(hb.dtype_name, &hb.dtype)) {
        fprintf(stderr, "ddphook bench: --dtype %s: not one of f32, f16, "
                        "bf16, f64\n",
                hb.dtype_name);
        return 2;
    }
    const char *what = argv[optind];
    if (strcmp(what, "gpu") == 0)
        return run_bench_gpu(mib ? mib : 64, repeats ? repeats : 20,
                             hb.hooks ? hb.hooks : "allreduce,fp16",
                             hb.plugin_path, profile);
    if (profile) {
        fprintf(stderr, "ddphook bench: --profile is for `bench gpu`\n");
        return 2;
    }
    if (strcmp(what, "casts") == 0)
        return bench_casts(mib ? mib : 64, repeats ? repeats : 7);
    if (strcmp(what, "ops") == 0)
        return bench_ops(mib ? mib : 64, repeats ? repeats : 7);
    if (strcmp(what, "shapes") == 0)
        return print_shapes(hb.model ? hb.model : "resnet50");
    hb.repeats = repeats ? repeats : 10;
    hb.mib = mib;
    if (strcmp(what, "hooks") == 0) {
        hb.model = hb.model ? hb.model : "resnet50";
        hb.hooks = hb.hooks ? hb.hooks
                            : "allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8";
        return bench_hooks(&hb);
    }
    if (strcmp(what, "powersgd") == 0) {
        hb.model = hb.model ? hb.model : "gpt2-124m";
        hb.hooks = hb.hooks ? hb.hooks : "allreduce,powersgd,batched_powersgd";
        return bench_hooks(&hb);
    }
    fprintf(stderr, "ddphook bench: unknown benchmark '%s'\n\n%s", what,
            bench_usage);
    return 2;
}
