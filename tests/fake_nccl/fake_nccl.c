/* fake_nccl.c: see fake_nccl.h.  Ranks are threads; one lock
 * (fake_mu, shared with fake_cuda.c) guards every communicator and
 * stream; a collective's part is an item on the rank's stream, and its
 * data moves when a stream reaches it with every rank's part enqueued
 * (fake_cuda.c runs a stream's items only when asked: GPU asynchrony). */
#include "build-config.h"

#include "fake_internal.h"

#include <cublas_v2.h>
#include <cusolverDn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

fake_script fake;
fake_record fake_seen[FAKE_MAX_RANKS];

#define R FAKE_MAX_RANKS
#define MAX_COMMS 256
#define MAX_CLIQUES 64
#define MAX_OPS 4096

enum kind { ALLREDUCE, ALLGATHER, BROADCAST, REDUCE_SCATTER };

/* One collective of a clique, by its sequence number. */
struct coll {
    struct clique *q;
    int seq, arrived, done;
    enum kind kind;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    const void *send[R];
    void *recv[R];
    struct fake_stream *stream[R];
    long pos[R];  /* where that rank's part is on its stream */
    int open[R]; /* that rank's part is still on its stream */
};

/* One send/recv pair: the k-th message from src to dst. */
struct p2p {
    struct clique *q;
    int src, dst, k, have_send, have_recv, done;
    int open_send, open_recv; /* still on their streams */
    const void *sbuf;
    void *rbuf;
    size_t bytes;
    struct fake_stream *ss, *rs;
    long ss_from, rs_from; /* each side's work before its group */
};

/* One ncclCommSplit of a clique, by its sequence number. */
struct split_round {
    struct clique *q;
    int seq, arrived, done;
    int color[R], key[R];
    struct ncclComm *child[R];
};

/* The ranks that share one communicator. */
struct clique {
    int key, nranks, joined, index;
    struct ncclComm *member[R];
    ncclResult_t error; /* struck on every member */
    int sends[R][R], recvs[R][R];
};

struct ncclComm {
    struct clique *q;
    int rank, seq, split_seq, blocking;
    int pending;
    ncclResult_t settles;
    int ended, aborted, finalizing;
    int made_by; /* the rank whose call made it */
    ncclResult_t failed; /* NCCL's asyncResult once set: for good */
    int open; /* its parts not yet completed */
    struct split_round *split_wait;
    ncclComm_t *deliver;
    /* Parts not yet on their streams: NCCL launches a nonblocking
     * enqueue's kernel from its group thread, so the part lands on the
     * stream only when the communicator settles (a group's parts, at its
     * end). */
    struct {
        fake_item it;
        struct fake_stream *s;
    } unlaunched[64];
    int nunlaunched;
    int in_call;      /* threads inside an NCCL call on it */
    pthread_t caller; /* the last to enter */
};

static struct ncclComm comms[MAX_COMMS];
static int ncomms;
static struct clique cliques[MAX_CLIQUES];
static int ncliques, next_key;
static struct coll colls[MAX_OPS];
static int ncolls;
static struct p2p p2ps[MAX_OPS];
static int np2ps;
static struct split_round rounds[MAX_CLIQUES];
static int nrounds;

static _Thread_local int group_depth;
static _Thread_local struct ncclComm *group_comm;

void fake_reset(void)
{
    pthread_mutex_lock(&fake_mu);
    memset(&fake, 0, sizeof fake);
    memset(fake_seen, 0, sizeof fake_seen);
    memset(comms, 0, sizeof comms);
    memset(cliques, 0, sizeof cliques);
    memset(colls, 0, sizeof colls);
    memset(p2ps, 0, sizeof p2ps);
    memset(rounds, 0, sizeof rounds);
    fake_cuda_reset();
    ncomms = ncliques = ncolls = np2ps = nrounds = 0;
    next_key = 0;
    pthread_mutex_unlock(&fake_mu);
    fake_my_rank = 0;
    fake_cuda_set_rank();
    group_depth = 0;
    fake.device_count = 1;
    fake.unique_id = ncclSuccess;
    fake.returns = ncclSuccess;
    fake.settles = ncclSuccess;
    fake.in_group = ncclSuccess;
    fake.child_settles = ncclSuccess;
    fake.stream_ends = cudaSuccess;
    fake.async_while_busy = ncclSuccess;
    fake.fail_with = ncclRemoteError;
}

