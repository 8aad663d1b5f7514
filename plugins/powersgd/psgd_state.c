/* psgd_state.c: PowerSGD's checkpoints (everything that shapes later
 * results: iteration, generator position, statistics, and per bucket the
 * error feedback and the P and Q memories) and its statistics. */
#include <stdlib.h>
#include <string.h>

#include "psgd.h"

#define STATE_MAGIC 0x44475350u /* "PSGD" */
#define STATE_VERSION 1u

#define PUT(x) (r = r ? r : write(sink, &(x), sizeof(x)))
#define PUTN(p, n) (r = r ? r : ((n) ? write(sink, (p), (n) * sizeof(float)) : 0))
#define GET(x) (r = r ? r : read(source, &(x), sizeof(x)))

ddph_status psgd_save(void *state, const ddph_services *s,
                             ddph_write_fn write, void *sink)
{
    (void)s;
    psgd *st = state;
    ddph_status r = DDPH_OK;
    uint32_t magic = STATE_MAGIC, version = STATE_VERSION;
    uint64_t rank = st->rank;
    int32_t mti = st->rng.mti, nb = st->nbuckets;
    PUT(magic);
    PUT(version);
    PUT(rank);
    PUT(st->iter);
    PUT(st->next_stats_report);
    PUT(st->before);
    PUT(st->after);
    PUT(st->rng.mt);
    PUT(mti);
    PUT(nb);
    for (int i = 0; i < st->nbuckets; i++) {
        const psgd_bucket *pb = &st->buckets[i];
        uint64_t ne = pb->error ? pb->nerror : UINT64_MAX;
        uint64_t np = pb->p ? pb->np : UINT64_MAX, nq = pb->q ? pb->nq : 0;
        PUT(ne);
        PUTN(pb->error, pb->error ? pb->nerror : 0);
        PUT(np);
        PUT(nq);
        PUTN(pb->p, pb->p ? pb->np : 0);
        PUTN(pb->q, pb->p ? pb->nq : 0);
    }
    return r;
}

static float *read_floats(ddph_read_fn read, void *source, uint64_t n,
                          ddph_status *r)
{
    if (*r || n > ((uint64_t)1 << 40)) {
        *r = *r ? *r : DDPH_ERR_IO;
        return NULL;
    }
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        *r = DDPH_ERR_NOMEM;
    else if (n && (*r = read(source, v, (size_t)n * sizeof *v)) != DDPH_OK) {
        free(v);
        v = NULL;
    }
    return v;
}

ddph_status psgd_load(void *state, const ddph_services *s,
                             ddph_read_fn read, void *source)
{
    psgd *st = state;
    ddph_status r = DDPH_OK;
    uint32_t magic = 0, version = 0;
    uint64_t rank = 0;
    int32_t mti = 0, nb = 0;
    GET(magic);
    GET(version);
    if (!r && (magic != STATE_MAGIC || version != STATE_VERSION)) {
        s->set_error(s, "not a " HOOK_NAME " state of version %u", STATE_VERSION);
        return DDPH_ERR_IO;
    }
    GET(rank);
    if (!r && rank != st->rank) {
        s->set_error(s, "saved with matrix_approximation_rank %llu, this job "
                        "has %zu",
                     (unsigned long long)rank, st->rank);
        return DDPH_ERR_MISMATCH;
    }
    GET(st->iter);
    GET(st->next_stats_report);
    GET(st->before);
    GET(st->after);
    GET(st->rng.mt);
    GET(mti);
    GET(nb);
    if (!r && (mti < 0 || mti > MT_N || nb < 0 || nb > 1000000))
        r = DDPH_ERR_IO;
    st->rng.mti = mti;
    for (int i = 0; i < nb && !r; i++) {
        psgd_bucket *pb = psgd_bucket_memory(s, st, i);
        if (!pb)
            return DDPH_ERR_NOMEM;
        uint64_t ne = 0, np = 0, nq = 0;
        GET(ne);
        free(pb->error);
        pb->error = NULL;
        if (!r && ne != UINT64_MAX) {
            pb->error = read_floats(read, source, ne, &r);
            pb->nerror = (size_t)ne;
        }
        GET(np);
        GET(nq);
        free(pb->p);
        free(pb->q);
        pb->p = pb->q = NULL;
        if (!r && np != UINT64_MAX) {
            pb->p = read_floats(read, source, np, &r);
            pb->q = read_floats(read, source, nq, &r);
            pb->np = (size_t)np;
            pb->nq = (size_t)nq;
        }
    }
    if (r)
        s->set_error(s, "truncated or corrupt " HOOK_NAME " state");
    return r;
}

size_t psgd_stats(void *state, ddph_stat *out, size_t max)
{
    const psgd *st = state;
    ddph_stat all[] = {
        {"compression_rate", st->after > 0 ? st->before / st->after : 0.0},
        {"elements_before", st->before},
        {"elements_after", st->after},
        {"iteration", (double)st->iter},
    };
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n;
}

