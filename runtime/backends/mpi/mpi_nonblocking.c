/* mpi_nonblocking.c: nonblocking collectives (backend_mpi.h). */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- nonblocking collectives (ABI minor 2) -------------------------------- */

static ddph_status op_begin(ddph_mpi *m, ddph_mpi_op *op, int nreqs,
                            const char *what, ddph_err *err)
{
    memset(op, 0, sizeof *op);
    op->what = what;
    op->start = ddph__now();
    op->reqs = malloc((size_t)nreqs * sizeof *op->reqs);
    if (!op->reqs)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nreqs; i++)
        op->reqs[i] = MPI_REQUEST_NULL;
    (void)m;
    return DDPH_OK;
}

/* A start that failed before any request was posted. */
static ddph_status op_cancel(ddph_mpi_op *op, ddph_status st)
{
    free(op->reqs);
    free(op->counts);
    free(op->displs);
    memset(op, 0, sizeof *op);
    return st;
}

/* After an MPI call failed part-way: the requests already posted may still
 * touch op's arrays, so they are left allocated. */
static ddph_status op_broken(ddph_mpi *m, ddph_mpi_op *op, int rc,
                             const char *what, ddph_err *err)
{
    memset(op, 0, sizeof *op);
    return ddph__mpi_failed(m, err, rc, what);
}

ddph_status ddph__mpi_start_allreduce(ddph_mpi *m, ddph_mpi_group *g,
                                      void *buf, size_t count,
                                      ddph_dtype dtype, ddph_redop op,
                                      ddph_mpi_op *out, ddph_err *err)
{
    ddph_status st = ddph__mpi_collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    if (!ddph__mpi_valid(dtype, op))
        return ddph__fail(err, DDPH_ERR_INVALID, "allreduce: bad dtype or op");
    size_t es = ddph__dtype_size(dtype), most = ddph__mpi_piece(SIZE_MAX, es);
    size_t pieces = count ? (count + most - 1) / most : 1;
    if (pieces > INT_MAX / 2)
        return ddph__fail(err, DDPH_ERR_INVALID, "allreduce: too large");
    if ((st = op_begin(m, out, (int)pieces, "allreduce", err)) != DDPH_OK)
        return st;
    char *p = buf;
    for (size_t i = 0; i < pieces; i++) {
        size_t n = ddph__mpi_piece(count, es);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, n ? (void *)p : NULL, (int)n,
                                ddph__mpi_type(m, dtype), ddph__mpi_op(m, dtype, op),
                                g->comm, &out->reqs[out->nreqs]);
        if (rc != MPI_SUCCESS)
            return op_broken(m, out, rc, "MPI_Iallreduce", err);
        out->nreqs++;
        p += n * es;
        count -= n;
    }
    return DDPH_OK;
}

/* allgather and alltoall: one call, count elements per rank's block. */
static ddph_status start_blocks(ddph_mpi *m, ddph_mpi_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, int alltoall,
                                ddph_mpi_op *out, ddph_err *err)
{
    const char *what = alltoall ? "alltoall" : "allgather";
    ddph_status st = ddph__mpi_collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    if (!ddph__mpi_valid(dtype, DDPH_SUM) || count > DDPH__MPI_CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "%s: bad dtype, or %zu elements per block (at "
                          "most 2^30)",
                          what, count);
    if ((st = op_begin(m, out, 1, what, err)) != DDPH_OK)
        return st;
    MPI_Datatype t = ddph__mpi_type(m, dtype);
    int n = (int)count;
    int rc = alltoall ? MPI_Ialltoall(send, n, t, recv, n, t, g->comm,
                                      &out->reqs[0])
                      : MPI_Iallgather(send, n, t, recv, n, t, g->comm,
                                       &out->reqs[0]);
    if (rc != MPI_SUCCESS)
        return op_broken(m, out, rc,
                         alltoall ? "MPI_Ialltoall" : "MPI_Iallgather", err);
    out->nreqs = 1;
    return DDPH_OK;
}

ddph_status ddph__mpi_start_allgather(ddph_mpi *m, ddph_mpi_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_mpi_op *out, ddph_err *err)
{
    return start_blocks(m, g, send, recv, count, dtype, 0, out, err);
}

