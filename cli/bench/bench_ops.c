/* bench_ops.c: `ddphook bench ops`, see bench_ops.h. */
#include "build-config.h"

#include "bench_ops.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_common.h"
#include "device/cpu_ops.h"
#include "device/quant_ops.h"
#include "device/sign_ops.h"
#include "device/sparse_ops.h"
#include "support/util.h"

/* The elements of a chunk for the sign and chunk operations (a scale per
 * 1024 elements: 1/256 of the f32 bytes on the wire for the scales). */
#define OPS_CHUNK 1024
/* Columns of the matrix view of the buffer for GEMM, and the rank of the
 * low-rank factor (PowerSGD's shapes: M (rows x cols) times Q (cols x r)). */
#define OPS_COLS 1024
#define OPS_RANK 4

typedef struct ops_buffers {
    size_t n;     /* f32 elements of the main buffers */
    size_t k;     /* elements picked by top-k, gather and scatter-add */
    float *x, *y; /* n each */
    uint16_t *h;  /* n halves */
    int8_t *q;    /* n */
    uint8_t *bits;
    uint8_t *codes;         /* n 4-bit codes */
    float *scales, *values; /* chunks; k */
    int32_t *idx;           /* k */
    float *p;               /* rows x OPS_RANK */
    float *qmat;            /* OPS_COLS x OPS_RANK */
} ops_buffers;

typedef struct bench_op {
    const char *name;
    const char *what; /* the bytes the baseline copies */
    size_t (*bytes)(const ops_buffers *b);
    int (*run)(ops_buffers *b);
} bench_op;

static size_t f32_bytes(const ops_buffers *b) { return b->n * 4; }
static size_t k_bytes(const ops_buffers *b) { return b->k * 4; }
static size_t p_bytes(const ops_buffers *b)
{
    return b->n / OPS_COLS * OPS_RANK * 4;
}

static int op_copy(ops_buffers *b)
{
    memcpy(b->y, b->x, b->n * 4);
    return 0;
}
static int op_zero(ops_buffers *b)
{
    memset(b->y, 0, b->n * 4);
    return 0;
}
static int op_axpy(ops_buffers *b)
{
    ddph__cpu_axpy(b->n, -1.0f, b->x, b->y);
    return 0;
}
static int cast(const void *src, ddph_dtype from, void *dst, ddph_dtype to,
                size_t n, double scale)
{
    ddph_err e;
    return ddph__cpu_cast(src, from, dst, to, n, scale, &e) != DDPH_OK;
}
static int op_f32_f16(ops_buffers *b)
{
    return cast(b->x, DDPH_F32, b->h, DDPH_F16, b->n, 1.0);
}
static int op_f16_f32(ops_buffers *b)
{
    return cast(b->h, DDPH_F16, b->y, DDPH_F32, b->n, 1.0);
}
static int op_f32_bf16_scaled(ops_buffers *b)
{
    return cast(b->x, DDPH_F32, b->h, DDPH_BF16, b->n, 0.25);
}
static int op_divide(ops_buffers *b)
{
    ddph_err e;
    return ddph__cpu_divide(b->y, DDPH_F32, b->n, 3.0, &e) != DDPH_OK;
}
static int op_topk(ops_buffers *b)
{
    ddph_err e;
    return ddph__cpu_topk(b->x, b->n, b->k, b->values, b->idx, &e) != DDPH_OK;
}
static int op_gather(ops_buffers *b)
{
    ddph__cpu_gather(b->x, b->idx, b->k, b->values);
    return 0;
}
static int op_scatter_add(ops_buffers *b)
{
    ddph__cpu_scatter_add(b->y, b->idx, b->values, b->k, 0.5f);
    return 0;
}
static int op_absmax(ops_buffers *b)
{
    volatile float m = ddph__cpu_absmax(b->x, b->n);
    (void)m;
    return 0;
}
static int op_quantize(ops_buffers *b)
{
    ddph__cpu_quantize_int8(b->x, b->n, 0.1f, b->q);
    return 0;
}
static int op_dequantize(ops_buffers *b)
{
    ddph__cpu_dequantize_int8(b->q, b->n, 0.1f, 0.0f, b->y);
    return 0;
}
static int op_dequantize_beta(ops_buffers *b)
{
    ddph__cpu_dequantize_int8(b->q, b->n, 0.1f, 1.0f, b->y);
    return 0;
}
static int op_pack_signs(ops_buffers *b)
{
    ddph__cpu_pack_signs(b->x, b->n, b->bits);
    return 0;
}
static int op_unpack_signs(ops_buffers *b)
{
    ddph__cpu_unpack_signs(b->bits, b->n, OPS_CHUNK, b->scales, 0.0f, b->y);
    return 0;
}
static int op_unpack_signs_beta(ops_buffers *b)
{
    ddph__cpu_unpack_signs(b->bits, b->n, OPS_CHUNK, b->scales, 1.0f, b->y);
    return 0;
}
static int op_chunk_abs_sum(ops_buffers *b)
{
    ddph__cpu_chunk_abs_sum(b->x, b->n, OPS_CHUNK, b->scales);
    memset(b->codes, 0x5A, b->n / 2 + 1);
    return 0;
}
static int op_chunk_abs_max(ops_buffers *b)
{
    ddph__cpu_chunk_abs_max(b->x, b->n, OPS_CHUNK, b->scales);
    return 0;
}
/* QSGD's three (4 bits, 7 levels a side), on the chunk sums as scales. */
static int op_round_stochastic(ops_buffers *b)
{
    ddph__cpu_round_stochastic(ddph__simd_best(), b->x, b->n, OPS_CHUNK,
                               b->scales, 7, 42, b->q);
    return 0;
}
static int op_pack_bits(ops_buffers *b)
{
    ddph__cpu_pack_bits(b->q, b->n, 4, b->codes);
    return 0;
}
static int op_unpack_bits(ops_buffers *b)
{
    ddph__cpu_unpack_bits(ddph__simd_best(), b->codes, b->n, 4, OPS_CHUNK,
                          b->scales, 1, 0, 0.0f, b->y);
    return 0;
}
static int op_unpack_bits_beta(ops_buffers *b)
{
    ddph__cpu_unpack_bits(ddph__simd_best(), b->codes, b->n, 4, OPS_CHUNK,
                          b->scales, 1, 0, 1.0f, b->y);
    return 0;
}
static int op_gemm(ops_buffers *b)
{
    ddph_err e;
    size_t rows = b->n / OPS_COLS;
    return ddph__cpu_gemm(0, 0, rows, OPS_RANK, OPS_COLS, 1.0f, b->x, OPS_COLS,
                          b->qmat, OPS_RANK, 0.0f, b->p, OPS_RANK,
                          &e) != DDPH_OK;
}
static int op_orthogonalize(ops_buffers *b)
{
    ddph_err e;
    return ddph__cpu_orthogonalize(b->p, b->n / OPS_COLS, OPS_RANK, 1e-8,
                                   &e) != DDPH_OK;
}

