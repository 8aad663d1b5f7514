/* services.c: see services.h.  Every service that fails writes its message
 * into the instance's per-call message, so a plugin only has to return the
 * status it got. */
#include "build-config.h"

#include "services.h"

#include <stdarg.h>
#include <string.h>

#include "cpu_ops.h"
#include "device.h"
#ifdef HAVE_NCCL
#include "backend_nccl.h"
/* With backend = nccl every bucket is in GPU memory: dispatch to NCCL and
 * the CUDA kernels. */
#define ON_GPU(h) ((h)->nccl != NULL)
#define NCCL(h) ((ddph_nccl *)(h)->nccl)
#else
#define ON_GPU(h) 0
#endif

static ddph_hook *host(const ddph_services *s)
{
    return s->host;
}

/* Runs a backend call with an error carrier that lands in h->message. */
static ddph_status keep(ddph_hook *h, ddph_status st, const ddph_err *e)
{
    if (st != DDPH_OK)
        memcpy(h->message, e->msg, sizeof h->message);
    return st;
}

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
#ifdef HAVE_NCCL
    if (ON_GPU(h))
        return keep(h, ddph__nccl_intra_node(NCCL(h), out, &e), &e);
#endif
    return keep(h, ddph__mpi_intra_node(h->mpi, out, &e), &e);
}

