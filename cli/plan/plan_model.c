/* plan_model.c: see plan_model.h.  The algorithm choices are MPICH
 * 4.0's default selection for the nonblocking collectives the runtime
 * issues (its built-in selection table): MPI_Iallreduce by recursive
 * doubling up to 2048 bytes, for a user-defined operation, or when the
 * count is below the largest power of two <= W, else by reduce-scatter
 * (recursive halving) + allgather (recursive doubling); MPI_Iallgather by
 * recursive doubling (W a power of two, < 512 KiB gathered) or Bruck's
 * (otherwise, < 80 KiB), else a ring; MPI_Ialltoall by Bruck's (W >= 8,
 * <= 2 KiB a peer), all sends at once (<= 32 KiB a peer) or pairwise
 * exchanges; MPI_Ibcast binomial, or scatter + allgather.  Half-precision
 * sums of 32 KiB or more go round the runtime's own ring
 * (runtime/backends/mpi/mpi_allreduce.c), and so do f32 sums on more than 2 hosts of
 * one rank each where a rank's chunk is 32 KiB or more; on one host a
 * bucket's sum of 64 KiB or more is made in shared memory
 * (runtime/backends/mpi/shared_buckets.c). */
#include "build-config.h"

#include "plan_model.h"

#include <stdlib.h>
#include <string.h>

#define RING_MIN_BYTES (32.0 * 1024)   /* DDPH__MPI_RING_MIN_BYTES */
#define SHARED_MIN_BYTES (64.0 * 1024) /* shared_buckets.c */
#define PIECE_BYTES (16.0 * 1048576)   /* DDPH__MPI_PIECE_BYTES */
#define MAX_LOG 63

typedef struct step_load {
    int known;
    int cross; /* ranks of the busiest host that send across its link */
    int intra; /* some pair of the step is on one host */
} step_load;

struct plan_model {
    plan_cluster c;
    int n, pof2, rem; /* ranks; largest power of two <= n; n - pof2 */
    int *count;       /* per host, while a step's load is worked out */
    step_load exchange[MAX_LOG + 1]; /* by log2 of the distance */
    step_load pre;                   /* the non-power-of-two fold */
};

static int host_of(const plan_model *m, int rank)
{
    return rank / m->c.per_host;
}

/* A rank of the power-of-two group MPICH folds W ranks into: the first
 * 2 rem ranks pair up and the odd one of each pair stays. */
static int real_rank(const plan_model *m, int newrank)
{
    return newrank < m->rem ? 2 * newrank + 1 : newrank + m->rem;
}

static step_load count_done(plan_model *m, int intra)
{
    step_load s = {1, 0, intra};
    for (int h = 0; h < m->c.hosts; h++) {
        if (m->count[h] > s.cross)
            s.cross = m->count[h];
        m->count[h] = 0;
    }
    return s;
}

/* Recursive doubling or halving at distance d among the folded ranks. */
static step_load exchange_load(plan_model *m, int d)
{
    int lg = 0;
    while ((1 << lg) < d)
        lg++;
    step_load *s = &m->exchange[lg];
    if (!s->known) {
        int intra = 0;
        for (int nr = 0; nr < m->pof2; nr++) {
            int r = real_rank(m, nr), p = real_rank(m, nr ^ d);
            if (host_of(m, r) != host_of(m, p))
                m->count[host_of(m, r)]++;
            else
                intra = 1;
        }
        *s = count_done(m, intra);
    }
    return *s;
}

/* The fold: rank 2i sends its whole buffer to 2i + 1 (and back after). */
static step_load fold_load(plan_model *m)
{
    if (!m->pre.known) {
        int intra = 0;
        for (int i = 0; i < m->rem; i++) {
            if (host_of(m, 2 * i) != host_of(m, 2 * i + 1))
                m->count[host_of(m, 2 * i)]++;
            else
                intra = 1;
        }
        m->pre = count_done(m, intra);
    }
    return m->pre;
}

/* Every rank r sends to r + d (mod W): rings, Bruck's, pairwise.  Ranks
 * are numbered host by host, so every host sees the same load: the ranks
 * of host 0 whose r + d falls outside [0, R). */
