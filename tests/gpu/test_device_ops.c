/* test_device_ops.c: every CUDA device operation of the nccl backend
 * (runtime/backends/nccl/cuda_ops.cu) against its CPU twin, on inputs that
 * reach the edges: NaN, +-Inf, subnormals, values that overflow the half
 * types, a divisor of 3 and scales other than 1, top-k ties, Gram-Schmidt
 * with near-zero columns, stochastic rounding's draws and 2/4-bit codes
 * with odd sizes and chunks, and n above 65535 x 256 so that every
 * grid-stride loop goes round more than once.  Bits must match except
 * where the definitions say otherwise (Gram-Schmidt's and a chunk's sums
 * are accumulated in another order: within a stated tolerance) and for a
 * NaN's sign and payload after arithmetic (same_values).  Exits 77,
 * saying why, without a CUDA device. */
#include "build-config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nccl/cuda_ops.h"
#include "device/cpu_ops.h"
#include "device/quant_ops.h"
#include "device/sign_ops.h"
#include "device/sparse_ops.h"

/* Past one full sweep of the largest grid (65535 blocks of 256). */
#define BIG ((size_t)65535 * 256 * 2 + 13)

static int failed;
static cudaStream_t stream;
/* top-k's and absmax's scratch pool, as the module passes its own. */
static cudaMemPool_t scratch_pool;

static void check(int ok, const char *what, const char *detail)
{
    printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", what, detail[0] ? ": " : "",
           detail);
    failed |= !ok;
}

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    printf("FAIL  %s: %s\n", what, cudaGetErrorString(e));
    failed = 1;
    return 0;
}

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    if (!cuda_ok(cudaMalloc(&d, bytes ? bytes : 1), "cudaMalloc"))
        return NULL;
    if (host)
        cuda_ok(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "copy in");
    return d;
}

static int back(void *host, const void *dev, size_t bytes)
{
    return cuda_ok(cudaStreamSynchronize(stream), "stream") &&
           cuda_ok(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost),
                   "copy out");
}

/* Deterministic floats with every kind of edge mixed in. */
static void fill(float *x, size_t n, uint32_t seed)
{
    static const float edges[] = {NAN, -NAN, INFINITY, -INFINITY, 1e-40f,
                                  -1e-45f, 70000.0f, -3.4e38f, 0.0f, -0.0f,
                                  65504.0f, 5.96e-8f};
    uint32_t h = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        h ^= h << 13;
        h ^= h >> 17;
        h ^= h << 5;
        x[i] = i % 997 == 5 ? edges[(i / 997) % 12]
                            : ((float)(h % 200001) - 100000.0f) / 1000.0f;
    }
}

/* First differing byte, or -1. */
static long first_diff(const void *a, const void *b, size_t bytes)
{
    const unsigned char *p = a, *q = b;
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != q[i])
            return (long)i;
    return -1;
}

static void same_bits(const char *what, const void *cpu, const void *gpu,
                      size_t bytes)
{
    char detail[128] = "";
    long at = first_diff(cpu, gpu, bytes);
    if (at >= 0)
        snprintf(detail, sizeof detail, "byte %ld of %zu differs", at, bytes);
    else
        snprintf(detail, sizeof detail, "%zu bytes identical", bytes);
    check(at < 0, what, detail);
}

/* Whether element i of a buffer of dtype t is a NaN. */
static int nan_at(const void *buf, int t, size_t i)
{
    if (t == DDPH_F32) {
        uint32_t b;
        memcpy(&b, (const char *)buf + i * 4, 4);
        return (b & 0x7fffffffu) > 0x7f800000u;
    }
    uint16_t h;
    memcpy(&h, (const char *)buf + i * 2, 2);
    return t == DDPH_F16 ? (h & 0x7fffu) > 0x7c00u : (h & 0x7fffu) > 0x7f80u;
}

/* The same values: identical bits, except that a NaN matches any NaN.  A
 * GPU's f32 arithmetic returns the canonical NaN (0x7FFFFFFF) where x86
 * keeps the operand's sign and payload, so a NaN that went through a
 * multiply, a divide or beta * y differs in those bits (e.g. -NaN cast to
 * f16: CPU 0xFE00, GPU 0x7E00); IEEE 754 leaves them unspecified, and so
 * do ddphook's definitions. */
