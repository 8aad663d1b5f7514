/* compress_batched.c: batched_powersgd.so's algorithm, PyTorch's
 * batched_powerSGD_hook. */
#include "build-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#include "psgd.h"
#include "psgd_cpu.h"

/* The batched algorithm: the bucket, zero-padded to side x side, as one
 * matrix.  M (padded input plus error) lives in the error memory, or in
 * flat without error feedback; the passes over it go by blocks of rows,
 * so the padded copy of the input is never made whole. */
ddph_status psgd_compress(psgd *st, const ddph_bucket *b,
                          const ddph_services *s, float *in)
{
    double world = (double)s->world_size;
    size_t len = b->numel;
    size_t side = (size_t)ceil(sqrt((double)len));
    while (side * side < len)
        side++;
    while (side > 0 && (side - 1) * (side - 1) >= len)
        side--;
    /* A bucket smaller than rank x rank gets rank = side: PyTorch would
     * orthogonalise more columns than rows and produce NaN. */
    size_t sq = side * side, rank = st->rank < side ? st->rank : side;
    size_t rows = psgd_block_rows(s, side, side);
    psgd_bucket *pb = psgd_bucket_memory(s, st, b->index);
    /* flat: M without error feedback, else one block of the result */
    size_t flat_n = st->use_ef ? rows * side : sq;
    if (!pb ||
        !psgd_grow(s, &st->flat, &st->flat_cap, flat_n * sizeof(float) + 4))
        return DDPH_ERR_NOMEM;
    float *mm = st->flat;
    int fresh = 0;
    ddph_status r = DDPH_OK;
    if (st->use_ef && pb->error)
        r = psgd_fits(s, pb, b->index, "error feedback", pb->nerror, sq);
    if (!r && st->use_ef && !(r = psgd_error_memory(s, pb, sq, &fresh)))
        mm = pb->error;
    if (r)
        return r;
    st->before += (double)len;
    st->after += (double)(2 * side * rank);
    size_t n = side * rank;
    if (pb->p && !(r = psgd_fits(s, pb, b->index, "P memory", pb->np, n)))
        r = psgd_fits(s, pb, b->index, "Q memory", pb->nq, n);
    if (r)
        return r;
    pb->loaded = 0;
    /* Both sizes, whatever a loaded state held. */
    int randomize = !st->warm_start || !pb->p || pb->np != n || pb->nq != n;
    if (randomize && !(r = psgd_new_pq(s, pb, n, n)))
        r = psgd_random_q(st, s, b->index, pb->q, &n, 1);
    /* Orthogonalised with eps = 0 whatever the option says, as upstream. */
    if (!r)
        r = s->orthogonalize(s, pb->q, side, rank, 0.0);
    /* M = padded input + error, and P = M Q, a block of rows at a time;
     * rows [i, i+h) are elements [lo, lo + h*side), of which the first
     * nin are the bucket's and the rest padding. */
    for (size_t i = 0; i < side && !r; i += rows) {
        size_t h = rows < side - i ? rows : side - i;
        size_t lo = i * side, hi = lo + h * side;
        size_t nin = lo >= len ? 0 : (hi < len ? hi : len) - lo;
        if (nin)
            r = st->use_ef ? psgd_add_error(s, fresh, in + lo, mm + lo, nin)
                           : s->copy(s, mm + lo, in + lo, nin * sizeof(float),
                                     DDPH_COPY_DEVICE);
        /* padding: zero, plus the error (already there) */
        if (!r && !st->use_ef && nin < h * side)
            r = s->zero(s, mm + lo + nin, (h * side - nin) * sizeof(float));
        if (!r)
            r = s->gemm(s, 0, 0, h, rank, side, 1.0f, mm + lo, side, pb->q,
                        rank, 0.0f, pb->p + i * rank, rank);
    }
    if (!r)
        r = psgd_allreduce_as(st, s, pb->p, n, b->dtype);
    if (!r)
        r = s->orthogonalize(s, pb->p, side, rank, 0.0);
    if (!r)
        r = psgd_back_project(st, s, side, side, rank, mm, pb->p, pb->q);
    if (!r)
        r = psgd_allreduce_as(st, s, pb->q, n, b->dtype);
    if (!r)
        r = s->divide(s, pb->q, DDPH_F32, n, world);
    /* The result P Q^T: the rows wholly inside the bucket straight into
     * in (with the new error M - result) where the CPU sweep serves; the
     * others a block at a time, the new error and the bucket's part of
     * the result written from flat. */
    size_t whole =
        side && psgd_fused(s) ? len / side : 0; /* side 0: empty */
    if (whole && !r)
        r = psgd_reconstruct(st, s, whole, side, rank, pb->p, pb->q, in,
                             st->use_ef ? mm : NULL);
    for (size_t i = whole; i < side && !r; i += rows) {
        size_t h = rows < side - i ? rows : side - i;
        size_t lo = i * side, hi = lo + h * side;
        size_t nin = lo >= len ? 0 : (hi < len ? hi : len) - lo;
        float *res = st->use_ef ? st->flat : mm + lo;
        r = psgd_reconstruct(st, s, h, side, rank, pb->p + i * rank, pb->q,
                             res, st->use_ef ? mm + lo : NULL);
        if (!r && nin)
            r = s->copy(s, in + lo, res, nin * sizeof(float),
                        DDPH_COPY_DEVICE);
    }
    if (!r)
        psgd_drop_pq(s, st, pb);
    return r;
}
