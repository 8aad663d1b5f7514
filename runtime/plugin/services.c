/* services.c: see services.h.  Every service that fails writes its message
 * into the instance's per-call message, so a plugin only has to return the
 * status it got. */
#include "build-config.h"

#include "plugin/services.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/services_common.h"

static int svc_group_rank(const ddph_group *g)
{
    return g->rank;
}

static int svc_group_size(const ddph_group *g)
{
    return g->size;
}

/* The backend the context chose, and its state. */
#define COMM(h) ((h)->comm.ops)
#define SELF(h) ((h)->comm.self)

static ddph_status svc_intra_node(const ddph_services *s, ddph_group **out)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, COMM(h)->intra_node(SELF(h), out, &e), &e);
}

static ddph_status svc_split(const ddph_services *s, ddph_group *parent,
                             int color, int key, ddph_group **out)
{
    ddph_hook *h = host(s);
    ddph_err e;
    return keep(h, COMM(h)->split(SELF(h), parent, color, key, out, &e), &e);
}

/* A collective's span on the communication track of the timeline. */
static ddph_status traced(ddph_hook *h, const char *what, size_t count,
                          ddph_dtype dtype, double start, ddph_status st)
{
    if (h->timeline)
        ddph__timeline_record(h->timeline, h->track, start,
                              "%s %zu x %s", what, count,
                              ddph__dtype_name(dtype));
    return st;
}

static double span_start(const ddph_hook *h)
{
    return h->timeline ? ddph__timeline_now(h->timeline) : 0;
}

/* A buffer of a collective: where, and how many bytes. */
typedef struct span {
    const void *at;
    size_t bytes;
} span;

typedef enum {
    ALLREDUCE,
    ALLGATHER,
    ALLGATHERV,
    BROADCAST,
    REDUCE_SCATTER,
    ALLTOALL
} collective_kind;

/* One collective a hook asked for, blocking or not: what services.c
 * checks, counts and traces, and what it hands the backend. */
typedef struct collective {
    collective_kind kind;
    const char *what; /* its name in fingerprints, traces and messages */
    ddph_group *g;
    const void *send; /* the in-place ones: the buffer, as recv */
    void *recv;
    size_t count; /* elements per rank; allgatherv: gathered in all */
    const size_t *counts; /* allgatherv */
    ddph_dtype dtype;
    int op, root; /* -1 where they do not apply */
    span reads, writes;
} collective;

/* The elements an allgatherv gathers in all. */
static size_t counts_total(const ddph_group *g, const size_t *counts)
{
    size_t total = 0;
    for (int r = 0; r < g->size; r++)
        total += counts[r];
    return total;
}

static collective allreduce_of(ddph_group *g, void *buf, size_t count,
                               ddph_dtype dtype, ddph_redop op)
{
    span all = {buf, count * ddph__dtype_size(dtype)};
    return (collective){ALLREDUCE, "allreduce", g, buf, buf, count, NULL,
                        dtype, (int)op, -1, all, all};
}

static collective allgather_of(ddph_group *g, const void *send, void *recv,
                               size_t count, ddph_dtype dtype)
{
    size_t es = ddph__dtype_size(dtype);
    return (collective){ALLGATHER, "allgather", g, send, recv, count, NULL,
                        dtype, -1, -1, (span){send, count * es},
                        (span){recv, count * (size_t)g->size * es}};
}

static collective allgatherv_of(ddph_group *g, const void *send, void *recv,
                                const size_t *counts, ddph_dtype dtype)
{
    size_t es = ddph__dtype_size(dtype), total = counts_total(g, counts);
    return (collective){ALLGATHERV, "allgatherv", g, send, recv, total,
                        counts, dtype, -1, -1,
                        (span){send, counts[g->rank] * es},
                        (span){recv, total * es}};
}

static collective alltoall_of(ddph_group *g, const void *send, void *recv,
                              size_t count, ddph_dtype dtype)
{
    size_t bytes = count * (size_t)g->size * ddph__dtype_size(dtype);
    return (collective){ALLTOALL, "alltoall", g, send, recv, count, NULL,
                        dtype, -1, -1, (span){send, bytes},
                        (span){recv, bytes}};
}