static void same_values(const char *what, const void *cpu, const void *gpu,
                        size_t n, int t)
{
    size_t es = t == DDPH_F32 ? 4 : 2, nans = 0;
    long at = -1;
    for (size_t i = 0; i < n && at < 0; i++) {
        const char *p = (const char *)cpu + i * es, *q = (const char *)gpu + i * es;
        if (memcmp(p, q, es) == 0)
            continue;
        if (nan_at(cpu, t, i) && nan_at(gpu, t, i))
            nans++;
        else
            at = (long)i;
    }
    char detail[160];
    if (at >= 0)
        snprintf(detail, sizeof detail, "element %ld of %zu differs", at, n);
    else
        snprintf(detail, sizeof detail,
                 "%zu elements identical but for %zu NaNs' sign or payload",
                 n, nans);
    check(at < 0, what, detail);
}

static void casts_and_divides(const float *x, size_t n)
{
    static const int halves[] = {DDPH_F16, DDPH_BF16};
    uint16_t *cpu = malloc(n * 2), *gpu = malloc(n * 2);
    float *cpu_f = malloc(n * 4), *gpu_f = malloc(n * 4);
    float *dx = dev_copy(x, n * 4);
    uint16_t *dh = dev_copy(NULL, n * 2);
    float *df = dev_copy(NULL, n * 4);
    ddph_err e;
    for (int k = 0; k < 2 && cpu && gpu && cpu_f && gpu_f && dx && dh && df; k++) {
        char what[64];
        int t = halves[k];
        ddph__cpu_cast(x, DDPH_F32, cpu, t, n, 0.125, &e);
        cuda_ok(ddph__cuda_cast(dx, DDPH_F32, dh, t, n, 0.125, stream), "cast");
        snprintf(what, sizeof what, "cast f32 -> %s, scale 0.125",
                 t == DDPH_F16 ? "f16" : "bf16");
        if (back(gpu, dh, n * 2))
            same_values(what, cpu, gpu, n, t);
        ddph__cpu_cast(cpu, t, cpu_f, DDPH_F32, n, 3.0, &e);
        cuda_ok(ddph__cuda_cast(dh, t, df, DDPH_F32, n, 3.0, stream), "cast");
        snprintf(what, sizeof what, "cast %s -> f32, scale 3",
                 t == DDPH_F16 ? "f16" : "bf16");
        if (back(gpu_f, df, n * 4))
            same_values(what, cpu_f, gpu_f, n, DDPH_F32);
        ddph__cpu_divide(cpu, t, n, 3.0, &e);
        cuda_ok(ddph__cuda_divide(dh, t, n, 3.0, stream), "divide");
        snprintf(what, sizeof what, "divide %s by 3", t == DDPH_F16 ? "f16" : "bf16");
        if (back(gpu, dh, n * 2))
            same_values(what, cpu, gpu, n, t);
    }
    if (cpu_f && gpu_f && dx) {
        memcpy(cpu_f, x, n * 4);
        ddph__cpu_divide(cpu_f, DDPH_F32, n, 3.0, &e);
        cuda_ok(ddph__cuda_divide(dx, DDPH_F32, n, 3.0, stream), "divide");
        if (back(gpu_f, dx, n * 4))
            same_values("divide f32 by 3", cpu_f, gpu_f, n, DDPH_F32);
    }
    cudaFree(dx);
    cudaFree(dh);
    cudaFree(df);
    free(cpu);
    free(gpu);
    free(cpu_f);
    free(gpu_f);
}