void fake_set_rank(int rank)
{
    fake_my_rank = rank;
    fake_cuda_set_rank();
    group_depth = 0;
}

cudaError_t fake_peek_last_error(void) { return fake_last_error; }

int fake_comm_ended(ncclComm_t c) { return c->ended; }

int fake_comm_aborted(ncclComm_t c) { return c->aborted; }

int fake_comm_in_call(ncclComm_t c)
{
    pthread_mutex_lock(&fake_mu);
    int n = c->in_call;
    pthread_mutex_unlock(&fake_mu);
    return n;
}

int fake_live_comms(int rank)
{
    int live = 0;
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < ncomms; i++)
        live += comms[i].made_by == rank && !comms[i].ended;
    pthread_mutex_unlock(&fake_mu);
    return live;
}

static fake_record *seen(void) { return &fake_seen[fake_my_rank]; }

/* ---- communicators (under fake_mu) ------------------------------------------ */

static struct clique *clique_for(int key, int nranks)
{
    for (int i = 0; i < ncliques; i++)
        if (cliques[i].key == key)
            return &cliques[i];
    if (ncliques == MAX_CLIQUES || nranks > R)
        fake_die("too many communicators or ranks");
    struct clique *q = &cliques[ncliques];
    q->key = key;
    q->nranks = nranks;
    q->index = ncliques++;
    return q;
}

static struct ncclComm *new_comm(struct clique *q, int rank)
{
    if (ncomms == MAX_COMMS)
        fake_die("too many communicators");
    struct ncclComm *c = &comms[ncomms++];
    c->q = q;
    c->rank = rank;
    c->made_by = fake_my_rank;
    q->member[rank] = c;
    q->joined++;
    return c;
}

static void need_usable(ncclComm_t comm)
{
    if (!comm || comm->ended)
        fake_die("a call on an ended communicator");
}

/* NCCL: no call on a nonblocking communicator before it has settled. */
static void need_settled(ncclComm_t comm)
{
    need_usable(comm);
    if (comm->pending != 0 || comm->split_wait ||
        comm->q->joined < comm->q->nranks || comm->finalizing)
        fake_die("a call on a communicator that has not settled");
}

/* NCCL's ncclCommEnsureReady: a communicator whose asynchronous error is
 * set answers it to every call, for good. */
static ncclResult_t failure_of(ncclComm_t comm)
{
    need_usable(comm);
    return comm->failed;
}

/* A part of rank r's work done (or dropped by an abort). */
static void close_part(struct ncclComm *c, int *open)
{
    if (!*open)
        return;
    *open = 0;
    c->open--;
    pthread_cond_broadcast(&fake_cv);
}

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

/* out[i] = in_0[i] op in_1[i] op ... in rank order; MAX and MIN on floats
 * are fmaxf/fmin, as NCCL's (a NaN operand is dropped). */
#define REDUCE(T, MAXF, MINF)                                              \
    do {                                                                   \
        T *o = out;                                                        \
        for (size_t i = 0; i < count; i++) {                               \
            T acc = ((const T *)in[0])[off + i];                           \
            for (int r = 1; r < nranks; r++) {                             \
                T v = ((const T *)in[r])[off + i];                         \
                acc = op == ncclSum ? (T)(acc + v)                         \
                      : op == ncclMax ? MAXF(acc, v)                       \
                                      : MINF(acc, v);                      \
            }                                                              \
            o[i] = acc;                                                    \
        }                                                                  \
    } while (0)
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))

/* f16 and bf16 sums as NCCL's kernels do them: each partial sum in float,
 * rounded back to the type after every rank (so the order matters, as on
 * the GPU). */
static float bf16_f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f_bf16(float f) /* round to nearest even */
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* IEEE half by hand (clang 14 has no _Float16 on x86): round to nearest
 * even, subnormals exact, overflow to Inf, NaN kept quiet.  The same bits
 * as GCC's _Float16 for every half and a sample of 44M floats. */