/* Bytes this rank sends and receives in each collective
 * (docs/plugin-guide.md, "Counting bytes"). */
static void count_bytes(ddph_hook *h, const collective *c)
{
    size_t es = ddph__dtype_size(c->dtype), others = (size_t)(c->g->size - 1);
    size_t sent = 0, received = 0;
    switch (c->kind) {
    case ALLREDUCE:
        sent = received = c->count * es;
        break;
    case ALLGATHER:
        sent = c->count * es;
        received = c->count * others * es;
        break;
    case ALLGATHERV:
        sent = c->counts[c->g->rank] * es;
        received = c->count * es - sent;
        break;
    case BROADCAST:
        if (c->g->rank == c->root)
            sent = c->count * es;
        else
            received = c->count * es;
        break;
    case REDUCE_SCATTER:
        sent = c->count * (size_t)c->g->size * es;
        received = c->count * es;
        break;
    case ALLTOALL:
        sent = received = c->count * others * es;
        break;
    }
    h->call_bytes += sent;
    h->call_recv_bytes += received;
}

/* The backend's call for c: started into *nb when nb is not NULL (the
 * nonblocking kinds), else run to its end. */
static ddph_status issue(ddph_hook *h, const collective *c, ddph_comm_op *nb,
                         ddph_err *e)
{
    const ddph_comm_ops *o = COMM(h);
    void *self = SELF(h);
    ddph_redop op = (ddph_redop)c->op;
    switch (c->kind) {
    case ALLREDUCE:
        return nb ? o->start_allreduce(self, c->g, c->recv, c->count,
                                       c->dtype, op, nb, e)
                  : o->allreduce(self, c->g, c->recv, c->count, c->dtype, op,
                                 e);
    case ALLGATHER:
        return nb ? o->start_allgather(self, c->g, c->send, c->recv, c->count,
                                       c->dtype, nb, e)
                  : o->allgather(self, c->g, c->send, c->recv, c->count,
                                 c->dtype, e);
    case ALLGATHERV:
        return nb ? o->start_allgatherv(self, c->g, c->send, c->recv,
                                        c->counts, c->dtype, nb, e)
                  : o->allgatherv(self, c->g, c->send, c->recv, c->counts,
                                  c->dtype, e);
    case ALLTOALL:
        return nb ? o->start_alltoall(self, c->g, c->send, c->recv, c->count,
                                      c->dtype, nb, e)
                  : o->alltoall(self, c->g, c->send, c->recv, c->count,
                                c->dtype, e);
    case BROADCAST:
        return o->broadcast(self, c->g, c->recv, c->count, c->dtype, c->root,
                            e);
    case REDUCE_SCATTER:
        return o->reduce_scatter(self, c->g, c->send, c->recv, c->count,
                                 c->dtype, op, e);
    }
    return ddph__fail(e, DDPH_ERR_INVALID, "%s: unknown collective", c->what);
}

/* Every collective a hook issues is compared across the group's ranks
 * where the backend does it ([runtime] check_collectives, backend_mpi.h),
 * the exchange running while the collective does: an extra, a missing or
 * a different collective fails the job on every rank, and the hook call
 * with it. */
static ddph_status checked(ddph_hook *h, const collective *c, ddph_err *e)
{
    if (!COMM(h)->fingerprint)
        return DDPH_OK;
    /* Where in the bucket a reduction's data lies: two pieces of one size
     * swapped on one rank would otherwise match.  (Not for the gathers and
     * broadcasts, whose buffers may lie at a place of each rank's own.) */
    const char *p = c->send, *at = h->call_buffer;
    int reduces = c->op >= 0 && c->root < 0;
    int64_t offset = reduces && at && p >= at && p < at + h->call_buffer_bytes
                         ? (int64_t)(p - at)
                         : -1;
    return COMM(h)->fingerprint(SELF(h), c->g, c->what, c->dtype, c->count,
                                c->counts, c->op, c->root, h->model_id,
                                h->call_iteration, h->call_bucket, offset, e);
}

