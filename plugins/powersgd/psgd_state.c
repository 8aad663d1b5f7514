/* psgd_state.c: PowerSGD's checkpoints (everything that shapes later
 * results: iteration, generator position, statistics, and per bucket the
 * error feedback and the P and Q memories, copied through host memory)
 * and its statistics. */
#include <stdlib.h>
#include <string.h>

#include "psgd.h"
#include <ddphook/plugin_util.h>

#define STATE_MAGIC 0x44475350u /* "PSGD" */
#define STATE_VERSION 1u

#define PUT(x) (r = r ? r : write(sink, &(x), sizeof(x)))
#define GET(x) (r = r ? r : read(source, &(x), sizeof(x)))

/* Writes n floats of device memory v through a host copy. */
static ddph_status put_floats(const ddph_services *s, ddph_write_fn write,
                              void *sink, const float *v, size_t n)
{
    if (!n)
        return DDPH_OK;
    float *h = malloc(n * sizeof *h);
    if (!h) {
        s->set_error(s, "out of memory saving " HOOK_NAME " state");
        return DDPH_ERR_NOMEM;
    }
    ddph_status r = s->copy(s, h, v, n * sizeof *h, DDPH_COPY_TO_HOST);
    if (!r)
        r = write(sink, h, n * sizeof *h);
    free(h);
    return r;
}

ddph_status psgd_save(void *state, const ddph_services *s,
                      ddph_write_fn write, void *sink)
{
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
    for (int i = 0; i < st->nbuckets && !r; i++) {
        const psgd_bucket *pb = &st->buckets[i];
        uint64_t ne = pb->error ? pb->nerror : UINT64_MAX;
        uint64_t np = pb->p ? pb->np : UINT64_MAX, nq = pb->q ? pb->nq : 0;
        PUT(ne);
        if (!r && pb->error)
            r = put_floats(s, write, sink, pb->error, pb->nerror);
        PUT(np);
        PUT(nq);
        if (!r && pb->p)
            r = put_floats(s, write, sink, pb->p, pb->np);
        if (!r && pb->p)
            r = put_floats(s, write, sink, pb->q, pb->nq);
    }
    return r;
}

ddph_status psgd_fits(const ddph_services *s, const psgd_bucket *pb,
                      int index, const char *what, size_t have, size_t want)
{
    if (!pb->loaded || have == want)
        return DDPH_OK;
    s->set_error(s, "bucket %d: the loaded state's %s holds %zu floats; this "
                    "bucket needs %zu (a state saved with other options, or "
                    "a forged file)",
                 index, what, have, want);
    return DDPH_ERR_STATE;
}

/* Reads n floats into new device memory (NULL and *r set on failure).
 * The host copy grows a MiB at a time as the data arrives, and device
 * memory is taken only once all of it has: a forged count larger than
 * the payload fails after reading what is there, not after allocating
 * (and clearing) what the count claims. */
static float *get_floats(const ddph_services *s, ddph_read_fn read,
                         void *source, uint64_t n, ddph_status *r)
{
    if (*r || n > ((uint64_t)1 << 40)) {
        *r = *r ? *r : DDPH_ERR_IO;
        return NULL;
    }
    size_t bytes = (size_t)n * sizeof(float), got = 0;
    unsigned char *h = NULL;
    while (!*r && got < bytes) {
        size_t chunk = bytes - got < ((size_t)1 << 20) ? bytes - got
                                                       : (size_t)1 << 20;
        unsigned char *grown = realloc(h, got + chunk);
        if (!grown) {
            *r = DDPH_ERR_NOMEM;
            break;
        }
        h = grown;
        if ((*r = read(source, h + got, chunk)) == DDPH_OK)
            got += chunk;
    }
    float *v = NULL;
    if (!*r && !(v = s->alloc(s, bytes ? bytes : sizeof(float))))
        *r = DDPH_ERR_NOMEM;
    if (!*r && bytes)
        *r = s->copy(s, v, h, bytes, DDPH_COPY_FROM_HOST);
    free(h);
    if (*r) {
        s->free(s, v);
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
        pb->loaded = 1;
        s->free(s, pb->error);
        pb->error = NULL;
        if (!r && ne != UINT64_MAX) {
            pb->error = get_floats(s, read, source, ne, &r);
            pb->nerror = (size_t)ne;
        }
        GET(np);
        GET(nq);
        s->free(s, pb->p);
        s->free(s, pb->q);
        pb->p = pb->q = NULL;
        if (!r && np != UINT64_MAX) {
            pb->p = get_floats(s, read, source, np, &r);
            pb->q = get_floats(s, read, source, nq, &r);
            pb->np = (size_t)np;
            pb->nq = (size_t)nq;
            if (r) { /* never one of the two without the other */
                s->free(s, pb->p);
                s->free(s, pb->q);
                pb->p = pb->q = NULL;
            }
        }
    }
    /* The state is the file's: memories of buckets past its last go (a
     * load that replaces a longer state, as the host's rollback does). */
    for (int i = nb; !r && i < st->nbuckets; i++) {
        psgd_bucket *pb = &st->buckets[i];
        s->free(s, pb->error);
        s->free(s, pb->p);
        s->free(s, pb->q);
        memset(pb, 0, sizeof *pb);
    }
    if (!r && nb < st->nbuckets)
        st->nbuckets = nb;
    /* A failed device copy has set its own message. */
    if (r == DDPH_ERR_NOMEM)
        s->set_error(s, "out of memory loading " HOOK_NAME " state");
    else if (r && r != DDPH_ERR_BACKEND)
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
    return ddph_util_stats_put(all, sizeof all / sizeof all[0], out, max);
}