static step_load shift_load(const plan_model *m, long d)
{
    long n = m->n, per = m->c.per_host;
    d %= n;
    step_load s = {1, 0, 0};
    if (d == 0)
        return s;
    if (m->c.hosts > 1) {
        long lo = per - d > 0 ? per - d : 0, hi = n - d < per ? n - d : per;
        s.cross = hi > lo ? (int)(hi - lo) : 0;
    }
    s.intra = s.cross < per;
    return s;
}

/* One step: `bytes` from each sending rank; `reduce` seconds of sums. */
static void step(plan_model *m, plan_cost *c, step_load s, double bytes,
                 double reduce)
{
    const plan_cluster *k = &m->c;
    double link = s.cross ? k->link_lat + s.cross * bytes / k->link_bw : 0;
    double intra = s.intra ? k->intra_lat + bytes / k->intra_bw : 0;
    c->seconds += (link > intra ? link : intra) + reduce;
    c->link_bytes += s.cross * bytes;
}

static void recursive_doubling_allreduce(plan_model *m, plan_cost *c,
                                         double bytes, double add)
{
    c->algorithm = "recursive doubling";
    if (m->rem)
        step(m, c, fold_load(m), bytes, add * bytes);
    for (int d = 1; d < m->pof2; d <<= 1)
        step(m, c, exchange_load(m, d), bytes, add * bytes);
    if (m->rem)
        step(m, c, fold_load(m), bytes, 0);
}

static void rabenseifner_allreduce(plan_model *m, plan_cost *c, double bytes,
                                   double add)
{
    c->algorithm = "reduce-scatter + allgather";
    if (m->rem)
        step(m, c, fold_load(m), bytes, add * bytes);
    double part = bytes;
    for (int d = 1; d < m->pof2; d <<= 1) { /* recursive halving */
        part /= 2;
        step(m, c, exchange_load(m, d), part, add * part);
    }
    for (int d = m->pof2 / 2; d >= 1; d >>= 1) { /* recursive doubling */
        step(m, c, exchange_load(m, d), part, 0);
        part *= 2;
    }
    if (m->rem)
        step(m, c, fold_load(m), bytes, 0);
}

static void mpich_allreduce(plan_model *m, plan_cost *c, double bytes,
                            double add, int user_op)
{
    /* Calls of at most 16 MiB, one after the other (mpi_collectives.c). */
    double left = bytes;
    do {
        double piece = left < PIECE_BYTES ? left : PIECE_BYTES;
        if (user_op || piece <= 2048 || piece / 4 < m->pof2)
            recursive_doubling_allreduce(m, c, piece, add);
        else
            rabenseifner_allreduce(m, c, piece, add);
        left -= piece;
    } while (left > 0);
}

static void ring_allreduce(plan_model *m, plan_cost *c, double bytes,
                           double add)
{
    c->algorithm = "ring (runtime)";
    double part = bytes / m->n;
    step_load s = shift_load(m, 1);
    for (int i = 0; i < m->n - 1; i++)
        step(m, c, s, part, add * part);
    for (int i = 0; i < m->n - 1; i++)
        step(m, c, s, part, 0);
}

/* The runtime's choice for an f32 sum (ring_sum in mpi_allreduce.c):
 * its ring where every host has one rank, there are more than 2, and a
 * rank's chunk is RING_MIN_BYTES or more. */
static int f32_ring(const plan_model *m, double bytes)
{
    return m->c.per_host == 1 && m->n > 2 && bytes / m->n >= RING_MIN_BYTES;
}

static void allgather(plan_model *m, plan_cost *c, double bytes)
{
    double total = bytes * m->n;
    int pow2 = m->rem == 0;
    if (pow2 && total < 524288) {
        c->algorithm = "recursive doubling";
        for (int d = 1; d < m->n; d <<= 1)
            step(m, c, exchange_load(m, d), d * bytes, 0);
    } else if (!pow2 && total < 81920) {
        c->algorithm = "Bruck";
        for (long d = 1; d < m->n; d <<= 1)
            step(m, c, shift_load(m, d),
                 (double)(d < m->n - d ? d : m->n - d) * bytes, 0);
    } else {
        c->algorithm = "ring";
        step_load s = shift_load(m, 1);
        for (int i = 0; i < m->n - 1; i++)
            step(m, c, s, bytes, 0);
    }
}