static ddph_status svc_split(const ddph_services *s, ddph_group *parent,
                             int color, int key, ddph_group **out)
{
    ddph_hook *h = host(s);
    ddph_err e;
#ifdef HAVE_NCCL
    if (ON_GPU(h))
        return keep(h, ddph__nccl_split(NCCL(h), parent, color, key, out, &e),
                    &e);
#endif
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

static ddph_status svc_allreduce(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 ddph_redop op)
{
    ddph_hook *h = host(s);
    ddph_err e;
    double t0 = span_start(h);
    h->call_bytes += count * ddph__dtype_size(dtype);
    ddph_status st =
#ifdef HAVE_NCCL
        ON_GPU(h) ? ddph__nccl_allreduce(NCCL(h), g, buf, count, dtype, op, &e) :
#endif
        ddph__mpi_allreduce(h->mpi, g, buf, count, dtype, op, &e);
    return traced(h, "allreduce", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_allgather(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype)
{
    ddph_hook *h = host(s);
    ddph_err e;
    double t0 = span_start(h);
    h->call_bytes += count * ddph__dtype_size(dtype);
    ddph_status st =
#ifdef HAVE_NCCL
        ON_GPU(h) ? ddph__nccl_allgather(NCCL(h), g, send, recv, count, dtype, &e) :
#endif
        ddph__mpi_allgather(h->mpi, g, send, recv, count, dtype, &e);
    return traced(h, "allgather", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_broadcast(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 int root)
{
    ddph_hook *h = host(s);
    ddph_err e;
    double t0 = span_start(h);
    if (g->rank == root)
        h->call_bytes += count * ddph__dtype_size(dtype);
    ddph_status st =
#ifdef HAVE_NCCL
        ON_GPU(h) ? ddph__nccl_broadcast(NCCL(h), g, buf, count, dtype, root, &e) :
#endif
        ddph__mpi_broadcast(h->mpi, g, buf, count, dtype, root, &e);
    return traced(h, "broadcast", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_reduce_scatter(const ddph_services *s, ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op)
{
    ddph_hook *h = host(s);
    ddph_err e;
    double t0 = span_start(h);
    h->call_bytes += count * (size_t)g->size * ddph__dtype_size(dtype);
    ddph_status st =
#ifdef HAVE_NCCL
        ON_GPU(h) ? ddph__nccl_reduce_scatter(NCCL(h), g, send, recv, count,
                                              dtype, op, &e) :
#endif
        ddph__mpi_reduce_scatter(h->mpi, g, send, recv, count, dtype, op, &e);
    return traced(h, "reduce_scatter", count, dtype, t0, keep(h, st, &e));
}

static ddph_status svc_cast(const ddph_services *s, const void *src,
                            ddph_dtype src_dtype, void *dst,
                            ddph_dtype dst_dtype, size_t n, double scale)
{
    ddph_err e;
#ifdef HAVE_NCCL
    if (ON_GPU(host(s)))
        return keep(host(s),
                    ddph__nccl_cast(NCCL(host(s)), src, src_dtype, dst,
                                    dst_dtype, n, scale, &e),
                    &e);
#endif
    return keep(host(s),
                ddph__cpu_cast(src, src_dtype, dst, dst_dtype, n, scale, &e),
                &e);
}

static ddph_status svc_divide(const ddph_services *s, void *buf,
                              ddph_dtype dtype, size_t n, double divisor)
{
    ddph_err e;
#ifdef HAVE_NCCL
    if (ON_GPU(host(s)))
        return keep(host(s),
                    ddph__nccl_divide(NCCL(host(s)), buf, dtype, n, divisor, &e),
                    &e);
#endif
    return keep(host(s), ddph__cpu_divide(buf, dtype, n, divisor, &e), &e);
}

static ddph_status svc_gemm(const ddph_services *s, int trans_a, int trans_b,
                            size_t m, size_t n, size_t k, float alpha,
                            const float *a, size_t lda, const float *b,
                            size_t ldb, float beta, float *c, size_t ldc)
{
    ddph_err e;
#ifdef HAVE_NCCL
    if (ON_GPU(host(s)))
        return keep(host(s),
                    ddph__nccl_gemm(NCCL(host(s)), trans_a, trans_b, m, n, k,
                                    alpha, a, lda, b, ldb, beta, c, ldc, &e),
                    &e);
#endif
    return keep(host(s),
                ddph__cpu_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b,
                               ldb, beta, c, ldc, &e),
                &e);
}

static ddph_status svc_orthogonalize(const ddph_services *s, float *x,
                                     size_t rows, size_t cols, double eps)
{
    ddph_err e;
#ifdef HAVE_NCCL
    if (ON_GPU(host(s)))
        return keep(host(s),
                    ddph__nccl_orthogonalize(NCCL(host(s)), x, rows, cols, eps,
                                             &e),
                    &e);
#endif
    return keep(host(s), ddph__cpu_orthogonalize(x, rows, cols, eps, &e), &e);
}

static ddph_status svc_axpy(const ddph_services *s, size_t n, float alpha,
                            const float *x, float *y)
{
#ifdef HAVE_NCCL
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s), ddph__nccl_axpy(NCCL(host(s)), n, alpha, x, y, &e),
                    &e);
#endif
    ddph__cpu_axpy(n, alpha, x, y);
    return DDPH_OK;
}

static ddph_status svc_copy(const ddph_services *s, void *dst, const void *src,
                            size_t bytes, ddph_copy_kind kind)
{
    if (kind != DDPH_COPY_DEVICE && kind != DDPH_COPY_TO_HOST &&
        kind != DDPH_COPY_FROM_HOST) {
        snprintf(host(s)->message, sizeof host(s)->message,
                 "copy: unknown ddph_copy_kind %d", (int)kind);
        return DDPH_ERR_INVALID;
    }
#ifdef HAVE_NCCL
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s),
                    ddph__nccl_copy(NCCL(host(s)), dst, src, bytes, kind, &e),
                    &e);
#endif
    if (bytes)
        memcpy(dst, src, bytes);
    return DDPH_OK;
}

static ddph_status svc_zero(const ddph_services *s, void *buf, size_t bytes)
{
#ifdef HAVE_NCCL
    ddph_err e;
    if (ON_GPU(host(s)))
        return keep(host(s), ddph__nccl_zero(NCCL(host(s)), buf, bytes, &e),
                    &e);
#endif
    if (bytes)
        memset(buf, 0, bytes);
    return DDPH_OK;
}

static void *svc_alloc(const ddph_services *s, size_t bytes)
{
    void *p = NULL;
    ddph_err e;
    if (ddph__dev_alloc(ON_GPU(host(s)) ? DDPH_CUDA : DDPH_CPU, bytes, &p,
                        &e) != DDPH_OK)
        return NULL;
    return p;
}

static void svc_free(const ddph_services *s, void *p)
{
    ddph__dev_free(ON_GPU(host(s)) ? DDPH_CUDA : DDPH_CPU, p);
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
#ifndef HAVE_NCCL
        .world = &h->mpi->world,
#endif
        .group_rank = svc_group_rank,
        .group_size = svc_group_size,
        .group_intra_node = svc_intra_node,
        .group_split = svc_split,
        .allreduce = svc_allreduce,
        .allgather = svc_allgather,
        .broadcast = svc_broadcast,
        .reduce_scatter = svc_reduce_scatter,
        .cast = svc_cast,
        .divide = svc_divide,
        .gemm = svc_gemm,
        .orthogonalize = svc_orthogonalize,
        .alloc = svc_alloc,
        .free = svc_free,
        .log = svc_log,
        .set_error = svc_set_error,
        .opt_bool = ddph__opt_bool,
        .opt_int = ddph__opt_int,
        .opt_real = ddph__opt_real,
        .opt_string = ddph__opt_string,
#ifdef HAVE_NCCL
        .native_stream = ON_GPU(h) ? NCCL(h)->stream : NULL,
        .world = ON_GPU(h) ? &NCCL(h)->world : &h->mpi->world,
#else
        .native_stream = NULL,
#endif
        .host = h,
        .device = ON_GPU(h) ? DDPH_CUDA : DDPH_CPU,
        .axpy = svc_axpy,
        .copy = svc_copy,
        .zero = svc_zero,
    };
}
