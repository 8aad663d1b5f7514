/* gpu_trainer: an llm.c-style trainer on the GPU, with ddphook's nccl
 * backend doing the data-parallel part.
 *
 * A two-layer linear model, P = X W1 W2, fits a synthetic regression
 * target (Y = X T + noise, the same T on every rank, different X per rank)
 * by SGD on the mean squared error.  Everything runs on one CUDA stream of
 * the trainer's, with cuBLAS: the forward pass, the backward pass (W2's
 * gradient first, then W1's, each marked ready as soon as it is enqueued,
 * so its bucket's reduction overlaps the rest of backward), and the
 * optimizer.  The runtime's communication stream waits for the gradients
 * through events; nothing is copied to the host but the loss.  Weights are
 * registered too, so post-local-SGD's model averaging works.
 *
 *     mpiexec -n 2 ./gpu_trainer examples/configs/gpu_powersgd.ini [STEPS]
 *
 * One GPU per rank.  Prints the loss every few steps and the runtime's
 * statistics at the end; exits 77 without a CUDA device.
 *
 *     gpu_trainer JOB.ini STEPS --host
 *
 * computes the same on the GPU but hands the runtime host copies of the
 * gradients (the job's backend = mpi): the CPU backend's run of the same
 * training, to compare the final loss with (tests/gpu/run.sh does). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/ddphook.h>

enum { BATCH = 512, IN = 256, HIDDEN = 128, OUT = 32 };
static const float LR = 0.05f;

/* Row-major C (m x n) = alpha op(A) op(B) + beta C with column-major
 * cuBLAS: C^T = op(B)^T op(A)^T. */
static int gemm(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb,
                float beta, float *c, int ldc)
{
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                       ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                       a, lda, &beta, c, ldc) == CUBLAS_STATUS_SUCCESS;
}

/* Uniform in [-scale, scale), from a per-call generator state. */
static float uniform(unsigned long long *state, float scale)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(*state >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
}