ddph_status ddph__mpi_start_allgatherv(ddph_mpi *m, ddph_mpi_group *g,
                                       const void *send, void *recv,
                                       const size_t *counts, ddph_dtype dtype,
                                       ddph_mpi_op *out, ddph_err *err)
{
    ddph_status st = ddph__mpi_collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    if (!ddph__mpi_valid(dtype, DDPH_SUM))
        return ddph__fail(err, DDPH_ERR_INVALID, "allgatherv: bad dtype");
    if ((st = op_begin(m, out, 1, "allgatherv", err)) != DDPH_OK)
        return st;
    out->counts = malloc((size_t)g->size * sizeof *out->counts);
    out->displs = malloc((size_t)g->size * sizeof *out->displs);
    if (!out->counts || !out->displs)
        return op_cancel(out, ddph__fail(err, DDPH_ERR_NOMEM, "out of memory"));
    size_t total = 0;
    for (int r = 0; r < g->size; r++) {
        /* MPI-3 counts and displacements are int. */
        if (counts[r] > DDPH__MPI_CHUNK || total > INT_MAX)
            return op_cancel(out, ddph__fail(err, DDPH_ERR_INVALID,
                                             "allgatherv: rank %d's count "
                                             "%zu, or the total, is over "
                                             "2^30",
                                             r, counts[r]));
        out->counts[r] = (int)counts[r];
        out->displs[r] = (int)total;
        total += counts[r];
    }
    int rc = MPI_Iallgatherv(send, out->counts[g->rank], ddph__mpi_type(m, dtype),
                             recv, out->counts, out->displs,
                             ddph__mpi_type(m, dtype), g->comm, &out->reqs[0]);
    if (rc != MPI_SUCCESS)
        return op_broken(m, out, rc, "MPI_Iallgatherv", err);
    out->nreqs = 1;
    return DDPH_OK;
}

ddph_status ddph__mpi_start_alltoall(ddph_mpi *m, ddph_mpi_group *g,
                                     const void *send, void *recv,
                                     size_t count, ddph_dtype dtype,
                                     ddph_mpi_op *out, ddph_err *err)
{
    return start_blocks(m, g, send, recv, count, dtype, 1, out, err);
}

ddph_status ddph__mpi_op_wait(ddph_mpi *m, ddph_mpi_op *op, ddph_err *err)
{
    ddph_status st =
        ddph__mpi_wait_timed_all(m, op->nreqs, op->reqs, op->start, op->what, err);
    if (st == DDPH_OK)
        op_cancel(op, DDPH_OK);
    else
        memset(op, 0, sizeof *op); /* MPI may still use the arrays */
    return st;
}

ddph_status ddph__mpi_op_test(ddph_mpi *m, ddph_mpi_op *op, int *done,
                              ddph_err *err)
{
    *done = 0;
    ddph__activity_touch(); /* polled by a hook: bounded by its deadline */
    int rc = ddph__mpi_test_all(op->nreqs, op->reqs, done);
    const char *what = op->what ? op->what : "test";
    ddph_status st = DDPH_OK;
    if (rc != MPI_SUCCESS)
        st = ddph__mpi_failed(m, err, rc, what);
    else if (*done)
        return op_cancel(op, DDPH_OK);
    else if ((st = ddph__mpi_collective_fault(m, err)) == DDPH_OK &&
             ddph__now() > op->start + m->timeout_s)
        st = ddph__mpi_timed_out(m, what, " of its start", err);
    if (st != DDPH_OK)
        memset(op, 0, sizeof *op); /* MPI may still use the arrays */
    return st;
}

ddph_status ddph__mpi_op_progress(ddph_mpi *m, ddph_mpi_op *op, ddph_err *err)
{
    int done = 0;
    ddph__activity_touch(); /* driven by a hook: bounded by its deadline */
    int rc = ddph__mpi_test_all(op->nreqs, op->reqs, &done);
    const char *what = op->what ? op->what : "progress";
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, what);
    if (done)
        return DDPH_OK;
    ddph_status st = ddph__mpi_collective_fault(m, err);
    if (st == DDPH_OK && ddph__now() > op->start + m->timeout_s)
        st = ddph__mpi_timed_out(m, what, " of its start", err);
    return st;
}