static void int8_and_absmax(const float *x, size_t n)
{
    int8_t *cpu = malloc(n), *gpu = malloc(n);
    float *y_cpu = malloc(n * 4), *y_gpu = malloc(n * 4);
    float *dx = dev_copy(x, n * 4);
    int8_t *dq = dev_copy(NULL, n);
    float *dy = dev_copy(x, n * 4);
    if (cpu && gpu && y_cpu && y_gpu && dx && dq && dy) {
        ddph__cpu_quantize_int8(x, n, 0.37f, cpu);
        cuda_ok(ddph__cuda_quantize_int8(dx, n, 0.37f, (signed char *)dq, stream),
                "quantize");
        if (back(gpu, dq, n))
            same_bits("quantize_int8, scale 0.37 (NaN, Inf, overflow)", cpu, gpu, n);
        memcpy(y_cpu, x, n * 4);
        ddph__cpu_dequantize_int8(cpu, n, 0.37f, 0.5f, y_cpu);
        cuda_ok(ddph__cuda_dequantize_int8((const signed char *)dq, n, 0.37f,
                                           0.5f, dy, stream),
                "dequantize");
        if (back(y_gpu, dy, n * 4))
            same_values("dequantize_int8, beta 0.5", y_cpu, y_gpu, n, DDPH_F32);
        /* absmax without and with the NaNs (the first NaN is at 5). */
        for (int with_nan = 0; with_nan < 2; with_nan++) {
            size_t m = with_nan ? n : 5;
            float c = ddph__cpu_absmax(x, m), g = 0;
            cuda_ok((cudaError_t)ddph__cuda_absmax(dx, m, &g, scratch_pool,
                                                   stream),
                    "absmax");
            char detail[96];
            snprintf(detail, sizeof detail, "cpu %g, gpu %g", (double)c, (double)g);
            check((isnan(c) && isnan(g)) || c == g,
                  with_nan ? "absmax with NaN" : "absmax", detail);
        }
    }
    cudaFree(dx);
    cudaFree(dq);
    cudaFree(dy);
    free(cpu);
    free(gpu);
    free(y_cpu);
    free(y_gpu);
}

static void signs_and_chunks(const float *x, size_t n)
{
    size_t nbytes = (n + 7) / 8, chunk = 1000, nc = ddph__chunks(n, chunk);
    uint8_t *cpu = malloc(nbytes), *gpu = malloc(nbytes);
    float *c_out = malloc(nc * 4), *g_out = malloc(nc * 4);
    float *y_cpu = malloc(n * 4), *y_gpu = malloc(n * 4);
    float *dx = dev_copy(x, n * 4), *dy = dev_copy(x, n * 4);
    uint8_t *db = dev_copy(NULL, nbytes);
    float *dout = dev_copy(NULL, nc * 4);
    if (!cpu || !gpu || !c_out || !g_out || !y_cpu || !y_gpu || !dx || !dy ||
        !db || !dout)
        goto out;
    ddph__cpu_pack_signs(x, n, cpu);
    cuda_ok(ddph__cuda_pack_signs(dx, n, db, stream), "pack_signs");
    if (back(gpu, db, nbytes))
        same_bits("pack_signs (-0, NaN with its sign bit)", cpu, gpu, nbytes);
    ddph__cpu_chunk_abs_max(x, n, chunk, c_out);
    cuda_ok(ddph__cuda_chunk_abs(dx, n, chunk, 1, dout, stream), "chunk_abs");
    if (back(g_out, dout, nc * 4))
        same_bits("chunk_abs_max, chunks of 1000", c_out, g_out, nc * 4);
    ddph__cpu_chunk_abs_sum(x, n, chunk, c_out);
    cuda_ok(ddph__cuda_chunk_abs(dx, n, chunk, 0, dout, stream), "chunk_abs");
    if (back(g_out, dout, nc * 4)) {
        size_t bad = nc;
        for (size_t j = 0; j < nc && bad == nc; j++) {
            uint32_t a, b;
            memcpy(&a, &c_out[j], 4);
            memcpy(&b, &g_out[j], 4);
            int nan_both = isnan(c_out[j]) && isnan(g_out[j]);
            if (!nan_both && (a > b ? a - b : b - a) > 1)
                bad = j;
        }
        char detail[96];
        snprintf(detail, sizeof detail, bad == nc ? "%zu chunks within 1 ulp"
                                                  : "chunk %zu differs by more than 1 ulp",
                 bad == nc ? nc : bad);
        check(bad == nc, "chunk_abs_sum, chunks of 1000", detail);
        /* Finite scales for the unpack: the CPU's sums, as a hook would. */
        for (size_t j = 0; j < nc; j++)
            c_out[j] = isfinite(c_out[j]) ? c_out[j] / 1000 : 1.0f;
        cuda_ok(cudaMemcpy(dout, c_out, nc * 4, cudaMemcpyHostToDevice), "copy in");
        memcpy(y_cpu, x, n * 4);
        ddph__cpu_unpack_signs(cpu, n, chunk, c_out, 0.5f, y_cpu);
        cuda_ok(ddph__cuda_unpack_signs(db, n, chunk, dout, 0.5f, dy, stream),
                "unpack_signs");
        if (back(y_gpu, dy, n * 4))
            same_values("unpack_signs, beta 0.5, a scale a chunk", y_cpu, y_gpu,
                        n, DDPH_F32);
    }
out:
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(db);
    cudaFree(dout);
    free(cpu);
    free(gpu);
    free(c_out);
    free(g_out);
    free(y_cpu);
    free(y_gpu);
}