/* A blocking collective: checked, counted, run and traced. */
static ddph_status blocking(ddph_hook *h, collective c)
{
    ddph_err e;
    ddph_status fp = checked(h, &c, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    count_bytes(h, &c);
    ddph_status st = issue(h, &c, NULL, &e);
    return traced(h, c.what, c.count, c.dtype, t0, keep(h, st, &e));
}

static ddph_status svc_allreduce(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 ddph_redop op)
{
    return blocking(host(s), allreduce_of(g, buf, count, dtype, op));
}

static ddph_status svc_allgather(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype)
{
    return blocking(host(s), allgather_of(g, send, recv, count, dtype));
}

static ddph_status svc_broadcast(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 int root)
{
    span all = {buf, count * ddph__dtype_size(dtype)};
    return blocking(host(s),
                    (collective){BROADCAST, "broadcast", g, buf, buf, count,
                                 NULL, dtype, -1, root, all, all});
}

static ddph_status svc_reduce_scatter(const ddph_services *s, ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op)
{
    size_t es = ddph__dtype_size(dtype);
    return blocking(host(s),
                    (collective){REDUCE_SCATTER, "reduce_scatter", g, send,
                                 recv, count, NULL, dtype, (int)op, -1,
                                 (span){send, count * (size_t)g->size * es},
                                 (span){recv, count * es}});
}

/* ---- minor 2: variable counts and all-to-all ------------------------------ */

static ddph_status svc_allgatherv(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype)
{
    return blocking(host(s), allgatherv_of(g, send, recv, counts, dtype));
}

static ddph_status svc_alltoall(const ddph_services *s, ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype)
{
    return blocking(host(s), alltoall_of(g, send, recv, count, dtype));
}

/* ---- minor 2: nonblocking collectives --------------------------------------
 * A request sits on its hook's list of outstanding requests from its start
 * until wait or test ends it; ddph__services_settle waits for what a call
 * left behind. */
struct ddph_request {
    ddph_hook *owner;
    struct ddph_request *prev, *next;
    const char *what;
    size_t count;
    ddph_dtype dtype;
    double t0;       /* the timeline's clock, for the span */
    ddph_comm_op op; /* the backend's: its group, name and start */
    /* The memory it reads and the memory it writes until it ends. */
    const char *reads, *writes;
    size_t read_bytes, write_bytes;
};

static int overlap(const char *a, size_t an, const void *b, size_t bn)
{
    const char *bb = b;
    return a && bb && an && bn && a < bb + bn && bb < a + an;
}

/* Two outstanding collectives of one call on the same memory, one of
 * them writing it: what either sees is undefined (MPI forbids it; on a
 * GPU stream it would depend on the order).  Refused when the second
 * starts, naming both buffers. */
static ddph_status no_overlap(ddph_hook *h, const char *what, span rd,
                              span wr)
{
    for (const ddph_request *o = h->outstanding; o; o = o->next) {
        span mine = wr, theirs = {o->writes, o->write_bytes};
        const char *verb = "writes";
        if (overlap(o->writes, o->write_bytes, wr.at, wr.bytes))
            ;
        else if (overlap(o->writes, o->write_bytes, rd.at, rd.bytes))
            mine = rd;
        else if (overlap(o->reads, o->read_bytes, wr.at, wr.bytes))
            theirs = (span){o->reads, o->read_bytes}, verb = "reads";
        else
            continue;
        snprintf(h->message, sizeof h->message,
                 "%s: its %s buffer %p (%zu bytes) overlaps %p (%zu bytes), "
                 "which the outstanding %s of this call %s: wait for that "
                 "request before starting another on the same memory",
                 what, mine.at == wr.at ? "receive" : "send", mine.at,
                 mine.bytes, theirs.at, theirs.bytes, o->what, verb);
        return DDPH_ERR_STATE;
    }
    return DDPH_OK;
}

static ddph_request *request_new(ddph_hook *h, const collective *c)
{
    ddph_request *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(h->message, sizeof h->message, "%s: out of memory", c->what);
        return NULL;
    }
    *r = (ddph_request){.owner = h, .what = c->what, .count = c->count,
                        .dtype = c->dtype, .t0 = span_start(h),
                        .reads = c->reads.at, .read_bytes = c->reads.bytes,
                        .writes = c->writes.at,
                        .write_bytes = c->writes.bytes};
    r->op.group = c->g;
    r->op.what = c->what;
    r->op.start = ddph__now();
    return r;
}

