/* bench_gpu.c: ddphook-bench-gpu, run by `ddphook bench gpu`: the nccl
 * backend's speed against baselines measured in the same run
 * (docs/performance.md).  A program of its own, built with the nccl
 * backend, so that `ddphook` itself links no CUDA library.
 *
 *   [mpiexec -n W] ddphook bench gpu [--mib N] [--repeats R] [--hooks LIST]
 *       [--plugin-path P]
 *
 * Casts: each CUDA cast kernel (f32 <-> f16/bf16) on N MiB of f32 against
 * a device-to-device cudaMemcpy of the same N MiB, both timed with CUDA
 * events; ratio = memcpy time / cast time.  Hooks: each hook of LIST (default allreduce,fp16) reduces one
 * 1024-row f32 matrix of N MiB in GPU memory through the real runtime
 * (backend = nccl); the baseline is a raw out-of-place ncclAllReduce of
 * the same f32 bytes on a communicator of the benchmark's own (at one
 * rank: a device-to-device copy of them); ratio = baseline time /
 * hook time, both timed from a device synchronisation and an MPI barrier
 * to the slowest rank's end.  Times are medians of R runs.  --profile FILE
 * also writes the figures for `ddphook plan --device-profile`
 * (gpu_profile.h). */
#include "build-config.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "backends/mpi/backend_mpi.h"
#include "cli/bench_common.h"
#include "backends/nccl/cuda_ops.h"
#include "cli/gpu_profile.h"
#include "support/util.h"

/* Wall time of the slowest rank since a common start. */
static double start_clock(void)
{
    cudaDeviceSynchronize();
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime();
}

