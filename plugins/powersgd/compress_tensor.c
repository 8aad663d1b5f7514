/* compress_tensor.c: powersgd.so's algorithm, PyTorch's powerSGD_hook:
 * each matrix of the bucket compressed on its own (rank r, warm start),
 * the vectors allreduced as they are. */
#include "build-config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#include "psgd.h"
#include "psgd_cpu.h"

/* The matrix of tensor v if it is compressed, else NULL; *k walks
 * st->mats, which are in bucket order. */
static const matrix *matrix_of(const psgd *st, size_t nmat, size_t *k,
                               const ddph_tensor_view *v)
{
    if (*k < nmat && st->mats[*k].offset == v->offset && v->numel)
        return &st->mats[(*k)++];
    return NULL;
}

/* The per-tensor algorithm on f32 input in[0..numel). */
ddph_status psgd_compress(psgd *st, const ddph_bucket *b,
                          const ddph_services *s, float *in)
{
    double world = (double)s->world_size;
    psgd_bucket *pb = psgd_bucket_memory(s, st, b->index);
    if (!pb)
        return DDPH_ERR_NOMEM;
    float *mm = in; /* M: the input plus the error feedback */
    int fresh = 0;
    ddph_status r = DDPH_OK;
    if (st->use_ef && pb->error)
        r = psgd_fits(s, pb, b->index, "error feedback", pb->nerror, b->numel);
    if (!r && st->use_ef && !(r = psgd_error_memory(s, pb, b->numel, &fresh)))
        mm = pb->error;
    if (r)
        return r;
    /* Split: which tensors are compressed, and the concatenation of the
     * others in bucket order. */
    if (b->ntensors > st->mats_cap) {
        matrix *m = realloc(st->mats, b->ntensors * sizeof *m);
        if (m)
            st->mats = m;
        size_t *g = m ? realloc(st->q_groups, b->ntensors * sizeof *g) : NULL;
        if (!g) {
            s->set_error(s, "out of memory");
            return DDPH_ERR_NOMEM;
        }
        st->q_groups = g;
        st->mats_cap = b->ntensors;
    }
    size_t nmat = 0, flat_n = 0;
    for (size_t t = 0; t < b->ntensors; t++) {
        const ddph_tensor_view *v = &b->tensors[t];
        size_t n = v->ndim >= 1 ? (size_t)v->shape[0] : 1;
        size_t m = n ? v->numel / n : 0;
        size_t rk = st->rank < n ? st->rank : n;
        rk = rk < m ? rk : m;
        st->before += (double)(n * m);
        if ((double)((n + m) * rk) * st->min_rate < (double)(n * m)) {
            st->mats[nmat++] = (matrix){v->offset, n, m, rk, 0, 0};
            st->after += (double)((n + m) * rk);
        } else {
            st->after += (double)(n * m);
            flat_n += v->numel;
        }
    }
    if (!psgd_grow(s, &st->flat, &st->flat_cap, flat_n * sizeof(float) + 4))
        return DDPH_ERR_NOMEM;
    /* P and Q layout: matrices grouped by shape in order of first
     * appearance, each group's Q drawn as one torch.randn (PyTorch's qs). */
    size_t np = 0, nq = 0, ngroups = 0;
    for (size_t i = 0; i < nmat; i++) {
        int first = 1;
        for (size_t j = 0; j < i; j++)
            if (st->mats[j].n == st->mats[i].n && st->mats[j].m == st->mats[i].m)
                first = 0;
        if (!first)
            continue;
        size_t group_start = nq;
        for (size_t j = i; j < nmat; j++)
            if (st->mats[j].n == st->mats[i].n && st->mats[j].m == st->mats[i].m) {
                st->mats[j].p_off = np;
                st->mats[j].q_off = nq;
                np += st->mats[j].n * st->mats[j].r;
                nq += st->mats[j].m * st->mats[j].r;
            }
        st->q_groups[ngroups++] = nq - group_start;
    }
    if (pb->p && !(r = psgd_fits(s, pb, b->index, "P memory", pb->np, np)))
        r = psgd_fits(s, pb, b->index, "Q memory", pb->nq, nq);
    if (r)
        return r;
    pb->loaded = 0;
    int randomize = !st->warm_start || !pb->p || pb->np != np || pb->nq != nq;
    if (randomize && !(r = psgd_new_pq(s, pb, np, nq)))
        r = psgd_random_q(st, s, b->index, pb->q, st->q_groups, ngroups);
    for (size_t i = 0; i < nmat && !r; i++)
        r = s->orthogonalize(s, pb->q + st->mats[i].q_off, st->mats[i].m,
                             st->mats[i].r, st->eps);
    /* M = in + error, and P = M Q for each block of rows while it is in
     * cache; the uncompressed tensors are gathered into flat. */
    size_t k = 0, pos = 0;
    for (size_t t = 0; t < b->ntensors && !r; t++) {
        const ddph_tensor_view *v = &b->tensors[t];
        const matrix *x = matrix_of(st, nmat, &k, v);
        if (!x) {
            if (st->use_ef)
                r = psgd_add_error(s, fresh, in + v->offset, mm + v->offset,
                                   v->numel);
            if (!r)
                r = s->copy(s, st->flat + pos, mm + v->offset,
                            v->numel * sizeof(float), DDPH_COPY_DEVICE);
            pos += v->numel;
            continue;
        }
        size_t rows = psgd_block_rows(s, x->n, x->m);
        for (size_t i = 0; i < x->n && !r; i += rows) {
            size_t h = rows < x->n - i ? rows : x->n - i;
            size_t at = x->offset + i * x->m;
            if (st->use_ef)
                r = psgd_add_error(s, fresh, in + at, mm + at, h * x->m);
            if (!r)
                r = s->gemm(s, 0, 0, h, x->r, x->m, 1.0f, mm + at, x->m,
                            pb->q + x->q_off, x->r, 0.0f,
                            pb->p + x->p_off + i * x->r, x->r);
        }
    }
    /* The uncompressed tensors: summed, then divided (after the sum). */
    if (!r)
        r = psgd_allreduce_as(st, s, st->flat, flat_n, b->dtype);
    if (!r)
        r = s->divide(s, st->flat, DDPH_F32, flat_n, world);
    pos = k = 0;
    for (size_t t = 0; t < b->ntensors && !r; t++) {
        const ddph_tensor_view *v = &b->tensors[t];
        if (matrix_of(st, nmat, &k, v))
            continue;
        r = s->copy(s, in + v->offset, st->flat + pos,
                    v->numel * sizeof(float), DDPH_COPY_DEVICE);
        if (!r && st->use_ef) /* error = M - result */
            r = s->axpy(s, v->numel, -1.0f, in + v->offset, mm + v->offset);
        pos += v->numel;
    }
    /* allreduce(P), orthogonalise, Q = M^T P, allreduce(Q), divide */
    if (!r)
        r = psgd_allreduce_as(st, s, pb->p, np, b->dtype);
    for (size_t i = 0; i < nmat && !r; i++)
        r = s->orthogonalize(s, pb->p + st->mats[i].p_off, st->mats[i].n,
                             st->mats[i].r, st->eps);
    for (size_t i = 0; i < nmat && !r; i++) {
        const matrix *x = &st->mats[i];
        r = psgd_back_project(st, s, x->n, x->m, x->r, mm + x->offset,
                              pb->p + x->p_off, pb->q + x->q_off);
    }
    if (!r)
        r = psgd_allreduce_as(st, s, pb->q, nq, b->dtype);
    if (!r)
        r = s->divide(s, pb->q, DDPH_F32, nq, world);
    /* The result P Q^T into in, and the new error M - result. */
    for (size_t i = 0; i < nmat && !r; i++) {
        const matrix *x = &st->mats[i];
        r = psgd_reconstruct(st, s, x->n, x->m, x->r, pb->p + x->p_off,
                             pb->q + x->q_off, in + x->offset,
                             st->use_ef ? mm + x->offset : NULL);
    }
    if (!r)
        psgd_drop_pq(s, st, pb);
    return r;
}