float fake_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
             m = h & 0x3ffu;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13)
                                 : ((e + 112) << 23) | (m << 13));
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t fake_float_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and up round to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, exact scaling */
        float v;
        memcpy(&v, &a, sizeof v);
        return (uint16_t)(sign | (uint16_t)lrintf(v * 16777216.0f));
    }
    /* The exponent rebiased (127 -> 15) and the 13 bits dropped rounded
     * to nearest even. */
    a += 0xc8000fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

static void reduce_half(const void *const *in, int nranks, size_t off,
                        size_t count, ncclDataType_t type, ncclRedOp_t op,
                        void *out)
{
    if (op != ncclSum)
        fake_die("f16/bf16: only sums in the fake");
    for (size_t i = 0; i < count; i++) {
        uint16_t acc = ((const uint16_t *)in[0])[off + i];
        for (int r = 1; r < nranks; r++) {
            uint16_t v = ((const uint16_t *)in[r])[off + i];
            if (type == ncclBfloat16)
                acc = f_bf16(bf16_f(acc) + bf16_f(v));
            else
                acc = fake_float_to_f16(fake_f16_to_float(acc) +
                                         fake_f16_to_float(v));
        }
        ((uint16_t *)out)[i] = acc;
    }
}

static void reduce(const void *const *in, int nranks, size_t off,
                   size_t count, ncclDataType_t type, ncclRedOp_t op,
                   void *out)
{
    switch (type) {
    case ncclFloat32: REDUCE(float, fmaxf, fminf); break;
    case ncclFloat64: REDUCE(double, fmax, fmin); break;
    case ncclInt32: REDUCE(int32_t, IMAX, IMIN); break;
    case ncclInt64: REDUCE(int64_t, IMAX, IMIN); break;
    case ncclInt8: REDUCE(int8_t, IMAX, IMIN); break;
    case ncclUint8: REDUCE(uint8_t, IMAX, IMIN); break;
    case ncclFloat16: case ncclBfloat16:
        reduce_half(in, nranks, off, count, type, op, out);
        break;
    default: fake_die("no reduction for this type in the fake");
    }
}

static void run(struct coll *k)
{
    struct clique *q = k->q;
    int w = q->nranks;
    size_t es = type_size(k->type), bytes = k->count * es;
    if (k->kind == ALLREDUCE || k->kind == REDUCE_SCATTER) {
        size_t total = k->kind == ALLREDUCE ? k->count : k->count * (size_t)w;
        char *tmp = malloc(total * es + 1);
        if (!tmp)
            fake_die("out of memory");
        reduce(k->send, w, 0, total, k->type, k->op, tmp);
        for (int r = 0; r < w; r++)
            memmove(k->recv[r],
                    k->kind == ALLREDUCE ? tmp : tmp + (size_t)r * bytes,
                    bytes);
        free(tmp);
    } else if (k->kind == ALLGATHER) {
        for (int r = 0; r < w; r++)
            for (int i = 0; i < w; i++)
                memmove((char *)k->recv[r] + (size_t)i * bytes, k->send[i],
                        bytes);
    } else {
        for (int r = 0; r < w; r++)
            if (r != k->root)
                memmove(k->recv[r], k->send[k->root], bytes);
        memmove(k->recv[k->root], k->send[k->root], bytes);
    }
    k->done = 1;
    for (int r = 0; r < w; r++)
        close_part(q->member[r], &k->open[r]);
}

/* Rank it->rank's part of collective it->a, reached on its stream: it
 * runs once every rank has enqueued it and each peer's stream has run
 * what comes before the peer's part (the GPU runs every rank's stream by
 * itself: here, on demand).  A struck collective never runs; an aborted
 * part is dropped. */
static int coll_item(fake_item *it)
{
    struct coll *k = it->a;
    int w = k->q->nranks;
    if (!k->open[it->rank])
        return 1;
    if (k->arrived < w || k->q->error)
        return 0;
    for (int r = 0; r < w; r++)
        if (r != it->rank && !fake_drain_to(k->stream[r], k->pos[r]))
            return 0;
    if (!k->done)
        run(k);
    return 1;
}

/* A part on its stream at pos; `from`: where the work before its group
 * (or before it, alone) ends on that stream: a group's sends and
 * receives run together, after what came before on each side. */