/* Chunk scales for round_stochastic: most a chunk's largest magnitude
 * over its levels, with the edges mixed in (0, NaN, +-Inf, negative, a
 * subnormal whose inverse overflows, one so small that most values clamp). */
static void quant_scales(const float *x, size_t n, size_t chunk, int levels,
                         float *scales)
{
    static const float edges[] = {0.0f, NAN, INFINITY, -1.0f, 1e-40f, 1e-3f};
    size_t nc = ddph__chunks(n, chunk);
    ddph__cpu_chunk_abs_max(x, n, chunk, scales);
    for (size_t j = 0; j < nc; j++)
        scales[j] = j % 5 == 3 ? edges[(j / 5) % 6]
                    : isfinite(scales[j]) ? scales[j] / (float)levels
                                          : 1000.0f;
}

/* round_stochastic, pack_bits and unpack_bits bit for bit against
 * quant_ops.c's portable path (the definition), on n elements in chunks
 * of `chunk`; the codes a GPU rank sends must be the ones a CPU rank
 * would. */
static void quant_case(const float *x, size_t n, size_t chunk, int bits,
                       int levels, uint64_t seed)
{
    size_t nc = ddph__chunks(n, chunk), nbytes = (n * (size_t)bits + 7) / 8;
    float *scales = malloc(nc * 4), *y_cpu = malloc(n * 4),
          *y_gpu = malloc(n * 4);
    int8_t *q_cpu = malloc(n), *q_gpu = malloc(n);
    uint8_t *p_cpu = malloc(nbytes), *p_gpu = malloc(nbytes);
    float *dx = dev_copy(x, n * 4), *dy = dev_copy(x, n * 4), *ds = NULL;
    int8_t *dq = dev_copy(NULL, n);
    uint8_t *dp = dev_copy(NULL, nbytes);
    if (scales)
        quant_scales(x, n, chunk, levels, scales);
    ds = scales ? dev_copy(scales, nc * 4) : NULL;
    char what[160];
    if (!scales || !y_cpu || !y_gpu || !q_cpu || !q_gpu || !p_cpu || !p_gpu ||
        !dx || !dy || !ds || !dq || !dp)
        goto out;
    ddph__cpu_round_stochastic(DDPH_SIMD_SCALAR, x, n, chunk, scales, levels,
                               seed, q_cpu);
    cuda_ok(ddph__cuda_round_stochastic(dx, n, chunk, ds, levels, seed,
                                        (signed char *)dq, stream),
            "round_stochastic");
    snprintf(what, sizeof what, "round_stochastic, n %zu, chunks of %zu, "
             "levels %d (NaN, Inf, edge scales)", n, chunk, levels);
    if (back(q_gpu, dq, n))
        same_bits(what, q_cpu, q_gpu, n);
    ddph__cpu_pack_bits(q_cpu, n, bits, p_cpu);
    cuda_ok(ddph__cuda_pack_bits((const signed char *)dq, n, bits, dp, stream),
            "pack_bits");
    snprintf(what, sizeof what, "pack_bits, %d bits, n %zu", bits, n);
    if (back(p_gpu, dp, nbytes))
        same_bits(what, p_cpu, p_gpu, nbytes);
    /* Unpacked from the CPU's bytes: beta 0 (y only written, its NaNs
     * gone), then beta 0.5 over x (NaNs through arithmetic). */
    cuda_ok(cudaMemcpy(dp, p_cpu, nbytes, cudaMemcpyHostToDevice), "copy in");
    for (int with_beta = 0; with_beta < 2; with_beta++) {
        float beta = with_beta ? 0.5f : 0.0f;
        memcpy(y_cpu, x, n * 4);
        cuda_ok(cudaMemcpy(dy, x, n * 4, cudaMemcpyHostToDevice), "copy in");
        ddph__cpu_unpack_bits(DDPH_SIMD_SCALAR, p_cpu, n, bits, chunk, scales,
                              1, 0, beta, y_cpu);
        cuda_ok(ddph__cuda_unpack_bits(dp, n, bits, chunk, ds, 1, 0, beta, dy,
                                       stream),
                "unpack_bits");
        snprintf(what, sizeof what, "unpack_bits, %d bits, n %zu, beta %g",
                 bits, n, (double)beta);
        if (back(y_gpu, dy, n * 4)) {
            if (with_beta)
                same_values(what, y_cpu, y_gpu, n, DDPH_F32);
            else
                same_bits(what, y_cpu, y_gpu, n * 4);
        }
    }
out:
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(ds);
    cudaFree(dq);
    cudaFree(dp);
    free(scales);
    free(y_cpu);
    free(y_gpu);
    free(q_cpu);
    free(q_gpu);
    free(p_cpu);
    free(p_gpu);
}

