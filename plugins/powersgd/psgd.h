/* psgd.h: the state PowerSGD keeps between steps, shared by the hook
 * (powersgd.c) and its checkpoints and statistics (psgd_state.c). */
#ifndef PSGD_H
#define PSGD_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

#include "rng.h"

#ifdef PSGD_BATCHED
#define HOOK_NAME "batched_powersgd"
#else
#define HOOK_NAME "powersgd"
#endif

/* error, p and q are in the bucket's memory (s->alloc): GPU memory with
 * backend = nccl. */
typedef struct psgd_bucket {
    float *error; /* NULL until the first compressed step */
    size_t nerror;
    float *p, *q; /* NULL when there is no memory to warm-start from */
    size_t np, nq;
    int loaded; /* from a checkpoint, sizes not yet checked (psgd_fits) */
} psgd_bucket;

/* One compressed tensor of a bucket. */
typedef struct matrix {
    size_t offset, n, m, r;
    size_t p_off, q_off;
} matrix;

typedef struct psgd {
    /* options */
    size_t rank;
    uint64_t start_iter;
    double min_rate;
    int use_ef, warm_start;
    double eps;
    uint64_t log_every;
    char *qinit_dir;
    /* state that a checkpoint keeps */
    uint64_t iter;
    mt19937 rng;
    uint64_t next_stats_report;
    double before, after; /* elements, over all compressed steps */
    psgd_bucket *buckets;
    int nbuckets;
    /* scratch, reused */
    float *work, *flat;
    size_t work_cap, flat_cap;
    void *wire;
    size_t wire_cap;
    matrix *mats;
    size_t *q_groups; /* each shape group's Q floats, in Q's order */
    size_t mats_cap;  /* of both */
    float *qt; /* CPU: one matrix's Q transposed, r x m */
    size_t qt_cap;
    float *host_q; /* host memory where random Qs are drawn */
    size_t host_q_cap;
} psgd;

/* The memory of bucket `index`, grown on first sight (NULL: no memory). */
psgd_bucket *psgd_bucket_memory(const ddph_services *s, psgd *st, int index);

/* A checkpoint's memory must fit the bucket it is used for: have floats
 * where the bucket needs want (DDPH_ERR_STATE, with a message, if not). */
ddph_status psgd_fits(const ddph_services *s, const psgd_bucket *pb,
                      int index, const char *what, size_t have, size_t want);

ddph_status psgd_save(void *state, const ddph_services *s, ddph_write_fn write,
                      void *sink);
ddph_status psgd_load(void *state, const ddph_services *s, ddph_read_fn read,
                      void *source);
size_t psgd_stats(void *state, ddph_stat *out, size_t max);

/* Shared by the two algorithms (powersgd.c). */
int psgd_grow(const ddph_services *s, void *pp, size_t *cap, size_t bytes);
ddph_status psgd_allreduce_as(psgd *st, const ddph_services *s, float *v,
                              size_t n, ddph_dtype wire);
ddph_status psgd_error_memory(const ddph_services *s, psgd_bucket *pb, size_t n,
                              int *fresh);
ddph_status psgd_add_error(const ddph_services *s, int fresh, const float *in,
                           float *m, size_t n);
size_t psgd_block_rows(const ddph_services *s, size_t n, size_t m);
ddph_status psgd_back_project(psgd *st, const ddph_services *s, size_t n,
                              size_t m, size_t r, const float *mm,
                              const float *p, float *q);
int psgd_fused(const ddph_services *s);
ddph_status psgd_reconstruct(psgd *st, const ddph_services *s, size_t n,
                             size_t m, size_t r, const float *p, const float *q,
                             float *out, float *err);
ddph_status psgd_new_pq(const ddph_services *s, psgd_bucket *pb, size_t np,
                        size_t nq);
void psgd_drop_pq(const ddph_services *s, psgd *st, psgd_bucket *pb);
ddph_status psgd_random_q(psgd *st, const ddph_services *s, int bucket,
                          float *q, const size_t *groups, size_t ngroups);
/* The algorithm of this plugin on f32 input in[0..numel): per tensor
 * (compress_tensor.c) or batched (compress_batched.c). */
ddph_status psgd_compress(psgd *st, const ddph_bucket *b,
                          const ddph_services *s, float *in);

#endif