static void landed(const fake_item *it, long pos, long from)
{
    if (it->run == coll_item) {
        struct coll *k = it->a;
        k->pos[it->rank] = pos;
        k->arrived++; /* it runs when a stream reaches it: coll_item */
        return;
    }
    struct p2p *p = it->a;
    if (it->rank) {
        p->ss_from = from;
        p->have_send = 1;
    } else {
        p->rs_from = from;
        p->have_recv = 1;
    }
}

/* The communicator's unlaunched parts onto their streams, in order. */
static void launch(struct ncclComm *c)
{
    struct fake_stream *first_s = NULL;
    long first = 0;
    for (int i = 0; i < c->nunlaunched; i++) {
        struct fake_stream *s = c->unlaunched[i].s;
        long pos = fake_push(s, &c->unlaunched[i].it);
        if (s != first_s) {
            first_s = s;
            first = pos;
        }
        landed(&c->unlaunched[i].it, pos, first);
    }
    c->nunlaunched = 0;
}

/* A part launched now (a blocking or 1-rank enqueue outside a group), or
 * when the communicator settles (answer ncclInProgress, or in a group). */
static void enqueue_part(struct ncclComm *c, struct fake_stream *s,
                         fake_item it, ncclResult_t answer)
{
    if (!group_depth && answer == ncclSuccess) {
        long pos = fake_push(s, &it);
        landed(&it, pos, pos);
        return;
    }
    if (group_depth && group_comm && group_comm != c)
        fake_die("a group over two communicators: not modelled");
    if (c->nunlaunched == 64)
        fake_die("too many parts in one group");
    c->unlaunched[c->nunlaunched].it = it;
    c->unlaunched[c->nunlaunched++].s = s;
}

static void p2p_move(struct p2p *p)
{
    memmove(p->rbuf, p->sbuf, p->bytes);
    p->done = 1;
    close_part(p->q->member[p->src], &p->open_send);
    close_part(p->q->member[p->dst], &p->open_recv);
}

/* One side of a send/recv pair: both posted, and the other side's work
 * before its group has run. */
static int p2p_item(fake_item *it)
{
    struct p2p *p = it->a;
    int sending = it->rank;
    if (!(sending ? p->open_send : p->open_recv))
        return 1;
    if (!p->have_send || !p->have_recv || p->q->error)
        return 0;
    struct fake_stream *other = sending ? p->rs : p->ss;
    long from = sending ? p->rs_from : p->ss_from;
    if (!fake_drain_to(other, from))
        return 0;
    if (!p->done)
        p2p_move(p);
    return 1;
}

/* An enqueue's answer (under fake_mu): a failed communicator's error; else
 * the script's.  An error inside a group fails the group, and NCCL's
 * group end sets it on the nonblocking communicators that had work in
 * it: here at once.  Outside a group, a nonblocking communicator of 2+
 * ranks answers ncclInProgress to every enqueue (NCCL >= 2.23 launches
 * each implicit group on a thread of its own, group.cc), settling a few
 * polls later. */
static ncclResult_t enqueue_answer(ncclComm_t comm)
{
    ncclResult_t failed = failure_of(comm);
    if (failed != ncclSuccess)
        return failed;
    need_settled(comm);
    ncclResult_t answer = group_depth ? fake.in_group : fake.returns;
    if (answer != ncclSuccess && answer != ncclInProgress && group_depth &&
        group_comm && !group_comm->blocking)
        group_comm->failed = answer;
    if (answer != ncclSuccess && answer != ncclInProgress &&
        !comm->blocking && group_depth)
        comm->failed = answer;
    if (answer == ncclSuccess && !group_depth && !comm->blocking &&
        comm->q->nranks > 1) {
        comm->pending = fake.enqueue_stalls ? -1 : 2;
        comm->settles = ncclSuccess;
        answer = ncclInProgress;
    }
    return answer;
}

/* NCCL (Thread Safety): no two threads in calls on one communicator at
 * once.  Each call opens its window with a yield; a second thread
 * entering while another is inside is counted (fake_record's
 * concurrent_calls) and named on stderr. */