static const bench_op ops[] = {
    {"copy", "f32", f32_bytes, op_copy},
    {"zero", "f32", f32_bytes, op_zero},
    {"axpy", "f32 y", f32_bytes, op_axpy},
    {"cast f32->f16", "f32 in", f32_bytes, op_f32_f16},
    {"cast f16->f32", "f32 out", f32_bytes, op_f16_f32},
    {"cast f32->bf16 x0.25", "f32 in", f32_bytes, op_f32_bf16_scaled},
    {"divide f32", "f32", f32_bytes, op_divide},
    {"topk 1%", "f32 in", f32_bytes, op_topk},
    {"gather 1%", "f32 out", k_bytes, op_gather},
    {"scatter_add 1%", "f32 in", k_bytes, op_scatter_add},
    {"absmax", "f32 in", f32_bytes, op_absmax},
    {"quantize_int8", "f32 in", f32_bytes, op_quantize},
    {"dequantize_int8", "f32 out", f32_bytes, op_dequantize},
    {"dequantize_int8 beta", "f32 out", f32_bytes, op_dequantize_beta},
    {"pack_signs", "f32 in", f32_bytes, op_pack_signs},
    {"unpack_signs", "f32 out", f32_bytes, op_unpack_signs},
    {"unpack_signs beta", "f32 out", f32_bytes, op_unpack_signs_beta},
    {"chunk_abs_sum", "f32 in", f32_bytes, op_chunk_abs_sum},
    {"chunk_abs_max", "f32 in", f32_bytes, op_chunk_abs_max},
    {"round_stochastic 4b", "f32 in", f32_bytes, op_round_stochastic},
    {"pack_bits 4b", "f32 in", f32_bytes, op_pack_bits},
    {"unpack_bits 4b", "f32 out", f32_bytes, op_unpack_bits},
    {"unpack_bits 4b beta", "f32 out", f32_bytes, op_unpack_bits_beta},
    {"gemm M x Q", "f32 M", f32_bytes, op_gemm},
    {"orthogonalize P", "f32 P", p_bytes, op_orthogonalize},
};

static void ops_free(ops_buffers *b)
{
    free(b->x);
    free(b->y);
    free(b->h);
    free(b->q);
    free(b->bits);
    free(b->codes);
    free(b->scales);
    free(b->values);
    free(b->idx);
    free(b->p);
    free(b->qmat);
}