static ddph_status request_started(ddph_hook *h, ddph_request *r,
                                   ddph_status st, const ddph_err *e,
                                   ddph_request **out)
{
    if (st != DDPH_OK) {
        free(r);
        *out = NULL;
        return keep(h, st, e);
    }
    r->next = h->outstanding;
    if (h->outstanding)
        h->outstanding->prev = r;
    h->outstanding = r;
    *out = r;
    return DDPH_OK;
}

static void request_end(ddph_request *r)
{
    ddph_hook *h = r->owner;
    if (r->prev)
        r->prev->next = r->next;
    else
        h->outstanding = r->next;
    if (r->next)
        r->next->prev = r->prev;
    traced(h, r->what, r->count, r->dtype, r->t0, DDPH_OK);
    free(r);
}

/* A nonblocking collective may complete after on_bucket has returned
 * (the host waits for what the hook left outstanding), so its buffers must
 * not be the hook's own locals: by then MPI would write into stack memory
 * the thread has reused.  The hook's frames lie between this function's
 * frame and the mark the host left just above the call (stacks grow down
 * on every machine this builds for); such a buffer is refused when the
 * request starts.  The caller's memory further up the stack outlives the
 * call and is allowed. */
static ddph_status not_on_stack(ddph_hook *h, const char *what,
                                const void *send, const void *recv)
{
    volatile char here = 0;
    const char *lo = (const char *)&here, *hi = h->frame_top;
    if (!hi || hi <= lo)
        return DDPH_OK;
    const void *bufs[2] = {send, recv};
    for (int i = 0; i < 2; i++) {
        const char *p = bufs[i];
        if (!p || p < lo || p >= hi)
            continue;
        snprintf(h->message, sizeof h->message,
                 "%s: the %s buffer %p is in the hook's own stack frame: a "
                 "nonblocking collective may complete after on_bucket "
                 "returns, into a frame that is gone; use the bucket, memory "
                 "from s->alloc, or the heap",
                 what, i == 0 ? "send" : "receive", (const void *)p);
        return DDPH_ERR_STATE;
    }
    return DDPH_OK;
}

/* A nonblocking collective (`what`: its name, "iallreduce", ...): the
 * hook's own stack buffers refused, compared across the ranks, counted,
 * and started into a request that wait or test ends. */
static ddph_status nonblocking(ddph_hook *h, const char *what, collective c,
                               ddph_request **req)
{
    ddph_err e;
    ddph_status st;
    *req = NULL;
    c.what = what;
    if ((st = not_on_stack(h, what, c.reads.at, c.writes.at)) != DDPH_OK ||
        (st = no_overlap(h, what, c.reads, c.writes)) != DDPH_OK)
        return st;
    if ((st = checked(h, &c, &e)) != DDPH_OK)
        return keep(h, st, &e);
    ddph_request *r = request_new(h, &c);
    if (!r)
        return DDPH_ERR_NOMEM;
    count_bytes(h, &c);
    st = issue(h, &c, &r->op, &e);
    return request_started(h, r, st, &e, req);
}

static ddph_status svc_iallreduce(const ddph_services *s, ddph_group *g,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  ddph_redop op, ddph_request **req)
{
    return nonblocking(host(s), "iallreduce",
                       allreduce_of(g, buf, count, dtype, op), req);
}

static ddph_status svc_iallgather(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_request **req)
{
    return nonblocking(host(s), "iallgather",
                       allgather_of(g, send, recv, count, dtype), req);
}

static ddph_status svc_iallgatherv(const ddph_services *s, ddph_group *g,
                                   const void *send, void *recv,
                                   const size_t *counts, ddph_dtype dtype,
                                   ddph_request **req)
{
    return nonblocking(host(s), "iallgatherv",
                       allgatherv_of(g, send, recv, counts, dtype), req);
}

static ddph_status svc_ialltoall(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_request **req)
{
    return nonblocking(host(s), "ialltoall",
                       alltoall_of(g, send, recv, count, dtype), req);
}