static void enter(ncclComm_t c)
{
    if (!c)
        fake_die("a call on a NULL communicator");
    pthread_mutex_lock(&fake_mu);
    if (c->in_call && !pthread_equal(c->caller, pthread_self())) {
        seen()->concurrent_calls++;
        fprintf(stderr, "fake NCCL: rank %d: two threads in NCCL calls on "
                "one communicator at once (NCCL forbids it)\n", fake_my_rank);
    }
    c->in_call++;
    c->caller = pthread_self();
    pthread_mutex_unlock(&fake_mu);
    sched_yield();
}

static void leave(ncclComm_t c)
{
    pthread_mutex_lock(&fake_mu);
    c->in_call--;
    pthread_mutex_unlock(&fake_mu);
}

/* `return body;` inside enter/leave. */
#define GUARDED(comm, body)                                                 \
    do {                                                                    \
        enter(comm);                                                        \
        ncclResult_t r_ = (body);                                           \
        leave(comm);                                                        \
        return r_;                                                          \
    } while (0)

/* Rank comm->rank's part of a collective. */
static ncclResult_t post_body(ncclComm_t comm, enum kind kind, const void *send,
                         void *recv, size_t count, ncclDataType_t type,
                         ncclRedOp_t op, int root, cudaStream_t s)
{
    pthread_mutex_lock(&fake_mu);
    ncclResult_t answer = enqueue_answer(comm);
    if (answer != ncclSuccess && answer != ncclInProgress) {
        pthread_mutex_unlock(&fake_mu);
        return answer; /* refused: nothing enqueued */
    }
    struct clique *q = comm->q;
    int seq = comm->seq++;
    struct coll *k = NULL;
    for (int i = 0; i < ncolls && !k; i++)
        if (colls[i].q == q && colls[i].seq == seq)
            k = &colls[i];
    if (!k) {
        if (ncolls == MAX_OPS)
            fake_die("too many collectives");
        k = &colls[ncolls++];
        k->q = q;
        k->seq = seq;
        k->kind = kind;
        k->count = count;
        k->type = type;
        k->op = op;
        k->root = root;
        if (fake.fail_op && q->index == fake.fail_comm &&
            seq == fake.fail_op - 1)
            q->error = fake.fail_with; /* mid-collective */
    } else if (k->kind != kind || k->count != count || k->type != type ||
               k->root != root) {
        fake_die("ranks enqueued different collectives at one place");
    }
    int r = comm->rank;
    k->send[r] = send;
    k->recv[r] = recv;
    k->stream[r] = fake_as_stream(s);
    k->open[r] = 1;
    enqueue_part(comm, k->stream[r],
                 (fake_item){.run = coll_item, .a = k, .rank = r}, answer);
    comm->open++;
    seen()->enqueues++;
    fake_stream_left = fake.stream_busy;
    if (group_depth)
        group_comm = comm;
    else if (fake.returns == ncclInProgress) { /* the script's, not 2 */
        comm->pending = fake.pending;
        comm->settles = fake.settles;
    }
    pthread_mutex_unlock(&fake_mu);
    return answer;
}

static ncclResult_t post_p2p_body(ncclComm_t comm, int sending, const void *sbuf,
                             void *rbuf, size_t count, ncclDataType_t type,
                             int peer, cudaStream_t s)
{
    pthread_mutex_lock(&fake_mu);
    ncclResult_t answer = enqueue_answer(comm);
    if (answer != ncclSuccess && answer != ncclInProgress) {
        pthread_mutex_unlock(&fake_mu);
        return answer;
    }
    struct clique *q = comm->q;
    int me = comm->rank;
    int src = sending ? me : peer, dst = sending ? peer : me;
    int k = sending ? q->sends[src][dst]++ : q->recvs[src][dst]++;
    struct p2p *p = NULL;
    for (int i = 0; i < np2ps && !p; i++)
        if (p2ps[i].q == q && p2ps[i].src == src && p2ps[i].dst == dst &&
            p2ps[i].k == k)
            p = &p2ps[i];
    if (!p) {
        if (np2ps == MAX_OPS)
            fake_die("too many sends");
        p = &p2ps[np2ps++];
        p->q = q;
        p->src = src;
        p->dst = dst;
        p->k = k;
    }
    size_t bytes = count * type_size(type);
    struct fake_stream *fs = fake_as_stream(s);
    if (sending) {
        p->sbuf = sbuf;
        p->ss = fs;
        p->open_send = 1;
    } else {
        p->rbuf = rbuf;
        p->rs = fs;
        p->open_recv = 1;
    }
    enqueue_part(comm, fs,
                 (fake_item){.run = p2p_item, .a = p, .rank = sending},
                 answer);
    if (p->bytes && p->bytes != bytes)
        fake_die("a send and its receive differ in size");
    p->bytes = bytes;
    comm->open++;
    seen()->enqueues++;
    fake_stream_left = fake.stream_busy;
    if (group_depth)
        group_comm = comm;
    else if (fake.returns == ncclInProgress) { /* the script's, not 2 */
        comm->pending = fake.pending;
        comm->settles = fake.settles;
    }
    pthread_mutex_unlock(&fake_mu);
    return answer;
}