/* Odd sizes and chunks, so that chunks and bytes end mid-way; the seed's
 * high word set, so that both halves of it count. */
static void quant_ops(const float *x, size_t n)
{
    const uint64_t seed = 0x9e3779b97f4a7c15ull;
    quant_case(x, n, 1000, 4, 7, seed);
    quant_case(x, n, 4097, 2, 1, seed ^ 1);
    quant_case(x, 1001, 333, 4, 127, seed + 2);
    quant_case(x, 7, 3, 2, 1, seed + 3);
    quant_case(x, 1, 1, 4, 5, 0);
}

/* Ties: many elements of one magnitude straddle the k-th place. */
static void topk_gather_scatter(size_t n)
{
    size_t k = n / 100;
    float *x = malloc(n * 4);
    float *cv = malloc(k * 4), *gv = malloc(k * 4), *cy = calloc(n, 4),
          *gy = malloc(n * 4);
    int32_t *ci = malloc(k * 4), *gi = malloc(k * 4);
    float *dx = NULL, *dv = NULL, *dy = NULL;
    int32_t *di = NULL;
    if (!x || !cv || !gv || !cy || !gy || !ci || !gi)
        goto out;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 7919) % 200) * (i % 2 ? -0.5f : 0.5f);
    dx = dev_copy(x, n * 4);
    dv = dev_copy(NULL, k * 4);
    di = dev_copy(NULL, k * 4);
    dy = dev_copy(cy, n * 4);
    ddph_err e;
    if (!dx || !dv || !di || !dy || ddph__cpu_topk(x, n, k, cv, ci, &e) != DDPH_OK)
        goto out;
    cuda_ok(ddph__cuda_topk(dx, n, k, dv, di, scratch_pool, stream), "topk");
    if (back(gi, di, k * 4) && back(gv, dv, k * 4)) {
        same_bits("topk 1% with ties: indices", ci, gi, k * 4);
        same_bits("topk 1% with ties: values", cv, gv, k * 4);
    }
    ddph__cpu_scatter_add(cy, ci, cv, k, 2.0f);
    cuda_ok(ddph__cuda_scatter_add(dy, di, dv, k, 2.0f, stream), "scatter_add");
    if (back(gy, dy, n * 4))
        same_bits("scatter_add of the selection, alpha 2", cy, gy, n * 4);
    ddph__cpu_gather(x, ci, k, cv);
    cuda_ok(ddph__cuda_gather(dx, di, k, dv, stream), "gather");
    if (back(gv, dv, k * 4))
        same_bits("gather of the selection", cv, gv, k * 4);