static void alltoall(plan_model *m, plan_cost *c, double bytes)
{
    if (m->n >= 8 && bytes <= 2048) {
        c->algorithm = "Bruck";
        for (long d = 1; d < m->n; d <<= 1)
            step(m, c, shift_load(m, d), bytes * (m->n / 2), 0);
    } else if (bytes <= 32768) {
        /* Every send posted at once: each host's link carries what its R
         * ranks send to the W - R ranks elsewhere. */
        c->algorithm = "all sends at once";
        int per = m->c.per_host;
        step_load s = {1, m->c.hosts > 1 ? per : 0, per > 1};
        step(m, c, s, bytes * (m->n - per), 0);
        if (per > 1) /* the intra-host copies, beside the first */
            c->seconds += (per - 2) * bytes / m->c.intra_bw;
    } else {
        c->algorithm = "pairwise";
        for (long d = 1; d < m->n; d++)
            step(m, c, shift_load(m, d), bytes, 0);
    }
}

/* Binomial tree: in each round every rank that has the data sends it on;
 * at most one of them per host crosses a link. */
static void binomial(plan_model *m, plan_cost *c, double bytes, int halving)
{
    double b = bytes;
    for (long d = m->pof2 < m->n ? 2L * m->pof2 : m->pof2; d > 1; d >>= 1) {
        if (halving)
            b /= 2;
        step_load s = shift_load(m, d / 2);
        s.cross = s.cross ? 1 : 0;
        step(m, c, s, b, 0);
    }
}

static void broadcast(plan_model *m, plan_cost *c, double bytes)
{
    int pow2 = m->rem == 0;
    if (m->n < 8 || bytes < 12288) {
        c->algorithm = "binomial";
        binomial(m, c, bytes, 0);
        return;
    }
    binomial(m, c, bytes, 1); /* the scatter */
    if (pow2 && bytes < 524288) {
        c->algorithm = "scatter + recursive doubling allgather";
        for (int d = 1; d < m->n; d <<= 1)
            step(m, c, exchange_load(m, d), d * bytes / m->n, 0);
    } else {
        c->algorithm = "scatter + ring allgather";
        step_load s = shift_load(m, 1);
        for (int i = 0; i < m->n - 1; i++)
            step(m, c, s, bytes / m->n, 0);
    }
}

/* NCCL's allreduce (GPU buckets): the cheaper of its ring and its tree,
 * as NCCL's tuner picks.  The ring takes 2 (W - 1) pipelined steps, each
 * as slow as the slowest hop, and carries 2 (W - 1) / W of the bytes
 * once across each host link each way; the tree (two binary trees over
 * the hosts, a chain of the host's GPUs) takes 2 (log2 H link hops +
 * R - 1 intra hops) of latency and carries twice the bytes out of each
 * host (up one tree, down the other). */
static void nccl_allreduce(plan_model *m, plan_cost *c, double bytes,
                           double add)
{
    const plan_cluster *k = &m->c;
    int cross = k->hosts > 1;
    double bw = cross && k->link_bw < k->intra_bw ? k->link_bw : k->intra_bw;
    double lat = cross && k->link_lat > k->intra_lat ? k->link_lat
                                                     : k->intra_lat;
    double n = m->n, share = 2 * (n - 1) / n;
    double ring = 2 * (n - 1) * lat + share * bytes / bw +
                  add * bytes * (n - 1) / n;
    int depth = 0;
    while ((1 << depth) < k->hosts)
        depth++;
    double tree = 2 * (depth * k->link_lat + (k->per_host - 1) * k->intra_lat) +
                  2 * bytes / bw + add * bytes;
    int use_tree = cross && tree < ring;
    c->algorithm = use_tree ? "NCCL tree" : "NCCL ring";
    c->seconds += use_tree ? tree : ring;
    c->link_bytes += cross ? (use_tree ? 2 * bytes : share * bytes) : 0;
}

