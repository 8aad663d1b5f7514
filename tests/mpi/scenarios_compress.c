/* scenarios_compress.c: the scenarios of test_runtime's registry on PowerSGD, top-k and int8. */
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

void run_powersgd(void)
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
 * and without error feedback, at ranks 1, 4, 5 and 20 (the CPU's fused
 * sweep, plugins/powersgd/psgd_cpu.h, in blocks of 4 rows). */
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

void run_powersgd_blocks(void)
{
    for (size_t i = 0; i < 4; i++) {
        static const size_t ranks[4] = {1, 4, 5, 20};
        powersgd_blocks("powersgd", 1, ranks[i]);
        powersgd_blocks("powersgd", 0, ranks[i]);
        powersgd_blocks("batched_powersgd", 1, ranks[i]);
        powersgd_blocks("batched_powersgd", 0, ranks[i]);
    }
}

void run_sparse(void)
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