out:
    cudaFree(dx);
    cudaFree(dv);
    cudaFree(di);
    cudaFree(dy);
    free(x);
    free(cv);
    free(gv);
    free(cy);
    free(gy);
    free(ci);
    free(gi);
}

/* Top-k's other shapes: values only and indices only (the selection then
 * keeps its indices in scratch), k = 1 and k = n, tiny n, and the edge
 * values of fill() (NaN ranks above +Inf). */
static void topk_edges(const float *x)
{
    static const size_t shapes[][2] = {{1, 1}, {5, 2}, {1000, 1},
                                       {1000, 1000}, {70001, 700}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        size_t n = shapes[s][0], k = shapes[s][1];
        float *cv = malloc(k * 4), *gv = malloc(k * 4);
        int32_t *ci = malloc(k * 4), *gi = malloc(k * 4);
        float *dx = dev_copy(x, n * 4), *dv = dev_copy(NULL, k * 4);
        int32_t *di = dev_copy(NULL, k * 4);
        ddph_err e;
        char what[96];
        if (cv && gv && ci && gi && dx && dv && di &&
            ddph__cpu_topk(x, n, k, cv, ci, &e) == DDPH_OK) {
            snprintf(what, sizeof what, "topk n %zu k %zu, values only", n, k);
            if (cuda_ok(ddph__cuda_topk(dx, n, k, dv, NULL, scratch_pool,
                                        stream),
                        what) &&
                back(gv, dv, k * 4))
                same_bits(what, cv, gv, k * 4);
            snprintf(what, sizeof what, "topk n %zu k %zu, indices only", n, k);
            if (cuda_ok(ddph__cuda_topk(dx, n, k, NULL, di, scratch_pool,
                                        stream),
                        what) &&
                back(gi, di, k * 4))
                same_bits(what, ci, gi, k * 4);
        }
        cudaFree(dx);
        cudaFree(dv);
        cudaFree(di);
        free(cv);
        free(gv);
        free(ci);
        free(gi);
    }
}

/* The copy-back's batched copies: 70 of them (two launches), of every
 * alignment and of lengths 0 to over a grid's sweep, against memcpy. */
static void copy_batch(void)
{
    enum { N = 70 };
    size_t total = 0, bytes[N], at[N];
    for (int i = 0; i < N; i++) {
        bytes[i] = i == 69 ? (size_t)65535 * 256 * 2 + 5 : (size_t)(i * 37 % 1000);
        at[i] = total + (size_t)(i % 4);
        total = at[i] + bytes[i] + 16;
    }
    unsigned char *host = malloc(total), *want = calloc(total, 1),
                  *got = malloc(total);
    unsigned char *dsrc = NULL, *ddst = NULL;
    if (host && want && got) {
        for (size_t i = 0; i < total; i++)
            host[i] = (unsigned char)(i * 131 + 7);
        dsrc = dev_copy(host, total);
        ddst = dev_copy(NULL, total);
    }
    if (dsrc && ddst && cuda_ok(cudaMemset(ddst, 0, total), "cudaMemset")) {
        void *dst[N];
        const void *src[N];
        for (int i = 0; i < N; i++) {
            /* Each copy lands 3 bytes further on than it starts. */
            src[i] = dsrc + at[i];
            dst[i] = ddst + at[i] + 3;
            memcpy(want + at[i] + 3, host + at[i], bytes[i]);
        }
        cuda_ok(ddph__cuda_copy_batch(dst, src, bytes, N, stream), "copy_batch");
        if (back(got, ddst, total))
            same_bits("copy_batch, 70 copies of every alignment", want, got,
                      total);
        /* And aligned to 16, lengths of 16s: the 16-byte path. */
        size_t bytes16[N];
        memset(want, 0, total);
        cuda_ok(cudaMemset(ddst, 0, total), "cudaMemset");
        for (int i = 0; i < N; i++) {
            size_t from = at[i] / 16 * 16;
            src[i] = dsrc + from;
            dst[i] = ddst + from;
            bytes16[i] = bytes[i] / 16 * 16;
            memcpy(want + from, host + from, bytes16[i]);
        }
        cuda_ok(ddph__cuda_copy_batch(dst, src, bytes16, N, stream),
                "copy_batch");
        if (back(got, ddst, total))
            same_bits("copy_batch, 70 copies aligned to 16 bytes", want, got,
                      total);
    }
    cudaFree(dsrc);
    cudaFree(ddst);
    free(host);
    free(want);
    free(got);
}

