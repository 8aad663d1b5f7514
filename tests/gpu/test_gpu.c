/* test_gpu: the nccl backend against the CPU backend on the same
 * gradients.  Every shipped hook (allreduce, fp16, bf16, powersgd with the
 * Gram-Schmidt and the QR orthogonaliser, batched_powersgd, the fp16/bf16
 * wrappers, topk and int8), bf16 gradients, gradient_as_bucket_view with the trainer's
 * own stream, and,
 * when its .so is given, post-local-SGD's parameter averaging: gradients
 * (and parameters) in GPU memory (backend = nccl) must match, within the
 * case's tolerance, what the same job gives on host memory (backend = mpi),
 * at every step.  Exit 77 with the reason "no CUDA device" when there is
 * none, or when this build has no nccl backend.
 *
 *   [mpiexec -n W] test_gpu PLUGIN_DIR [POST_LOCALSGD_SO] */
#include "build-config.h"

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "../bf16_host.h"

#ifdef HAVE_NCCL
#include <cuda_runtime.h>

#define NP 5
#define STEPS 4
/* Matrices PowerSGD compresses, a scalar and a vector it does not. */
static const int64_t shapes[NP][2] = {
    {64, 65}, {1, 1}, {256, 256}, {300, 1}, {33, 128}};
static const int ndims[NP] = {2, 1, 2, 1, 2};

typedef struct gpu_case {
    const char *name, *hook;
    const char *wrapper; /* NULL: none */
    const char *extra;   /* more INI text ([runtime] keys first), or NULL */
    int own_stream;     /* ddph_set_stream with a stream of the test's */
    int params;         /* register parameters, step them, compare them */
    double rtol, atol;
    int nan;            /* rank 0 has a NaN in step 1: both backends must
                           report it alike (check_finite) */
    int bf16;           /* bf16 gradients (else f32) */
} gpu_case;

static size_t numel(int p)
{
    return (size_t)(shapes[p][0] * (ndims[p] == 2 ? shapes[p][1] : 1));
}

/* Full-rank pseudo-random values in [-1, 1), different per rank, step,
 * parameter and element. */
static float value(int rank, int step, int p, size_t i)
{
    uint64_t x = ((uint64_t)rank << 48) ^ ((uint64_t)step << 40) ^
                 ((uint64_t)p << 32) ^ i;
    x = (x ^ (x >> 31)) * 0x7fb5d329728ea185ull;
    x = (x ^ (x >> 27)) * 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return (float)(x >> 40) / 8388608.0f - 1.0f;
}

/* What one run leaves: every parameter's gradient (and parameter) after
 * every step, concatenated. */
typedef struct result {
    float *v;
    size_t n;
    char message[512]; /* the check_finite report */
} result;

/* n values into dst, as bf16 when `half` (its scratch) is given.  On the
 * GPU: enqueued on the trainer's stream and not waited for, as a trainer's
 * backward would (a copy from pageable memory returns once the source is
 * staged); the runtime's events must order the rest. */
static int put(void *dst, const float *src, size_t n, int gpu, void *stream,
               uint16_t *half)
{
    const void *from = src;
    size_t bytes = n * sizeof *src;
    if (half) {
        for (size_t i = 0; i < n; i++)
            half[i] = bf16_from_float(src[i]);
        from = half;
        bytes = n * sizeof *half;
    }
    if (!gpu) {
        memcpy(dst, from, bytes);
        return 1;
    }
    return cudaMemcpyAsync(dst, from, bytes, cudaMemcpyHostToDevice,
                           (cudaStream_t)stream) == cudaSuccess;
}

