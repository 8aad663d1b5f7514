/* test_gpu: the nccl backend against the CPU backend on the same
 * gradients.  For each of allreduce, fp16, bf16 and allreduce under the
 * fp16 wrapper: gradients in GPU memory (backend = nccl) must equal, within
 * the hook's tolerance, what the same hook gives on host memory
 * (backend = mpi).  Exit 77 with the reason "no CUDA device" when there is
 * none (every CI machine here), or when this build has no nccl backend.
 *
 *   [mpiexec -n W] test_gpu PLUGIN_DIR */
#include "build-config.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#ifdef HAVE_NCCL
#include <cuda_runtime.h>

#define NP 4
static const int64_t shapes[NP] = {4097, 1, 65536, 300};

static float grad(int rank, int p, size_t i)
{
    return (float)((rank + 1) * ((int)((i * 7 + (size_t)p) % 13) - 6)) * 0.125f;
}

/* Runs one step of `hook` on `device` and leaves the results in out. */
static int run(const char *dir, const char *hook, const char *wrapper,
               int gpu, float **out, int rank)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/ddph-gpu-%d-%d.ini", (int)getppid(), rank);
    FILE *f = fopen(path, "w");
    fprintf(f, "[runtime]\nbackend = %s\nplugin_path = %s\nbucket_cap_mb = 0.1\n"
               "first_bucket_cap_mb = 0.05\ntimeout_s = 60\n[hook]\nname = %s\n"
               "wrapper = %s\n",
            gpu ? "nccl" : "mpi", dir, hook, wrapper);
    fclose(f);
    ddph_ctx *ctx;
    if (ddph_open(path, NULL, NULL, &ctx) != DDPH_OK)
        return 0;
    ddph_model *m;
    void *g[NP];
    int ok = ddph_model_create(ctx, "net", &m) == DDPH_OK;
    for (int p = 0; ok && p < NP; p++) {
        size_t n = (size_t)shapes[p];
        float *host = malloc(n * sizeof *host);
        for (size_t i = 0; i < n; i++)
            host[i] = grad(rank, p, i);
        if (gpu) {
            ok = cudaMalloc(&g[p], n * 4) == cudaSuccess &&
                 cudaMemcpy(g[p], host, n * 4, cudaMemcpyHostToDevice) ==
                     cudaSuccess;
            free(host);
        } else {
            g[p] = host;
        }
        ok = ok && ddph_model_add_param(m, "p", g[p], &shapes[p], 1, DDPH_F32,
                                        gpu ? DDPH_CUDA : DDPH_CPU,
                                        NULL) == DDPH_OK;
    }
    ok = ok && ddph_model_finalize(m) == DDPH_OK &&
         ddph_step_begin(ctx, &m, 1) == DDPH_OK;
    for (int p = NP - 1; ok && p >= 0; p--)
        ok = ddph_grad_ready(m, p) == DDPH_OK;
    ok = ok && ddph_step_wait(ctx) == DDPH_OK && ddph_step_end(ctx) == DDPH_OK;
    if (!ok)
        fprintf(stderr, "test_gpu: %s on %s: %s\n", hook, gpu ? "nccl" : "mpi",
                ddph_last_error(ctx));
    for (int p = 0; p < NP; p++) {
        size_t n = (size_t)shapes[p];
        out[p] = malloc(n * sizeof(float));
        if (gpu) {
            cudaMemcpy(out[p], g[p], n * 4, cudaMemcpyDeviceToHost);
            cudaFree(g[p]);
        } else {
            memcpy(out[p], g[p], n * 4);
            free(g[p]);
        }
    }
    ddph_close(ctx);
    unlink(path);
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
    if (argc != 2) {
        fprintf(stderr, "usage: test_gpu PLUGIN_DIR\n");
        return 2;
    }
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    static const struct {
        const char *hook, *wrapper;
        double tol;
    } cases[] = {{"allreduce", "none", 1e-6},
                 {"fp16", "none", 2e-3},
                 {"bf16", "none", 2e-2},
                 {"allreduce", "fp16", 2e-3}};
    int failed = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        float *cpu[NP], *gpu[NP];
        int ok = run(argv[1], cases[c].hook, cases[c].wrapper, 0, cpu, rank) &&
                 run(argv[1], cases[c].hook, cases[c].wrapper, 1, gpu, rank);
        double worst = 0;
        for (int p = 0; p < NP; p++) {
            for (size_t i = 0; ok && i < (size_t)shapes[p]; i++) {
                double d = fabs((double)cpu[p][i] - gpu[p][i]);
                worst = d > worst || isnan(d) ? d : worst;
            }
            free(cpu[p]);
            free(gpu[p]);
        }
        ok = ok && worst <= cases[c].tol;
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%s: %s wrapper %s: GPU vs CPU max |difference| %.3g "
                   "(tolerance %g)\n",
                   ok ? "PASS" : "FAIL", cases[c].hook, cases[c].wrapper,
                   worst, cases[c].tol);
        failed += !ok;
    }
    MPI_Finalize();
    return failed ? 1 : 0;
#endif
}