/* n values into new device memory. */
static float *upload(const float *host, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof *d) != cudaSuccess)
        return NULL;
    if (cudaMemcpy(d, host, n * sizeof *d, cudaMemcpyHostToDevice) !=
        cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* --host: the gradient g (device) copied into h for the runtime. */
static int to_host(int on_host, float *h, const float *g, size_t n,
                   cudaStream_t stream)
{
    return !on_host ||
           (cudaMemcpyAsync(h, g, n * sizeof(float), cudaMemcpyDeviceToHost,
                            stream) == cudaSuccess &&
            cudaStreamSynchronize(stream) == cudaSuccess);
}

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_trainer: no CUDA device\n");
        return 77;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_trainer JOB.ini [STEPS [--host]]\n");
        return 2;
    }
    int steps = argc > 2 ? atoi(argv[2]) : 200;
    int on_host = argc > 3 && strcmp(argv[3], "--host") == 0;
    ddph_ctx *ctx;
    if (ddph_open(argv[1], &argc, &argv, &ctx) != DDPH_OK)
        return 1; /* ddph_open has printed why */
    int rank = ddph_rank(ctx), rc = 1;
    /* The GPU the runtime chose for this rank.  --host: the mpi backend
     * chooses none; the rank modulo the GPUs seen spreads a host's ranks
     * for the trainer's own compute. */
    int device = ddph_cuda_device(ctx);
    if (device < 0)
        device = rank % count;
    if (cudaSetDevice(device) != cudaSuccess) {
        fprintf(stderr, "gpu_trainer: cudaSetDevice(%d) failed\n", device);
        ddph_close(ctx);
        return 1;
    }
    cudaStream_t stream = NULL;
    cublasHandle_t blas = NULL;
    float *x = NULL, *y = NULL, *w[2] = {0}, *g[2] = {0}, *hid = NULL,
          *res = NULL, *dhid = NULL, *hg[2] = {0};
    /* The gradients as allocated here; g and hg become where ddphook says
     * after finalize (the same, or with [runtime] gradient_as_bucket_view
     * = true their places in its buckets). */
    float *own_g[2] = {0}, *own_hg[2] = {0};
    static const int64_t shape[2][2] = {{IN, HIDDEN}, {HIDDEN, OUT}};
    size_t numel[2] = {IN * HIDDEN, HIDDEN * OUT};
    /* Data and initial weights, made on the host once. */
    float *h = malloc((size_t)BATCH * IN * sizeof *h);
    float *hy = malloc((size_t)BATCH * OUT * sizeof *hy);
    float *t = malloc((size_t)IN * OUT * sizeof *t);
    unsigned long long data = 1000 + (unsigned long long)rank, same = 7;
    if (!h || !hy || !t)
        goto out;
    for (size_t i = 0; i < (size_t)IN * OUT; i++)
        t[i] = uniform(&same, 0.1f); /* the target map, on every rank */
    for (size_t i = 0; i < (size_t)BATCH * IN; i++)
        h[i] = uniform(&data, 1.0f);
    x = upload(h, (size_t)BATCH * IN);
    for (size_t i = 0; i < (size_t)BATCH * OUT; i++) { /* Y = X T + noise */
        double v = 0;
        for (int k = 0; k < IN; k++)
            v += (double)h[i / OUT * IN + (size_t)k] * t[(size_t)k * OUT + i % OUT];
        hy[i] = (float)v + uniform(&data, 0.01f);
    }
    y = upload(hy, (size_t)BATCH * OUT);
    for (int l = 0; l < 2; l++) { /* the same start on every rank */
        unsigned long long init = 42 + (unsigned long long)l;
        for (size_t i = 0; i < numel[l]; i++)
            h[i] = uniform(&init, 1.0f / sqrtf((float)shape[l][0]));
        w[l] = upload(h, numel[l]);
        if (cudaMalloc((void **)&own_g[l], numel[l] * sizeof(float)) !=
            cudaSuccess)
            goto out;
        g[l] = own_g[l];
        if (on_host && !(hg[l] = own_hg[l] = malloc(numel[l] * sizeof(float))))
            goto out;
    }
    if (!x || !y || !w[0] || !w[1] ||
        cudaMalloc((void **)&hid, (size_t)BATCH * HIDDEN * 4) != cudaSuccess ||
        cudaMalloc((void **)&dhid, (size_t)BATCH * HIDDEN * 4) != cudaSuccess ||
        cudaMalloc((void **)&res, (size_t)BATCH * OUT * 4) != cudaSuccess ||
        cudaStreamCreate(&stream) != cudaSuccess ||
        cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gpu_trainer: CUDA setup failed\n");
        goto out;
    }
    /* The runtime enqueues its copies on our stream and waits for it. */
    ddph_model *model;
    if ((!on_host && ddph_set_stream(ctx, stream) != DDPH_OK) ||
        ddph_model_create(ctx, "linear2", &model) != DDPH_OK)
        goto out;
    for (int l = 0; l < 2; l++)
        if (ddph_model_add_param(model, l ? "w2" : "w1", on_host ? hg[l] : g[l],
                                 shape[l], 2, DDPH_F32,
                                 on_host ? DDPH_CPU : DDPH_CUDA,
                                 NULL) != DDPH_OK ||
            (!on_host && ddph_model_set_param_data(model, l, w[l]) != DDPH_OK))
            goto out;
    if (ddph_model_finalize(model) != DDPH_OK)
        goto out;
    for (int l = 0; l < 2; l++) {
        void *at;
        if (ddph_model_grad_ptr(model, l, &at) != DDPH_OK)
            goto out;
        if (on_host)
            hg[l] = at;
        else
            g[l] = at;
    }
    const float scale = 1.0f / BATCH;
    double first = -1, loss = 0;
    for (int s = 0; s < steps; s++) {
        if (ddph_step_begin(ctx, &model, 1) != DDPH_OK)
            goto out;
        /* forward: hid = X W1, res = hid W2 - Y */
        int ok = gemm(blas, 0, 0, BATCH, HIDDEN, IN, 1, x, IN, w[0], HIDDEN, 0,
                      hid, HIDDEN) &&
                 cudaMemcpyAsync(res, y, (size_t)BATCH * OUT * 4,
                                 cudaMemcpyDeviceToDevice, stream) == cudaSuccess &&
                 gemm(blas, 0, 0, BATCH, OUT, HIDDEN, 1, hid, HIDDEN, w[1], OUT,
                      -1, res, OUT);
        /* backward, last layer first: dW2 = hid^T res / B, ready at once */
        ok = ok && gemm(blas, 1, 0, HIDDEN, OUT, BATCH, scale, hid, HIDDEN, res,
                        OUT, 0, g[1], OUT);
        ok = ok && to_host(on_host, hg[1], g[1], numel[1], stream) &&
             ddph_grad_ready(model, 1) == DDPH_OK;
        /* dhid = res W2^T; dW1 = X^T dhid / B */
        ok = ok && gemm(blas, 0, 1, BATCH, HIDDEN, OUT, 1, res, OUT, w[1], OUT,
                        0, dhid, HIDDEN) &&
             gemm(blas, 1, 0, IN, HIDDEN, BATCH, scale, x, IN, dhid, HIDDEN, 0,
                  g[0], HIDDEN);
        ok = ok && to_host(on_host, hg[0], g[0], numel[0], stream) &&
             ddph_grad_ready(model, 0) == DDPH_OK;
        /* The loss, once backward is enqueued (the host waits for it). */
        float dot = 0;
        ok = ok && cublasSdot(blas, BATCH * OUT, res, 1, res, 1, &dot) ==
                       CUBLAS_STATUS_SUCCESS;
        if (!ok || ddph_step_wait(ctx) != DDPH_OK) {
            fprintf(stderr, "gpu_trainer: step %d failed: %s\n", s,
                    ddph_last_error(ctx));
            goto out;
        }
        /* SGD on the averaged gradients, then step_end (model averaging) */
        for (int l = 0; l < 2 && ok && on_host; l++)
            ok = cudaMemcpyAsync(g[l], hg[l], numel[l] * sizeof(float),
                                 cudaMemcpyHostToDevice, stream) == cudaSuccess;
        const float minus_lr = -LR;
        for (int l = 0; l < 2 && ok; l++)
            ok = cublasSaxpy(blas, (int)numel[l], &minus_lr, g[l], 1, w[l], 1) ==
                 CUBLAS_STATUS_SUCCESS;
        if (!ok || ddph_step_end(ctx) != DDPH_OK)
            goto out;
        loss = 0.5 * dot / BATCH; /* this rank's loss before the update */
        if (first < 0)
            first = loss;
        if (rank == 0 && (s % 25 == 0 || s == steps - 1))
            printf("step %4d  loss %.6f\n", s, loss);
    }
    uint64_t wire = 0;
    for (int b = 0; b < ddph_model_bucket_count(model); b++) {
        ddph_bucket_info info;
        if (ddph_model_bucket_info(model, b, &info) == DDPH_OK)
            wire += info.bytes_on_wire;
    }
    if (rank == 0)
        printf("gpu_trainer: %d ranks, loss %.6f -> %.6f over %d steps, "
               "%.0f gradient bytes sent per step (of %zu)\n",
               ddph_world_size(ctx), first, loss, steps,
               steps ? (double)wire / steps : 0.0,
               (numel[0] + numel[1]) * sizeof(float));
    rc = loss < first ? 0 : 1;
out:
    if (rc && rank == 0)
        fprintf(stderr, "gpu_trainer: %s\n", ddph_last_error(ctx));
    ddph_close(ctx);
    if (blas)
        cublasDestroy(blas);
    if (stream)
        cudaStreamDestroy(stream);
    cudaFree(x);
    cudaFree(y);
    cudaFree(hid);
    cudaFree(dhid);
    cudaFree(res);
    for (int l = 0; l < 2; l++) {
        cudaFree(w[l]);
        cudaFree(own_g[l]);
        free(own_hg[l]);
    }
    free(h);
    free(hy);
    free(t);
    return rc;
}