static double stop_clock(double t0)
{
    cudaDeviceSynchronize();
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

#define CHECK(call, what)                                                    \
    do {                                                                     \
        if ((call) != 0) {                                                   \
            fprintf(stderr, "ddphook bench gpu: %s failed\n", what);         \
            goto out;                                                        \
        }                                                                    \
    } while (0)

/* The cast kernels against cudaMemcpy of the same f32 bytes, timed on the
 * device with events (a kernel on 64 MiB takes tens of microseconds, the
 * order of the launch and wall-clock overheads); the first of R + 1 runs
 * is a warm-up (it loads the kernel). */
static int bench_casts(size_t n, int repeats, int rank, gpu_profile *prof)
{
    int ok = 0;
    float *f32 = NULL, *copy = NULL;
    void *half = NULL;
    cudaEvent_t before = NULL, after = NULL;
    double *t = calloc((size_t)repeats + 1, sizeof *t);
    CHECK(t == NULL, "calloc");
    CHECK(cudaMalloc((void **)&f32, n * 4), "cudaMalloc");
    CHECK(cudaMalloc((void **)&copy, n * 4), "cudaMalloc");
    CHECK(cudaMalloc(&half, n * 2), "cudaMalloc");
    CHECK(cudaMemset(f32, 0x3c, n * 4), "cudaMemset"); /* finite values */
    CHECK(cudaEventCreate(&before), "cudaEventCreate");
    CHECK(cudaEventCreate(&after), "cudaEventCreate");
    static const struct {
        const char *name;
        ddph_dtype from, to;
    } casts[] = {{"memcpy", DDPH_F32, DDPH_F32}, /* the baseline */
                 {"f32 -> f16", DDPH_F32, DDPH_F16},
                 {"f16 -> f32", DDPH_F16, DDPH_F32},
                 {"f32 -> bf16", DDPH_F32, DDPH_BF16},
                 {"bf16 -> f32", DDPH_BF16, DDPH_F32}};
    double base = 0;
    for (size_t c = 0; c < sizeof casts / sizeof *casts; c++) {
        const void *src = casts[c].from == DDPH_F32 ? (void *)f32 : half;
        void *dst = casts[c].to == DDPH_F32 ? (void *)copy : half;
        for (int r = 0; r <= repeats; r++) {
            float ms = 0;
            CHECK(cudaEventRecord(before, 0), "cudaEventRecord");
            if (c == 0)
                CHECK(cudaMemcpyAsync(copy, f32, n * 4,
                                      cudaMemcpyDeviceToDevice, 0),
                      "cudaMemcpyAsync");
            else
                CHECK(ddph__cuda_cast(src, casts[c].from, dst, casts[c].to, n,
                                      1.0, NULL),
                      "cast kernel");
            CHECK(cudaEventRecord(after, 0), "cudaEventRecord");
            CHECK(cudaEventSynchronize(after), "cudaEventSynchronize");
            CHECK(cudaEventElapsedTime(&ms, before, after),
                  "cudaEventElapsedTime");
            t[r] = ms * 1e-3;
        }
        double m = bench_median(t + 1, repeats);
        if (c == 0)
            prof->copy_bytes_per_s = 2.0 * (double)n * 4 / m;
        else
            prof->cast_seconds[c - 1] = m / (double)n;
        if (c == 0) {
            base = m;
            if (rank == 0)
                printf("casts: %zu MiB of f32 (device time, CUDA events), "
                       "cudaMemcpy device to device %.3f ms, %.1f GB/s "
                       "read+write\n",
                       n * 4 >> 20, m * 1e3, 2.0 * (double)n * 4 / m / 1e9);
        } else if (rank == 0) {
            printf("  %-12s %8.3f ms  ratio to memcpy %.2f\n", casts[c].name,
                   m * 1e3, base / m);
        }
    }
    ok = 1;
out:
    if (before)
        cudaEventDestroy(before);
    if (after)
        cudaEventDestroy(after);
    cudaFree(f32);
    cudaFree(copy);
    cudaFree(half);
    free(t);
    return ok;
}

/* A raw ncclAllReduce of n floats, the median of `repeats`: out of
 * place, from `buf` into `sum`, so that at one rank it still moves the
 * bytes (one copy; NCCL's one-rank in-place allreduce copies nothing,
 * while a hook's step copies its gradients into the bucket and back). */
static int raw_allreduce(const float *buf, float *sum, size_t n, int repeats,
                         int rank, int world, double *median_s)
{
    int ok = 0;
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    double *t = calloc((size_t)repeats, sizeof *t);
    CHECK(t == NULL, "calloc");
    /* Every rank learns whether rank 0 got an id: none waits in the
     * broadcast, or in ncclCommInitRank, alone. */
    int have = rank != 0 || ncclGetUniqueId(&id) == ncclSuccess;
    MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    CHECK(!have, "ncclGetUniqueId (on rank 0)");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
    for (int r = -2; r < repeats; r++) { /* two warm-up calls */
        double t0 = start_clock();
        CHECK(ncclAllReduce(buf, sum, n, ncclFloat32, ncclSum, comm, 0),
              "ncclAllReduce");
        double dt = stop_clock(t0);
        if (r >= 0)
            t[r] = dt;
    }
    *median_s = bench_median(t, repeats);
    ok = 1;
out:
    if (comm)
        ncclCommDestroy(comm);
    free(t);
    return ok;
}

/* One hook through the runtime on one GPU matrix; the median step time. */
static int hook_step(const char *hook, const char *plugin_path, float *grad,
                     size_t n, int repeats, int rank, double *median_s,
                     double *wire_bytes)
{
    char path[256];
    if (!bench_write_job(path, sizeof path, rank,
                         "backend = nccl\nbucket_cap_mb = 25\ntimeout_s = 600\n",
                         plugin_path, hook, 4, NULL))
        return 0;
    ddph_ctx *ctx = NULL;
    ddph_model *m;
    int ok = 0;
    double *t = calloc((size_t)repeats, sizeof *t);
    int64_t shape[2] = {1024, (int64_t)(n / 1024)};
    if (!t || ddph_open(path, NULL, NULL, &ctx) != DDPH_OK ||
        ddph_model_create(ctx, "bench", &m) != DDPH_OK ||
        ddph_model_add_param(m, "matrix", grad, shape, 2, DDPH_F32, DDPH_CUDA,
                             NULL) != DDPH_OK ||
        ddph_model_finalize(m) != DDPH_OK)
        goto out;
    const int warmup = 3; /* PowerSGD compresses from the third step on */
    uint64_t wire0 = 0, wire = 0;
    for (int s = 0; s < warmup + repeats; s++) {
        ddph_bucket_info info;
        if (s == warmup)
            for (int b = 0; b < ddph_model_bucket_count(m); b++)
                if (ddph_model_bucket_info(m, b, &info) == DDPH_OK)
                    wire0 += info.bytes_on_wire;
        double t0 = start_clock();
        if (ddph_step_begin(ctx, &m, 1) != DDPH_OK ||
            ddph_grad_ready(m, 0) != DDPH_OK || ddph_step_wait(ctx) != DDPH_OK)
            goto out;
        double dt = stop_clock(t0);
        if (ddph_step_end(ctx) != DDPH_OK)
            goto out;
        if (s >= warmup)
            t[s - warmup] = dt;
    }
    for (int b = 0; b < ddph_model_bucket_count(m); b++) {
        ddph_bucket_info info;
        if (ddph_model_bucket_info(m, b, &info) == DDPH_OK)
            wire += info.bytes_on_wire;
    }
    *wire_bytes = (double)(wire - wire0) / repeats;
    *median_s = bench_median(t, repeats);
    ok = 1;
out:
    if (!ok)
        fprintf(stderr, "ddphook bench gpu: %s: %s\n", hook,
                ctx ? ddph_last_error(ctx) : "cannot open the job");
    ddph_close(ctx);
    unlink(path);
    free(t);
    return ok;
}

/* Casts against cudaMemcpy, then each hook of the comma-separated `hooks`
 * against a raw ncclAllReduce, on `mib` MiB; medians of `repeats`.
 * Returns an exit status: 0, 1 on failure, 77 without a CUDA device. */
static int bench_gpu(size_t mib, int repeats, const char *hooks,
                     const char *plugin_path, const char *profile)
{
    gpu_profile prof;
    memset(&prof, 0, sizeof prof);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "ddphook bench gpu: no CUDA device\n");
        return 77;
    }
    int inited = 0, provided, rank, world, ok = 1;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* The GPU the runtime picks for this rank: its index on its host. */
    MPI_Comm node;
    int local = 0, per_host = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                            MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_size(node, &per_host);
        MPI_Comm_free(&node);
    }
    int gpu = local % count;
    cudaError_t set = cudaSetDevice(gpu);
    int all_set = set == cudaSuccess;
    MPI_Allreduce(MPI_IN_PLACE, &all_set, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_set) {
        fprintf(stderr, "ddphook bench gpu: cudaSetDevice(%d) failed on %s: "
                        "%s\n",
                gpu, set == cudaSuccess ? "another rank" : "this rank",
                cudaGetErrorString(set));
        if (!inited)
            MPI_Finalize();
        return 1;
    }
    size_t n = (mib * 1048576 / 4) / 1024 * 1024; /* whole 1024-row matrix */
    if (rank == 0) {
        struct cudaDeviceProp prop;
        cudaGetDeviceProperties(&prop, gpu);
        printf("ddphook bench gpu: %d rank%s, %s, median of %d\n", world,
               world == 1 ? "" : "s", prop.name, repeats);
        /* The profile keeps the name printable (and not empty). */
        snprintf(prof.device, sizeof prof.device, "unnamed CUDA device");
        if (prop.name[0])
            snprintf(prof.device, sizeof prof.device, "%.255s", prop.name);
        for (size_t i = 0; prof.device[i]; i++)
            if (prof.device[i] < 0x20 || prof.device[i] >= 0x7f)
                prof.device[i] = '?';
    }
    /* Hosts of unequal ranks are recorded as one rank a host. */
    MPI_Allreduce(MPI_IN_PLACE, &per_host, 1, MPI_INT, MPI_MIN,
                  MPI_COMM_WORLD);
    prof.ranks = world;
    prof.per_host = world % per_host == 0 ? per_host : 1;
    prof.mib = (double)(n * 4) / 1048576;
    ok = bench_casts(n, repeats, rank, &prof);
    float *grad = NULL, *sum = NULL;
    double raw = 0;
    ok = ok && cudaMalloc((void **)&grad, n * 4) == cudaSuccess &&
         cudaMalloc((void **)&sum, n * 4) == cudaSuccess &&
         cudaMemset(grad, 0, n * 4) == cudaSuccess &&
         raw_allreduce(grad, sum, n, repeats, rank, world, &raw);
    /* Bus bandwidth as nccl-tests define it for allreduce. */
    double bus = world > 1 ? 2.0 * (world - 1) / world : 1.0;
    if (ok)
        prof.allreduce_bus_bytes_per_s = (double)n * 4 * bus / raw;
    if (ok && rank == 0)
        printf("hooks: one 1024 x %zu f32 matrix (%zu MiB) in GPU memory\n"
               "  %-18s %9s %12s %10s %8s\n"
               "  %-18s %9.3f %12.0f %10.1f %8s\n",
               n / 1024, n * 4 >> 20, "hook", "ms/step", "wire B/step",
               "bus GB/s", "ratio", "raw ncclAllReduce", raw * 1e3,
               (double)n * 4, (double)n * 4 * bus / raw / 1e9, "1.00");
    char *list = ok ? ddph__strdup(hooks) : NULL;
    char *save = NULL;
    for (char *h = list ? strtok_r(list, ",", &save) : NULL; h && ok;
         h = strtok_r(NULL, ",", &save)) {
        double s = 0, wire = 0;
        ok = hook_step(h, plugin_path, grad, n, repeats, rank, &s, &wire);
        if (ok && rank == 0)
            printf("  %-18s %9.3f %12.0f %10.1f %8.2f\n", h, s * 1e3, wire,
                   wire * bus / s / 1e9, raw / s);
        if (ok && strlen(h) < sizeof prof.hooks[0].name &&
            prof.nhooks < GPU_PROFILE_MAX_HOOKS && !gpu_profile_find(&prof, h)) {
            snprintf(prof.hooks[prof.nhooks].name, sizeof prof.hooks[0].name,
                     "%s", h);
            prof.hooks[prof.nhooks++].seconds_per_byte = s / ((double)n * 4);
        }
    }
    char msg[DDPH__ERR_LEN + 64];
    if (ok && profile && rank == 0) {
        ok = gpu_profile_save(profile, &prof, msg, sizeof msg);
        if (ok)
            printf("profile: %s (ddphook plan --device-profile %s)\n",
                   profile, profile);
        else
            fprintf(stderr, "ddphook bench gpu: --profile: %s\n", msg);
    }
    free(list);
    cudaFree(grad);
    cudaFree(sum);
    if (!inited)
        MPI_Finalize();
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mib", required_argument, NULL, 'm'},
        {"repeats", required_argument, NULL, 'r'},
        {"hooks", required_argument, NULL, 'k'},
        {"plugin-path", required_argument, NULL, 'p'},
        {"profile", required_argument, NULL, 'P'},
        {0, 0, 0, 0}};
    long mib = 64, repeats = 20;
    const char *hooks = "allreduce,fp16", *plugin_path = NULL, *profile = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': mib = atol(optarg); break;
        case 'r': repeats = atol(optarg); break;
        case 'k': hooks = optarg; break;
        case 'p': plugin_path = optarg; break;
        case 'P': profile = optarg; break;
        default:
            fputs("usage: ddphook-bench-gpu [--mib N] [--repeats R] "
                  "[--hooks LIST] [--plugin-path P] [--profile FILE] (run "
                  "by `ddphook bench gpu`: see its --help)\n",
                  stderr);
            return 2;
        }
    }
    if (mib < 1 || repeats < 1) {
        fputs("ddphook-bench-gpu: --mib and --repeats must be positive\n",
              stderr);
        return 2;
    }
    return bench_gpu((size_t)mib, (int)repeats, hooks, plugin_path, profile);
}