/* Near-zero columns: the norm is 0 or tiny, eps decides. */
static void gram_schmidt(void)
{
    enum { R = 300, C = 6 };
    float a[R * C], g[R * C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            a[i * C + j] = j == 2 ? 0.0f
                           : j == 4 ? 1e-30f * (float)(i % 3)
                                    : sinf((float)(i * (j + 1))) + (float)j;
    float *d = dev_copy(a, sizeof a);
    ddph_err e;
    if (!d || ddph__cpu_orthogonalize(a, R, C, 1e-8, &e) != DDPH_OK)
        goto out;
    cuda_ok(ddph__cuda_gram_schmidt(d, R, C, 1e-8, stream), "gram_schmidt");
    if (back(g, d, sizeof g)) {
        double worst = 0;
        for (int i = 0; i < R * C; i++) {
            if (isnan(a[i]) && isnan(g[i]))
                continue;
            double diff = fabs((double)a[i] - (double)g[i]);
            worst = diff > worst || diff != diff ? diff : worst;
        }
        char detail[96];
        snprintf(detail, sizeof detail, "max |cpu - gpu| %.3g (bound 1e-5)", worst);
        check(worst <= 1e-5, "gram_schmidt, a zero and a 1e-30 column", detail);
    }
out:
    cudaFree(d);
}

/* top-k's and absmax's scratch comes from the pool they are given (the
 * module's own): the device's default pool, the trainer's, never served
 * a byte of it. */
static void default_pool_untouched(void)
{
    int dev = 0;
    cudaMemPool_t pool;
    uint64_t high = 0;
    if (!cuda_ok(cudaGetDevice(&dev), "cudaGetDevice") ||
        !cuda_ok(cudaDeviceGetDefaultMemPool(&pool, dev),
                 "cudaDeviceGetDefaultMemPool") ||
        !cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh,
                                         &high),
                 "cudaMemPoolGetAttribute"))
        return;
    char detail[96];
    snprintf(detail, sizeof detail, "it served up to %llu bytes",
             (unsigned long long)high);
    check(high == 0, "topk and absmax leave the default memory pool unused",
          detail);
}

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIP: test_device_ops: no CUDA device (%s)\n",
               cudaGetErrorString(cudaGetLastError()));
        return 77;
    }
    if (!cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate"))
        return 1;
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    if (!cuda_ok(cudaGetDevice(&props.location.id), "cudaGetDevice") ||
        !cuda_ok(cudaMemPoolCreate(&scratch_pool, &props), "cudaMemPoolCreate"))
        return 1;
    float *x = malloc(BIG * sizeof *x);
    if (!x)
        return 1;
    fill(x, BIG, 1);
    printf("test_device_ops: CUDA against CPU, n = %zu (2 sweeps of the "
           "largest grid + 13)\n", (size_t)BIG);
    casts_and_divides(x, BIG);
    int8_and_absmax(x, BIG);
    signs_and_chunks(x, BIG);
    quant_ops(x, BIG);
    topk_gather_scatter(BIG);
    topk_edges(x);
    default_pool_untouched();
    gram_schmidt();
    copy_batch();
    free(x);
    cudaStreamDestroy(stream);
    cudaMemPoolDestroy(scratch_pool);
    printf("%s\n", failed ? "test_device_ops: FAILED" : "test_device_ops: all passed");
    return failed ? 1 : 0;
}