/* Whether req is one of this hook's outstanding requests (a stale or
 * foreign pointer is refused instead of freed twice). */
static int owned_request(const ddph_hook *h, const ddph_request *req)
{
    for (const ddph_request *r = h->outstanding; r; r = r->next)
        if (r == req)
            return 1;
    return 0;
}

static ddph_status svc_wait(const ddph_services *s, ddph_request *req)
{
    ddph_hook *h = host(s);
    if (!req || !owned_request(h, req)) {
        snprintf(h->message, sizeof h->message,
                 "wait: not an outstanding request of this call (waited "
                 "for twice, or started by another call)");
        return DDPH_ERR_INVALID;
    }
    ddph_err e;
    ddph_status st = COMM(h)->wait(SELF(h), &req->op, &e);
    request_end(req);
    return keep(h, st, &e);
}

static ddph_status svc_test(const ddph_services *s, ddph_request *req,
                            int *done)
{
    ddph_hook *h = host(s);
    *done = 0;
    if (!req || !owned_request(h, req)) {
        snprintf(h->message, sizeof h->message,
                 "test: not an outstanding request of this call");
        return DDPH_ERR_INVALID;
    }
    ddph_err e;
    ddph_status st = COMM(h)->test(SELF(h), &req->op, done, &e);
    if (*done)
        request_end(req);
    return keep(h, st, &e);
}

/* minor 4: every outstanding request of the call, moved along. */
static ddph_status svc_progress(const ddph_services *s)
{
    ddph_hook *h = host(s);
    for (ddph_request *r = h->outstanding; r; r = r->next) {
        ddph_err e;
        ddph_status st = COMM(h)->progress(SELF(h), &r->op, &e);
        if (st != DDPH_OK)
            return keep(h, st, &e);
    }
    return DDPH_OK;
}

int ddph__services_settle(ddph_hook *h)
{
    int n = 0;
    while (h->outstanding) {
        ddph_request *r = h->outstanding;
        ddph_err e;
        COMM(h)->wait(SELF(h), &r->op, &e);
        request_end(r);
        n++;
    }
    return n;
}

static void svc_log(const ddph_services *s, ddph_log_level level,
                    const char *fmt, ...)
{
    ddph_hook *h = host(s);
    va_list ap;
    va_start(ap, fmt);
    ddph__vlog(h->log, level, h->prefix, fmt, ap);
    va_end(ap);
}

static void svc_set_error(const ddph_services *s, const char *fmt, ...)
{
    ddph_hook *h = host(s);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->message, sizeof h->message, fmt, ap);
    va_end(ap);
}

void ddph__services_init(ddph_hook *h)
{
    ddph_group *world = COMM(h)->world(SELF(h));
    h->services = (ddph_services){
        .struct_size = sizeof(ddph_services),
        .abi_minor = DDPH_PLUGIN_ABI_MINOR,
        .rank = world->rank,
        .world_size = world->size,
        .group_rank = svc_group_rank,
        .group_size = svc_group_size,
        .group_intra_node = svc_intra_node,
        .group_split = svc_split,
        .allreduce = svc_allreduce,
        .allgather = svc_allgather,
        .broadcast = svc_broadcast,
        .reduce_scatter = svc_reduce_scatter,
        .log = svc_log,
        .set_error = svc_set_error,
        .opt_bool = ddph__opt_bool,
        .opt_int = ddph__opt_int,
        .opt_real = ddph__opt_real,
        .opt_string = ddph__opt_string,
        .native_stream = ON_GPU(h) ? GPU(h)->stream(h->gpu) : NULL,
        .world = world,
        .host = h,
        .device = ON_GPU(h) ? DDPH_CUDA : DDPH_CPU,
        .allgatherv = svc_allgatherv,
        .alltoall = svc_alltoall,
        .iallreduce = svc_iallreduce,
        .iallgather = svc_iallgather,
        .iallgatherv = svc_iallgatherv,
        .ialltoall = svc_ialltoall,
        .wait = svc_wait,
        .test = svc_test,
        .progress = svc_progress,
    };
    ddph__services_device_init(&h->services);
}
