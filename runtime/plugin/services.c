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

static ddph_status svc_intra_node(const ddph_services *s, ddph_group **out)
{
    ddph_hook *h = host(s);
    ddph_err e;
    if (ON_GPU(h))
        return keep(h, GPU(h)->intra_node(h->gpu, out, &e), &e);
    return keep(h, ddph__mpi_intra_node(h->mpi, out, &e), &e);
}

static ddph_status svc_split(const ddph_services *s, ddph_group *parent,
                             int color, int key, ddph_group **out)
{
    ddph_hook *h = host(s);
    ddph_err e;
    if (ON_GPU(h))
        return keep(h, GPU(h)->split(h->gpu, parent, color, key, out, &e), &e);
    return keep(h, ddph__mpi_split(h->mpi, parent, color, key, out, &e), &e);
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

/* Bytes this rank sends and receives in each collective
 * (docs/plugin-guide.md, "Counting bytes"), one counter per kind, shared
 * by the blocking call and its nonblocking start. */
static void count_allreduce(ddph_hook *h, size_t count, ddph_dtype dtype)
{
    h->call_bytes += count * ddph__dtype_size(dtype);
    h->call_recv_bytes += count * ddph__dtype_size(dtype);
}

static void count_allgather(ddph_hook *h, const ddph_group *g, size_t count,
                            ddph_dtype dtype)
{
    h->call_bytes += count * ddph__dtype_size(dtype);
    h->call_recv_bytes += count * (size_t)(g->size - 1) * ddph__dtype_size(dtype);
}

/* The elements an allgatherv gathers in all. */
static size_t counts_total(const ddph_group *g, const size_t *counts)
{
    size_t total = 0;
    for (int r = 0; r < g->size; r++)
        total += counts[r];
    return total;
}

/* Returns the elements gathered in all. */
static size_t count_allgatherv(ddph_hook *h, const ddph_group *g,
                               const size_t *counts, ddph_dtype dtype)
{
    size_t es = ddph__dtype_size(dtype), total = counts_total(g, counts);
    h->call_bytes += counts[g->rank] * es;
    h->call_recv_bytes += (total - counts[g->rank]) * es;
    return total;
}

static void count_alltoall(ddph_hook *h, const ddph_group *g, size_t count,
                           ddph_dtype dtype)
{
    size_t others = count * (size_t)(g->size - 1) * ddph__dtype_size(dtype);
    h->call_bytes += others;
    h->call_recv_bytes += others;
}

/* Every collective a hook issues on the MPI path is compared across the
 * group's ranks ([runtime] check_collectives, backend_mpi.h), the exchange
 * running while the collective does: an extra, a missing or a different
 * collective fails the job on every rank, and the hook call with it.  op
 * and root are -1 where they do not apply. */
static ddph_status checked(ddph_hook *h, ddph_group *g, const char *what,
                           const void *buf, ddph_dtype dtype, size_t count,
                           int op, int root, ddph_err *e)
{
    if (ON_GPU(h))
        return DDPH_OK;
    /* Where in the bucket a reduction's data lies: two pieces of one size
     * swapped on one rank would otherwise match.  (Not for the gathers and
     * broadcasts, whose buffers may lie at a place of each rank's own.) */
    const char *p = buf, *at = h->call_buffer;
    int reduces = op >= 0 && root < 0;
    int64_t offset = reduces && at && p >= at && p < at + h->call_buffer_bytes
                         ? (int64_t)(p - at)
                         : -1;
    return ddph__mpi_fingerprint(h->mpi, g, what, dtype, count, op, root,
                                 h->model_id, h->call_iteration,
                                 h->call_bucket, offset, e);
}

static ddph_status svc_allreduce(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 ddph_redop op)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status fp =
        checked(h, g, "allreduce", buf, dtype, count, (int)op, -1, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    count_allreduce(h, count, dtype);
    ddph_status st =
        ON_GPU(h) ? GPU(h)->allreduce(h->gpu, g, buf, count, dtype, op, &e)
                  : ddph__mpi_allreduce(h->mpi, g, buf, count, dtype, op, &e);
    return traced(h, "allreduce", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_allgather(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status fp = checked(h, g, "allgather", send, dtype, count, -1, -1, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    count_allgather(h, g, count, dtype);
    ddph_status st =
        ON_GPU(h) ? GPU(h)->allgather(h->gpu, g, send, recv, count, dtype, &e)
                  : ddph__mpi_allgather(h->mpi, g, send, recv, count, dtype,
                                        "allgather", &e);
    return traced(h, "allgather", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_broadcast(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 int root)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status fp = checked(h, g, "broadcast", buf, dtype, count, -1, root, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    if (g->rank == root)
        h->call_bytes += count * ddph__dtype_size(dtype);
    else
        h->call_recv_bytes += count * ddph__dtype_size(dtype);
    ddph_status st =
        ON_GPU(h) ? GPU(h)->broadcast(h->gpu, g, buf, count, dtype, root, &e)
                  : ddph__mpi_broadcast(h->mpi, g, buf, count, dtype, root, &e);
    return traced(h, "broadcast", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_reduce_scatter(const ddph_services *s, ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status fp =
        checked(h, g, "reduce_scatter", send, dtype, count, (int)op, -1, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    h->call_bytes += count * (size_t)g->size * ddph__dtype_size(dtype);
    h->call_recv_bytes += count * ddph__dtype_size(dtype);
    ddph_status st = ON_GPU(h) ? GPU(h)->reduce_scatter(h->gpu, g, send, recv,
                                                        count, dtype, op, &e)
                               : ddph__mpi_reduce_scatter(h->mpi, g, send, recv,
                                                          count, dtype, op, &e);
    return traced(h, "reduce_scatter", count, dtype, t0, keep(h, st, &e));
}

/* ---- minor 2: variable counts and all-to-all ------------------------------ */

static ddph_status svc_allgatherv(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status fp = checked(h, g, "allgatherv", send, dtype, counts_total(g, counts),
                             -1, -1, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    size_t total = count_allgatherv(h, g, counts, dtype);
    ddph_status st =
        ON_GPU(h)
            ? GPU(h)->allgatherv(h->gpu, g, send, recv, counts, dtype, &e)
            : ddph__mpi_allgatherv(h->mpi, g, send, recv, counts, dtype, &e);
    return traced(h, "allgatherv", total, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_alltoall(const ddph_services *s, ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status fp = checked(h, g, "alltoall", send, dtype, count, -1, -1, &e);
    if (fp != DDPH_OK)
        return keep(h, fp, &e);
    double t0 = span_start(h);
    count_alltoall(h, g, count, dtype);
    ddph_status st =
        ON_GPU(h) ? GPU(h)->alltoall(h->gpu, g, send, recv, count, dtype, &e)
                  : ddph__mpi_alltoall(h->mpi, g, send, recv, count, dtype, &e);
    return traced(h, "alltoall", count, dtype, t0, keep(h, st, &e));
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
    double t0;      /* the timeline's clock, for the span */
    double started; /* ddph__now() at the start, for the deadline */
    struct ddph_group *group;
    ddph_mpi_op op; /* MPI; unused on the GPU, where the stream orders */
    /* The memory it reads and the memory it writes until it ends. */
    const char *reads, *writes;
    size_t read_bytes, write_bytes;
};

/* A buffer of a nonblocking collective: where, and how many bytes. */
typedef struct span {
    const void *at;
    size_t bytes;
} span;

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

static ddph_request *request_new(ddph_hook *h, const char *what,
                                 struct ddph_group *g, size_t count,
                                 ddph_dtype dtype)
{
    ddph_request *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(h->message, sizeof h->message, "%s: out of memory", what);
        return NULL;
    }
    *r = (ddph_request){.owner = h, .what = what, .count = count,
                        .dtype = dtype, .t0 = span_start(h),
                        .started = ddph__now(), .group = g};
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

/* The GPU or the MPI form of a call, by the hook's backend. */
#define BY_BACKEND(h, gpu_call, mpi_call) (ON_GPU(h) ? (gpu_call) : (mpi_call))

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

/* What every nonblocking start does first: refuse the hook's own stack
 * buffers, compare the collective across the ranks, make the request
 * (count: its elements, for the timeline).  NULL with *st and h->message
 * set when the collective must not start. */
static ddph_request *request_begin(ddph_hook *h, const char *what,
                                   ddph_group *g, span rd, span wr,
                                   ddph_dtype dtype, size_t count, int op,
                                   ddph_status *st)
{
    ddph_err e;
    if ((*st = not_on_stack(h, what, rd.at, wr.at)) != DDPH_OK ||
        (*st = no_overlap(h, what, rd, wr)) != DDPH_OK)
        return NULL;
    if ((*st = checked(h, g, what, rd.at, dtype, count, op, -1, &e)) != DDPH_OK) {
        keep(h, *st, &e);
        return NULL;
    }
    ddph_request *r = request_new(h, what, g, count, dtype);
    *st = r ? DDPH_OK : DDPH_ERR_NOMEM;
    if (r) {
        r->reads = rd.at;
        r->read_bytes = rd.bytes;
        r->writes = wr.at;
        r->write_bytes = wr.bytes;
    }
    return r;
}

static ddph_status svc_iallreduce(const ddph_services *s, ddph_group *g,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  ddph_redop op, ddph_request **req)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status st;
    *req = NULL;
    span all = {buf, count * ddph__dtype_size(dtype)};
    ddph_request *r = request_begin(h, "iallreduce", g, all, all, dtype, count,
                                    (int)op, &st);
    if (!r)
        return st;
    count_allreduce(h, count, dtype);
    st = BY_BACKEND(
        h, GPU(h)->start_allreduce(h->gpu, g, buf, count, dtype, op, &e),
        ddph__mpi_start_allreduce(h->mpi, g, buf, count, dtype, op, &r->op,
                                  &e));
    return request_started(h, r, st, &e, req);
}

static ddph_status svc_iallgather(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_request **req)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status st;
    *req = NULL;
    size_t es = ddph__dtype_size(dtype);
    ddph_request *r = request_begin(
        h, "iallgather", g, (span){send, count * es},
        (span){recv, count * (size_t)g->size * es}, dtype, count, -1, &st);
    if (!r)
        return st;
    count_allgather(h, g, count, dtype);
    st = BY_BACKEND(
        h, GPU(h)->start_allgather(h->gpu, g, send, recv, count, dtype, &e),
        ddph__mpi_start_allgather(h->mpi, g, send, recv, count, dtype, &r->op,
                                  &e));
    return request_started(h, r, st, &e, req);
}

static ddph_status svc_iallgatherv(const ddph_services *s, ddph_group *g,
                                   const void *send, void *recv,
                                   const size_t *counts, ddph_dtype dtype,
                                   ddph_request **req)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status st;
    *req = NULL;
    size_t es = ddph__dtype_size(dtype), total = counts_total(g, counts);
    ddph_request *r = request_begin(
        h, "iallgatherv", g, (span){send, counts[g->rank] * es},
        (span){recv, total * es}, dtype, total, -1, &st);
    if (!r)
        return st;
    r->count = count_allgatherv(h, g, counts, dtype);
    st = BY_BACKEND(
        h, GPU(h)->start_allgatherv(h->gpu, g, send, recv, counts, dtype, &e),
        ddph__mpi_start_allgatherv(h->mpi, g, send, recv, counts, dtype, &r->op,
                                   &e));
    return request_started(h, r, st, &e, req);
}

static ddph_status svc_ialltoall(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_request **req)
{
    ddph_hook *h = host(s);
    ddph_err e;
    ddph_status st;
    *req = NULL;
    size_t bytes = count * (size_t)g->size * ddph__dtype_size(dtype);
    ddph_request *r = request_begin(h, "ialltoall", g, (span){send, bytes},
                                    (span){recv, bytes}, dtype, count, -1,
                                    &st);
    if (!r)
        return st;
    count_alltoall(h, g, count, dtype);
    st = BY_BACKEND(
        h, GPU(h)->start_alltoall(h->gpu, g, send, recv, count, dtype, &e),
        ddph__mpi_start_alltoall(h->mpi, g, send, recv, count, dtype, &r->op,
                                 &e));
    return request_started(h, r, st, &e, req);
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
    ddph_status st =
        BY_BACKEND(h, GPU(h)->wait(h->gpu, req->group, req->what, &e),
                   ddph__mpi_op_wait(h->mpi, &req->op, &e));
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
    ddph_status st;
    if (ON_GPU(h)) {
        /* The stream is idle: every request on it completed.  Failed, or
         * past the deadline: the wait reports (and aborts) what is. */
        if (GPU(h)->idle(h->gpu) == 0 &&
            ddph__now() - req->started <= h->mpi->timeout_s)
            return DDPH_OK;
        st = GPU(h)->wait(h->gpu, req->group, req->what, &e);
        *done = 1;
        request_end(req);
        return keep(h, st, &e);
    }
    st = ddph__mpi_op_test(h->mpi, &req->op, done, &e);
    if (st != DDPH_OK)
        *done = 1;
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
        ddph_status st;
        if (ON_GPU(h)) {
            /* NCCL moves by itself; failed, or past the deadline: the
             * wait reports (and aborts) what is. */
            int idle = GPU(h)->idle(h->gpu);
            if (idle > 0 ||
                (idle == 0 && ddph__now() - r->started <= h->mpi->timeout_s))
                continue;
            st = GPU(h)->wait(h->gpu, r->group, r->what, &e);
        } else {
            st = ddph__mpi_op_progress(h->mpi, &r->op, &e);
        }
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
        BY_BACKEND(h, GPU(h)->wait(h->gpu, r->group, r->what, &e),
                   ddph__mpi_op_wait(h->mpi, &r->op, &e));
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
    h->services = (ddph_services){
        .struct_size = sizeof(ddph_services),
        .abi_minor = DDPH_PLUGIN_ABI_MINOR,
        .rank = h->mpi->world.rank,
        .world_size = h->mpi->world.size,
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
        .world = ON_GPU(h) ? GPU(h)->world(h->gpu) : &h->mpi->world,
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