/* NCCL's ring allgather: W - 1 pipelined steps of what each rank gives. */
static void nccl_allgather(plan_model *m, plan_cost *c, double bytes)
{
    const plan_cluster *k = &m->c;
    int cross = k->hosts > 1;
    double bw = cross && k->link_bw < k->intra_bw ? k->link_bw : k->intra_bw;
    double lat = cross && k->link_lat > k->intra_lat ? k->link_lat
                                                     : k->intra_lat;
    c->algorithm = "NCCL ring";
    c->seconds += (m->n - 1) * (lat + bytes / bw);
    c->link_bytes += cross ? (m->n - 1) * bytes : 0;
}

/* Each rank adds its 1/R slice over the R copies and writes it back into
 * the others, between an allgather of 16 bytes and a barrier. */
static void shared_allreduce(plan_model *m, plan_cost *c, double bytes)
{
    int per = m->c.per_host;
    plan_cost small = {0, 0, NULL};
    recursive_doubling_allreduce(m, &small, 16, 0);
    recursive_doubling_allreduce(m, &small, 0, 0);
    double slices = bytes * (per - 1) / per;
    c->seconds += small.seconds + 2 * slices / m->c.intra_bw +
                  slices * m->c.add_f32;
    c->algorithm = "shared memory";
}

plan_cost plan_collective(plan_model *m, plan_coll kind, double bytes)
{
    plan_cost c = {0, 0, "none (one rank)"};
    if (m->n < 2)
        return c;
    if (m->c.nccl && kind != PLAN_ALLTOALL && kind != PLAN_BROADCAST) {
        if (kind == PLAN_ALLGATHER)
            nccl_allgather(m, &c, bytes);
        else
            nccl_allreduce(m, &c, bytes,
                           kind == PLAN_ALLREDUCE_HALF ? m->c.add_half
                                                       : m->c.add_f32);
        return c;
    }
    switch (kind) {
    case PLAN_SHARED_ALLREDUCE:
        if (m->c.hosts == 1 && bytes >= SHARED_MIN_BYTES) {
            shared_allreduce(m, &c, bytes);
            break;
        }
        /* fall through - the sum is an f32 allreduce like any other */
    case PLAN_ALLREDUCE:
        if (f32_ring(m, bytes))
            ring_allreduce(m, &c, bytes, m->c.add_f32);
        else
            mpich_allreduce(m, &c, bytes, m->c.add_f32, 0);
        break;
    case PLAN_ALLREDUCE_USER:
        mpich_allreduce(m, &c, bytes, m->c.add_f32, 1);
        break;
    case PLAN_ALLREDUCE_HALF:
        if (bytes >= RING_MIN_BYTES)
            ring_allreduce(m, &c, bytes, m->c.add_half);
        else
            mpich_allreduce(m, &c, bytes, m->c.add_half, 1);
        break;
    case PLAN_ALLGATHER:
        allgather(m, &c, bytes);
        break;
    case PLAN_ALLTOALL:
        alltoall(m, &c, bytes);
        break;
    case PLAN_BROADCAST: {
        double left = bytes;
        do {
            double piece = left < PIECE_BYTES ? left : PIECE_BYTES;
            broadcast(m, &c, piece);
            left -= piece;
        } while (left > 0);
        break;
    }
    }
    return c;
}

plan_model *plan_model_new(const plan_cluster *c)
{
    if (c->hosts < 1 || c->per_host < 1)
        return NULL;
    plan_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->c = *c;
    m->n = c->hosts * c->per_host;
    m->pof2 = 1;
    while (m->pof2 * 2 <= m->n)
        m->pof2 *= 2;
    m->rem = m->n - m->pof2;
    m->count = calloc((size_t)c->hosts, sizeof *m->count);
    if (!m->count) {
        free(m);
        return NULL;
    }
    return m;
}

void plan_model_free(plan_model *m)
{
    if (m)
        free(m->count);
    free(m);
}

const plan_cluster *plan_model_cluster(const plan_model *m)
{
    return &m->c;
}

int plan_coll_parse(const char *name, plan_coll *out)
{
    static const struct {
        const char *name;
        plan_coll kind;
    } names[] = {
        {"allreduce", PLAN_ALLREDUCE},   {"allreduce-f16", PLAN_ALLREDUCE_HALF},
        {"allgather", PLAN_ALLGATHER},   {"alltoall", PLAN_ALLTOALL},
        {"broadcast", PLAN_BROADCAST},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].kind;
            return 1;
        }
    return 0;
}