/* The GPU runs c's work by itself, without the host's asking: the
 * streams of its open parts are drained (for ncclCommFinalize and
 * ncclCommDestroy, which wait for that work). */
static void progress(struct ncclComm *c)
{
    for (int i = 0; i < ncolls; i++)
        if (colls[i].q == c->q && colls[i].open[c->rank])
            fake_drain_to(colls[i].stream[c->rank], colls[i].pos[c->rank] + 1);
    for (int i = 0; i < np2ps; i++) {
        struct p2p *p = &p2ps[i];
        if (p->q == c->q && p->src == c->rank && p->open_send)
            fake_drain_to(p->ss, LONG_MAX);
        if (p->q == c->q && p->dst == c->rank && p->open_recv)
            fake_drain_to(p->rs, LONG_MAX);
    }
}

/* Every part of c's work dropped (ncclCommAbort ends its kernels). */
static void drop_parts(struct ncclComm *c)
{
    for (int i = 0; i < ncolls; i++)
        if (colls[i].q == c->q && colls[i].open[c->rank])
            close_part(c, &colls[i].open[c->rank]);
    for (int i = 0; i < np2ps; i++) {
        struct p2p *p = &p2ps[i];
        if (p->q != c->q || p->done)
            continue;
        if (p->src == c->rank)
            close_part(c, &p->open_send);
        if (p->dst == c->rank)
            close_part(c, &p->open_recv);
    }
}

/* ---- NCCL ------------------------------------------------------------- */

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclSystemError: return "unhandled system error";
    default: return "some NCCL error";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&fake_mu);
    int key = ++next_key;
    pthread_mutex_unlock(&fake_mu);
    memcpy(id->internal, &key, sizeof key);
    return fake.unique_id;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    int key;
    memcpy(&key, id.internal, sizeof key);
    pthread_mutex_lock(&fake_mu);
    seen()->inits++;
    seen()->init_blocking = config->blocking;
    struct ncclComm *c = new_comm(clique_for(key, nranks), rank);
    c->blocking = config->blocking;
    if (fake.returns == ncclInProgress || fake.pending) {
        c->pending = fake.pending;
        c->settles = fake.settles;
    }
    *comm = c;
    pthread_mutex_unlock(&fake_mu);
    return fake.returns;
}

/* The split's children, once every rank of the parent has called it:
 * a communicator a colour, ranks ordered by key, then by parent rank. */
static void make_children(struct split_round *s)
{
    struct clique *q = s->q;
    for (int r = 0; r < q->nranks; r++) {
        if (s->color[r] == NCCL_SPLIT_NOCOLOR || s->child[r])
            continue;
        int members[R], m = 0;
        for (int i = 0; i < q->nranks; i++)
            if (s->color[i] == s->color[r])
                members[m++] = i;
        for (int i = 1; i < m; i++) /* insertion sort by (key, rank) */
            for (int j = i; j > 0 && s->key[members[j]] < s->key[members[j - 1]];
                 j--) {
                int t = members[j];
                members[j] = members[j - 1];
                members[j - 1] = t;
            }
        struct clique *child = clique_for(1000000 + ncliques, m);
        for (int i = 0; i < m; i++) {
            struct ncclComm *c = new_comm(child, i);
            c->made_by = q->member[members[i]]->made_by;
            c->blocking = 0;
            c->pending = fake.child_pending;
            c->settles = fake.child_settles;
            s->child[members[i]] = c;
        }
    }
    s->done = 1;
}