static int get(float *dst, const void *src, size_t n, int gpu, uint16_t *half)
{
    void *to = half ? (void *)half : (void *)dst;
    size_t bytes = n * (half ? sizeof *half : sizeof *dst);
    if (!gpu)
        memcpy(to, src, bytes);
    else if (cudaMemcpy(to, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    for (size_t i = 0; half && i < n; i++)
        dst[i] = bf16_to_float(half[i]);
    return 1;
}

/* Runs STEPS steps of case c on the GPU or the CPU. */
static int run(const char *dir, const gpu_case *c, int gpu, int rank,
               result *out)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/ddph-gpu-%d-%d.ini", (int)getppid(), rank);
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fprintf(f, "[runtime]\nbackend = %s\nplugin_path = %s\nbucket_cap_mb = 0.1\n"
               "first_bucket_cap_mb = 0.05\ntimeout_s = 60\n%s\n[hook]\n"
               "name = %s\nwrapper = %s\n",
            gpu ? "nccl" : "mpi", dir, c->extra ? c->extra : "", c->hook,
            c->wrapper ? c->wrapper : "none");
    fclose(f);
    size_t total = 0;
    for (int p = 0; p < NP; p++)
        total += numel(p);
    out->n = total * STEPS * (c->params ? 2 : 1);
    out->v = calloc(out->n, sizeof(float));
    float *host = malloc(total * sizeof *host);
    uint16_t *half = c->bf16 ? malloc(total * sizeof *half) : NULL;
    ddph_dtype dtype = c->bf16 ? DDPH_BF16 : DDPH_F32;
    ddph_ctx *ctx = NULL;
    int ok = out->v && host && (half || !c->bf16) &&
             ddph_open(path, NULL, NULL, &ctx) == DDPH_OK;
    unlink(path);
    /* Every allocation below on the rank's GPU, which the runtime chose. */
    if (ok && gpu)
        ok = ddph_cuda_device(ctx) >= 0 &&
             cudaSetDevice(ddph_cuda_device(ctx)) == cudaSuccess;
    cudaStream_t stream = NULL;
    if (ok && gpu && c->own_stream)
        ok = cudaStreamCreate(&stream) == cudaSuccess &&
             ddph_set_stream(ctx, stream) == DDPH_OK;
    ddph_model *m = NULL;
    void *grad[NP] = {0}, *param[NP] = {0};
    ok = ok && ddph_model_create(ctx, "net", &m) == DDPH_OK;
    for (int p = 0; ok && p < NP; p++) {
        size_t n = numel(p) * (c->bf16 ? 2 : sizeof(float));
        if (gpu)
            ok = cudaMalloc(&grad[p], n) == cudaSuccess &&
                 (!c->params || cudaMalloc(&param[p], n) == cudaSuccess);
        else
            ok = (grad[p] = malloc(n)) && (!c->params || (param[p] = malloc(n)));
        ok = ok && ddph_model_add_param(m, "p", grad[p], shapes[p], ndims[p],
                                        dtype, gpu ? DDPH_CUDA : DDPH_CPU,
                                        NULL) == DDPH_OK;
        if (ok && c->params) {
            for (size_t i = 0; i < numel(p); i++)
                host[i] = value(rank, 99, p, i);
            ok = put(param[p], host, numel(p), gpu, stream, half) &&
                 ddph_model_set_param_data(m, p, param[p]) == DDPH_OK;
        }
    }
    ok = ok && ddph_model_finalize(m) == DDPH_OK;
    void *where[NP] = {0}; /* the bucket view's gradients, or ours */
    for (int p = 0; ok && p < NP; p++)
        ok = ddph_model_grad_ptr(m, p, &where[p]) == DDPH_OK;
    size_t at = 0;
    for (int step = 0; ok && step < STEPS; step++) {
        ok = ddph_step_begin(ctx, &m, 1) == DDPH_OK;
        /* A backward pass: the last parameters first. */
        for (int p = NP - 1; ok && p >= 0; p--) {
            for (size_t i = 0; i < numel(p); i++)
                host[i] = value(rank, step, p, i);
            if (c->nan && rank == 0 && step == 1 && p == 2)
                host[7] = NAN;
            ok = put(where[p], host, numel(p), gpu, stream, half) &&
                 ddph_grad_ready(m, p) == DDPH_OK;
        }
        ddph_status st = ok ? ddph_step_wait(ctx) : DDPH_OK;
        if (st == DDPH_ERR_NONFINITE && c->nan && !out->message[0])
            snprintf(out->message, sizeof out->message, "%s",
                     ddph_last_error(ctx));
        else if (st != DDPH_OK)
            ok = 0;
        for (int p = 0; ok && p < NP; p++) {
            ok = get(out->v + at, where[p], numel(p), gpu, half);
            at += numel(p);
        }
        /* The optimizer: param -= 0.5 * grad, then on_step_end. */
        for (int p = 0; ok && c->params && p < NP; p++) {
            float *g = out->v + at - total;
            size_t off = 0;
            for (int q = 0; q < p; q++)
                off += numel(q);
            ok = get(host, param[p], numel(p), gpu, half);
            for (size_t i = 0; ok && i < numel(p); i++)
                host[i] -= 0.5f * g[off + i];
            ok = ok && put(param[p], host, numel(p), gpu, stream, half);
        }
        ok = ok && ddph_step_end(ctx) == DDPH_OK;
        for (int p = 0; ok && c->params && p < NP; p++) {
            ok = get(out->v + at, param[p], numel(p), gpu, half);
            at += numel(p);
        }
    }
    if (!ok && ctx)
        fprintf(stderr, "test_gpu: rank %d: %s on %s: %s\n", rank, c->name,
                gpu ? "nccl" : "mpi", ddph_last_error(ctx));
    ddph_close(ctx);
    for (int p = 0; p < NP; p++) {
        if (gpu) {
            cudaFree(grad[p]);
            cudaFree(param[p]);
        } else {
            free(grad[p]);
            free(param[p]);
        }
    }
    if (stream)
        cudaStreamDestroy(stream);
    free(host);
    free(half);
    return ok;
}
#endif

int main(int argc, char **argv)
{
#ifndef HAVE_NCCL
    (void)argc;
    (void)argv;
    printf("SKIP: this build has no nccl backend (configure found no "
           "CUDA/NCCL)\n");
    return 77;
#else
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_gpu PLUGIN_DIR [POST_LOCALSGD_SO] (the "
                        "template's qsgd.so beside it)\n");
        return 2;
    }
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *psgd1 = "[hook.powersgd]\nmatrix_approximation_rank = 1\n"
                        "start_powerSGD_iter = 2\n";
    const char *psgd4 = "[hook.powersgd]\nmatrix_approximation_rank = 4\n"
                        "start_powerSGD_iter = 2\n";
    const char *bpsgd = "[hook.batched_powersgd]\nmatrix_approximation_rank = 2\n"
                        "start_powerSGD_iter = 2\n";
    const char *lsgd = "[hook.post_localsgd]\nstart_localSGD_iter = 2\n"
                       "period = 2\n";
    const char *lsgd_so = argc == 3 ? argv[2] : NULL;
    /* The template's QSGD hook (ABI minor 6's quantizing services), built
     * beside post_localsgd.so (tests/gpu/qsgd.la, the kit's lib/). */
    char qsgd_path[1024];
    const char *qsgd_so = NULL, *slash = lsgd_so ? strrchr(lsgd_so, '/') : NULL;
    if (slash && snprintf(qsgd_path, sizeof qsgd_path, "%.*s/qsgd.so",
                          (int)(slash - lsgd_so), lsgd_so) <
                     (int)sizeof qsgd_path &&
        access(qsgd_path, R_OK) == 0)
        qsgd_so = qsgd_path;
    const gpu_case cases[] = {
        {.name = "allreduce", .hook = "allreduce", .atol = 1e-6},
        {.name = "fp16", .hook = "fp16", .atol = 2e-3},
        {.name = "bf16", .hook = "bf16", .atol = 2e-2},
        {.name = "allreduce, fp16 wrapper", .hook = "allreduce",
         .wrapper = "fp16", .atol = 2e-3},
        {.name = "allreduce, bf16 wrapper", .hook = "allreduce",
         .wrapper = "bf16", .atol = 2e-2},
        {.name = "allreduce, bucket view, own stream", .hook = "allreduce",
         .extra = "gradient_as_bucket_view = true", .own_stream = 1,
         .atol = 1e-6},
        {.name = "powersgd rank 1 (Gram-Schmidt)", .hook = "powersgd",
         .extra = psgd1, .rtol = 1e-3, .atol = 1e-4},
        {.name = "powersgd rank 4 (QR)", .hook = "powersgd", .extra = psgd4,
         .rtol = 1e-3, .atol = 1e-4},
        {.name = "powersgd rank 1, fp16 wrapper", .hook = "powersgd",
         .wrapper = "fp16", .extra = psgd1, .rtol = 1e-2, .atol = 2e-3},
        {.name = "batched_powersgd rank 2", .hook = "batched_powersgd",
         .extra = bpsgd, .rtol = 1e-3, .atol = 1e-4},
        {.name = "post_localsgd, parameter averaging", .hook = lsgd_so,
         .extra = lsgd, .params = 1, .atol = 1e-6},
        {.name = "allreduce, check_finite reports a NaN", .hook = "allreduce",
         .extra = "check_finite = true", .atol = 1e-6, .nan = 1},
        {.name = "allreduce, bf16 gradients", .hook = "allreduce",
         .bf16 = 1, .atol = 2e-2},
        {.name = "powersgd rank 1, bf16 gradients", .hook = "powersgd",
         .extra = psgd1, .bf16 = 1, .rtol = 1e-2, .atol = 2e-2},
        /* ABI minor 2: the same top-k selection, scatter and int8
         * rounding on both devices. */
        {.name = "topk 5% (radix select, scatter-add)", .hook = "topk",
         .extra = "[hook.topk]\nratio = 0.05\n", .rtol = 1e-5, .atol = 1e-6},
        {.name = "int8 (all-to-all, quantize)", .hook = "int8",
         .rtol = 1e-5, .atol = 1e-6},
        {.name = "int8, bf16 gradients", .hook = "int8", .bf16 = 1,
         .atol = 2e-2},
        /* ABI minor 6: the same draws, codes and decoding on both devices
         * (a draw that differed would move a value by a whole level). */
        {.name = "qsgd template, 4 bits (round_stochastic, pack/unpack_bits)",
         .hook = qsgd_so, .rtol = 1e-5, .atol = 1e-6},
        {.name = "qsgd template, 2 bits", .hook = qsgd_so,
         .extra = "[hook.qsgd]\nbits = 2\nchunk = 77\n", .rtol = 1e-5,
         .atol = 1e-6},
    };
    int failed = 0, ran = 0;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const gpu_case *c = &cases[k];
        if (!c->hook) {
            if (rank == 0)
                printf("SKIP: %s: no %s given\n", c->name,
                       c->extra == lsgd ? "post_localsgd.so"
                                        : "qsgd.so beside post_localsgd.so");
            continue;
        }
        result cpu = {0}, gpu = {0};
        int ok = run(argv[1], c, 0, rank, &cpu) && run(argv[1], c, 1, rank, &gpu);
        double worst = 0; /* the largest |difference| / allowed */
        size_t worst_at = 0;
        for (size_t i = 0; ok && i < cpu.n; i++) {
            if (isnan(cpu.v[i]) && isnan(gpu.v[i]))
                continue; /* a NaN went through both */
            double d = fabs((double)cpu.v[i] - gpu.v[i]);
            double allowed = c->atol + c->rtol * fabs((double)cpu.v[i]);
            if (isnan(d) || d / allowed > worst) {
                worst = isnan(d) ? INFINITY : d / allowed;
                worst_at = i;
            }
        }
        ok = ok && worst <= 1.0;
        /* The rank with the NaN reports it, the same way on both. */
        if (ok && c->nan &&
            (strcmp(cpu.message, gpu.message) != 0 ||
             (rank == 0 && !cpu.message[0]))) {
            fprintf(stderr, "test_gpu: rank %d: check_finite reports differ:\n"
                            "  mpi:  %s\n  nccl: %s\n",
                    rank, cpu.message, gpu.message);
            ok = 0;
        }
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%s: %s: GPU vs CPU over %d steps: worst difference %.3g "
                   "of the tolerance (atol %g, rtol %g) at value %zu\n",
                   ok ? "PASS" : "FAIL", c->name, STEPS, worst, c->atol,
                   c->rtol, worst_at);
        free(cpu.v);
        free(gpu.v);
        failed += !ok;
        ran++;
    }
    if (rank == 0)
        printf("%d passed, %d failed\n", ran - failed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
#endif
}