/* Buffers filled (and so pre-faulted) with gradient-like values of both
 * signs; the indices are spread over the buffer in a scrambled order. */
static int ops_alloc(ops_buffers *b, size_t mib)
{
    memset(b, 0, sizeof *b);
    b->n = mib * 1048576 / 4;
    b->k = b->n / 100;
    size_t rows = b->n / OPS_COLS, nc = ddph__chunks(b->n, OPS_CHUNK);
    b->x = malloc(b->n * 4);
    b->y = malloc(b->n * 4);
    b->h = malloc(b->n * 2);
    b->q = malloc(b->n);
    b->bits = malloc(b->n / 8 + 1);
    b->codes = malloc(b->n / 2 + 1);
    b->scales = malloc(nc * 4 + 4);
    b->values = malloc(b->k * 4 + 4);
    b->idx = malloc(b->k * 4 + 4);
    b->p = malloc(rows * OPS_RANK * 4 + 4);
    b->qmat = malloc(OPS_COLS * OPS_RANK * 4);
    if (!b->x || !b->y || !b->h || !b->q || !b->bits || !b->codes || !b->scales ||
        !b->values || !b->idx || !b->p || !b->qmat) {
        ops_free(b);
        return 0;
    }
    for (size_t i = 0; i < b->n; i++) {
        b->x[i] = (float)((i * 2654435761u) % 100000) * 1e-3f - 50.0f;
        b->y[i] = 0.5f;
        b->q[i] = (int8_t)(i * 37);
    }
    memset(b->h, 0, b->n * 2);
    ddph__cpu_pack_signs(b->x, b->n, b->bits);
    ddph__cpu_chunk_abs_sum(b->x, b->n, OPS_CHUNK, b->scales);
    for (size_t j = 0; j < b->k; j++) {
        b->idx[j] = (int32_t)((j * 2654435761u) % b->n);
        b->values[j] = 1.0f;
    }
    for (size_t i = 0; i < rows * OPS_RANK; i++)
        b->p[i] = (float)(i % 7) - 3.0f;
    for (size_t i = 0; i < OPS_COLS * OPS_RANK; i++)
        b->qmat[i] = (float)(i % 5) - 2.0f;
    return 1;
}

int bench_ops(size_t mib, int repeats)
{
    ops_buffers b;
    if (mib < 1 || !ops_alloc(&b, mib)) {
        fprintf(stderr, "ddphook bench ops: out of memory for %zu MiB\n", mib);
        return 1;
    }
    /* The baseline copies between two buffers of its own, as large as the
     * largest bytes any operation is compared with. */
    char *from = malloc(b.n * 4), *to = malloc(b.n * 4);
    double *t_op = malloc((size_t)repeats * sizeof *t_op);
    double *t_copy = malloc((size_t)repeats * sizeof *t_copy);
    if (!from || !to || !t_op || !t_copy) {
        fprintf(stderr, "ddphook bench ops: out of memory\n");
        ops_free(&b);
        free(from);
        free(to);
        free(t_op);
        free(t_copy);
        return 1;
    }
    memset(from, 1, b.n * 4);
    memset(to, 2, b.n * 4);
    printf("CPU device operations on %zu MiB of f32 (%zu elements; chunks of "
           "%d, top-k/gather/scatter-add 1%%, GEMM %zu x %d times %d x %d),\n"
           "each against memcpy of the same bytes, timed in turn with it: "
           "x memcpy = memcpy time / op time (median of %d)\n\n",
           mib, b.n, OPS_CHUNK, b.n / OPS_COLS, OPS_COLS, OPS_COLS, OPS_RANK,
           repeats);
    printf("%-22s %-8s %10s %10s %10s %10s\n", "operation", "bytes of",
           "MiB", "ms", "GB/s", "x memcpy");
    int failed = 0;
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
        size_t bytes = ops[o].bytes(&b);
        for (int r = 0; r < repeats; r++) {
            double t0 = ddph__now();
            memcpy(to, from, bytes);
            double t1 = ddph__now();
            failed |= ops[o].run(&b);
            t_copy[r] = t1 - t0;
            t_op[r] = ddph__now() - t1;
        }
        double copy = bench_median(t_copy, repeats);
        double op = bench_median(t_op, repeats);
        printf("%-22s %-8s %10.2f %10.3f %10.2f %9.2fx\n", ops[o].name,
               ops[o].what, (double)bytes / 1048576, op * 1e3,
               (double)bytes / op / 1e9, copy / op);
    }
    free(from);
    free(to);
    free(t_op);
    free(t_copy);
    ops_free(&b);
    if (failed)
        fprintf(stderr, "ddphook bench ops: an operation failed\n");
    return failed ? 1 : 0;
}