static ncclResult_t comm_split_body(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config)
{
    pthread_mutex_lock(&fake_mu);
    ncclResult_t failed = failure_of(comm);
    if (failed != ncclSuccess) {
        pthread_mutex_unlock(&fake_mu);
        return failed;
    }
    need_settled(comm);
    seen()->splits++;
    seen()->split_color = color;
    seen()->split_blocking = config->blocking;
    struct clique *q = comm->q;
    int seq = comm->split_seq++;
    struct split_round *s = NULL;
    for (int i = 0; i < nrounds && !s; i++)
        if (rounds[i].q == q && rounds[i].seq == seq)
            s = &rounds[i];
    if (!s) {
        if (nrounds == MAX_CLIQUES)
            fake_die("too many splits");
        s = &rounds[nrounds++];
        s->q = q;
        s->seq = seq;
    }
    s->color[comm->rank] = color;
    s->key[comm->rank] = key;
    comm->split_wait = s;
    comm->deliver = newcomm;
    if (++s->arrived == q->nranks)
        make_children(s);
    if (fake.returns == ncclInProgress) {
        comm->pending = fake.pending;
        comm->settles = fake.settles;
    }
    pthread_mutex_unlock(&fake_mu);
    /* Nonblocking: the child's init is a job of the parent, run on a
     * thread; *newcomm is written when it ends. */
    if (config->blocking)
        return ncclSuccess;
    return fake.returns == ncclSuccess ? ncclInProgress : fake.returns;
}

static ncclResult_t comm_getasyncerror_body(ncclComm_t comm, ncclResult_t *async)
{
    pthread_mutex_lock(&fake_mu);
    need_usable(comm);
    seen()->async_polls++;
    /* The group thread has launched: the parts land on their streams. */
    if (comm->nunlaunched && comm->pending == 0 && !comm->split_wait &&
        comm->failed == ncclSuccess && comm->settles == ncclSuccess)
        launch(comm);
    if (comm->q->error != ncclSuccess) {
        *async = comm->q->error;
    } else if (comm->failed != ncclSuccess) {
        *async = comm->failed;
    } else if (comm->split_wait) {
        /* NCCL runs the child's whole init as a job of the parent: the
         * parent is in progress until every rank has split and the
         * child has connected (or failed); then the child is delivered,
         * even a failed one, and its failure is set on the parent. */
        struct split_round *s = comm->split_wait;
        struct ncclComm *child = s->done ? s->child[comm->rank] : NULL;
        if (s->done && comm->pending == 0 && (!child || child->pending == 0)) {
            *comm->deliver = child;
            comm->split_wait = NULL;
            comm->deliver = NULL;
            if (child && child->settles != ncclSuccess)
                child->failed = comm->failed = child->settles;
            *async = comm->failed != ncclSuccess ? comm->failed
                                                 : comm->settles;
        } else {
            if (comm->pending > 0)
                comm->pending--;
            else if (child && child->pending > 0)
                child->pending--;
            *async = ncclInProgress;
        }
    } else if (comm->q->joined < comm->q->nranks) {
        *async = ncclInProgress; /* a peer has not come yet */
    } else if (comm->finalizing) {
        progress(comm);
        *async = comm->open > 0 ? ncclInProgress : ncclSuccess;
    } else if (comm->pending != 0) {
        if (comm->pending > 0)
            comm->pending--;
        *async = ncclInProgress;
    } else if (fake_stream_left != 0 && fake.async_while_busy != ncclSuccess) {
        *async = fake.async_while_busy;
    } else {
        *async = comm->settles;
    }
    pthread_mutex_unlock(&fake_mu);
    return ncclSuccess;
}

/* The abort of a parent whose split is under way stops the child's init
 * and joins its thread, which writes *newcomm as it ends: the child as
 * far as it got (a communicator of its own when the peers never came). */
static void deliver_half_made(struct ncclComm *parent)
{
    struct split_round *s = parent->split_wait;
    struct ncclComm *child = s->done ? s->child[parent->rank] : NULL;
    if (!child && s->color[parent->rank] != NCCL_SPLIT_NOCOLOR) {
        child = new_comm(clique_for(2000000 + ncliques, 2), 0);
        child->made_by = parent->made_by;
    }
    if (child)
        child->failed = ncclSystemError;
    *parent->deliver = child;
    parent->split_wait = NULL;
    parent->deliver = NULL;
}

static ncclResult_t comm_abort_body(ncclComm_t comm)
{
    pthread_mutex_lock(&fake_mu);
    need_usable(comm);
    if (comm->split_wait)
        deliver_half_made(comm);
    comm->ended = 1;
    comm->aborted = 1;
    comm->nunlaunched = 0; /* never launched */
    drop_parts(comm);
    seen()->aborts++;
    pthread_mutex_unlock(&fake_mu);
    return ncclSuccess;
}

static ncclResult_t comm_finalize_body(ncclComm_t comm)
{
    pthread_mutex_lock(&fake_mu);
    need_settled(comm);
    comm->finalizing = 1;
    seen()->finalizes++;
    pthread_mutex_unlock(&fake_mu);
    return comm->blocking ? ncclSuccess : ncclInProgress;
}

/* Without a finalize that has settled, NCCL's destroy finalizes itself,
 * blocking until the communicator's work is done: here for at most 3 s,
 * counted, so that a test sees it rather than hangs. */
static ncclResult_t comm_destroy_body(ncclComm_t comm)
{
    pthread_mutex_lock(&fake_mu);
    need_usable(comm);
    if (!comm->finalizing || comm->open > 0) {
        seen()->destroy_unfinalized++;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 3;
        while ((progress(comm), comm->open > 0) &&
               pthread_cond_timedwait(&fake_cv, &fake_mu, &until) == 0) {
        }
    }
    comm->ended = 1;
    seen()->destroys++;
    pthread_mutex_unlock(&fake_mu);
    return ncclSuccess;
}

static ncclResult_t post(ncclComm_t comm, enum kind kind, const void *send,
                         void *recv, size_t count, ncclDataType_t type,
                         ncclRedOp_t op, int root, cudaStream_t s)
{
    GUARDED(comm, post_body(comm, kind, send, recv, count, type, op, root, s));
}

static ncclResult_t post_p2p(ncclComm_t comm, int sending, const void *sbuf,
                             void *rbuf, size_t count, ncclDataType_t type,
                             int peer, cudaStream_t s)
{
    GUARDED(comm, post_p2p_body(comm, sending, sbuf, rbuf, count, type, peer,
                                s));
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config)
{
    GUARDED(comm, comm_split_body(comm, color, key, newcomm, config));
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    GUARDED(comm, comm_getasyncerror_body(comm, async));
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    GUARDED(comm, comm_abort_body(comm));
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    GUARDED(comm, comm_finalize_body(comm));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    GUARDED(comm, comm_destroy_body(comm));
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s)
{
    return post(comm, ALLREDUCE, send, recv, count, type, op, 0, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t s)
{
    return post(comm, ALLGATHER, send, recv, count, type, ncclSum, 0, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t s)
{
    return post(comm, BROADCAST, send, recv, count, type, ncclSum, root, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s)
{
    return post(comm, REDUCE_SCATTER, send, recv, count, type, op, 0, s);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, cudaStream_t s)
{
    return post_p2p(comm, 1, send, NULL, count, type, peer, s);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s)
{
    return post_p2p(comm, 0, NULL, recv, count, type, peer, s);
}

/* nccl.h declares these two without a prototype. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void)
{
    if (group_depth++ == 0) {
        group_comm = NULL;
    }
    return ncclSuccess;
}

/* On a nonblocking communicator the group goes on in the background:
 * ncclInProgress, and the communicator settles a few polls later. */
ncclResult_t ncclGroupEnd(void)
{
    if (--group_depth > 0)
        return ncclSuccess;
    struct ncclComm *c = group_comm;
    group_comm = NULL;
    if (!c)
        return ncclSuccess;
    pthread_mutex_lock(&fake_mu);
    ncclResult_t answer = fake.returns;
    if (answer == ncclInProgress) {
        c->pending = fake.pending;
        c->settles = fake.settles;
    } else if (answer == ncclSuccess && !c->blocking) {
        c->pending = 2;
        answer = ncclInProgress;
    } else if (answer == ncclSuccess) {
        launch(c);
    }
    pthread_mutex_unlock(&fake_mu);
    return answer;
}
