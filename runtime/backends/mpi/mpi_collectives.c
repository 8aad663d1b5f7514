/* mpi_collectives.c: the hooks' collectives over MPI as comm.h's table
 * (ddph__mpi_comm_ops): the blocking ones here, the allreduce in
 * mpi_allreduce.c, the nonblocking ones in mpi_nonblocking.c.  A new
 * collective is a function here and its line in the table. */
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

ddph_status ddph__mpi_allgather(ddph_mpi *m, ddph_mpi_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, const char *what,
                                ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!ddph__mpi_valid(dtype, DDPH_SUM))
        return ddph__fail(err, DDPH_ERR_INVALID, "allgather: bad dtype");
    if (count > DDPH__MPI_CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "allgather: %zu elements per rank is over 2^30",
                          count);
    MPI_Request req;
    int rc = MPI_Iallgather(send, (int)count, ddph__mpi_type(m, dtype), recv,
                            (int)count, ddph__mpi_type(m, dtype), g->comm, &req);
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, "MPI_Iallgather");
    return ddph__mpi_wait_timed(m, &req, what, err);
}

static ddph_status mpi_broadcast(void *self, struct ddph_group *group,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 int root, ddph_err *err)
{
    ddph_mpi *m = self;
    ddph_mpi_group *g = G(group);
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!ddph__mpi_valid(dtype, DDPH_SUM) || root < 0 || root >= g->size)
        return ddph__fail(err, DDPH_ERR_INVALID, "broadcast: bad dtype or root");
    size_t es = ddph__dtype_size(dtype);
    char *p = buf;
    do {
        size_t n = ddph__mpi_piece(count, es);
        MPI_Request req;
        int rc = MPI_Ibcast(p, (int)n, ddph__mpi_type(m, dtype), root, g->comm, &req);
        if (rc != MPI_SUCCESS)
            return ddph__mpi_failed(m, err, rc, "MPI_Ibcast");
        ddph_status st = ddph__mpi_wait_timed(m, &req, "broadcast", err);
        if (st != DDPH_OK)
            return st;
        p += n * es;
        count -= n;
    } while (count > 0);
    return DDPH_OK;
}

static ddph_status mpi_reduce_scatter(void *self, struct ddph_group *group,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op, ddph_err *err)
{
    ddph_mpi *m = self;
    ddph_mpi_group *g = G(group);
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!ddph__mpi_valid(dtype, op))
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "reduce_scatter: bad dtype or op");
    if (count > DDPH__MPI_CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "reduce_scatter: %zu elements per rank is over 2^30",
                          count);
    MPI_Request req;
    int rc = MPI_Ireduce_scatter_block(send, recv, (int)count,
                                       ddph__mpi_type(m, dtype), ddph__mpi_op(m, dtype, op),
                                       g->comm, &req);
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, "MPI_Ireduce_scatter_block");
    return ddph__mpi_wait_timed(m, &req, "reduce_scatter", err);
}

static ddph_status mpi_allgatherv(void *self, struct ddph_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype,
                                  ddph_err *err)
{
    ddph_mpi_op op;
    ddph_status st = ddph__mpi_start_allgatherv(self, G(g), send, recv,
                                                counts, dtype, &op, err);
    return st != DDPH_OK ? st : ddph__mpi_op_wait(self, &op, err);
}

static ddph_status mpi_alltoall(void *self, struct ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, ddph_err *err)
{
    ddph_mpi_op op;
    ddph_status st = ddph__mpi_start_alltoall(self, G(g), send, recv, count,
                                              dtype, &op, err);
    return st != DDPH_OK ? st : ddph__mpi_op_wait(self, &op, err);
}

/* ---- the table's other entries ---------------------------------------- */

static struct ddph_group *mpi_world(void *self)
{
    return &((ddph_mpi *)self)->world.head;
}

static ddph_status mpi_split(void *self, struct ddph_group *parent, int color,
                             int key, struct ddph_group **out, ddph_err *err)
{
    ddph_mpi_group *g = NULL;
    ddph_status st = ddph__mpi_split(self, G(parent), color, key, &g, err);
    return handed(st, g, out);
}

static ddph_status mpi_intra_node(void *self, struct ddph_group **out,
                                  ddph_err *err)
{
    ddph_mpi_group *g = NULL;
    ddph_status st = ddph__mpi_intra_node(self, &g, err);
    return handed(st, g, out);
}

static ddph_status mpi_allreduce(void *self, struct ddph_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, ddph_redop op,
                                 ddph_err *err)
{
    return ddph__mpi_allreduce(self, G(g), buf, count, dtype, op, err);
}

static ddph_status mpi_allgather(void *self, struct ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    return ddph__mpi_allgather(self, G(g), send, recv, count, dtype,
                               "allgather", err);
}

static ddph_status mpi_start_allreduce(void *self, struct ddph_group *g,
                                       void *buf, size_t count,
                                       ddph_dtype dtype, ddph_redop op,
                                       ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_allreduce(self, G(g), buf, count, dtype, op,
                                     OP(out), err);
}

static ddph_status mpi_start_allgather(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_allgather(self, G(g), send, recv, count, dtype,
                                     OP(out), err);
}

static ddph_status mpi_start_allgatherv(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        const size_t *counts, ddph_dtype dtype,
                                        ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_allgatherv(self, G(g), send, recv, counts, dtype,
                                      OP(out), err);
}

static ddph_status mpi_start_alltoall(void *self, struct ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_comm_op *out, ddph_err *err)
{
    return ddph__mpi_start_alltoall(self, G(g), send, recv, count, dtype,
                                    OP(out), err);
}

static ddph_status mpi_wait(void *self, ddph_comm_op *op, ddph_err *err)
{
    return ddph__mpi_op_wait(self, OP(op), err);
}

static ddph_status mpi_test(void *self, ddph_comm_op *op, int *done,
                            ddph_err *err)
{
    ddph_status st = ddph__mpi_op_test(self, OP(op), done, err);
    if (st != DDPH_OK)
        *done = 1;
    return st;
}

static ddph_status mpi_progress(void *self, ddph_comm_op *op, ddph_err *err)
{
    return ddph__mpi_op_progress(self, OP(op), err);
}

static ddph_status mpi_fingerprint(void *self, struct ddph_group *g,
                                   const char *what, ddph_dtype dtype,
                                   size_t count, const size_t *counts, int op,
                                   int root, int64_t model, int64_t iteration,
                                   int64_t bucket, int64_t offset,
                                   ddph_err *err)
{
    return ddph__mpi_fingerprint(self, G(g), what, dtype, count, counts, op,
                                 root, model, iteration, bucket, offset, err);
}

static ddph_status mpi_fingerprint_settle(void *self, ddph_err *err)
{
    return ddph__mpi_fingerprint_settle(self, err);
}

const ddph_comm_ops ddph__mpi_comm_ops = {
    .name = "mpi",
    .world = mpi_world,
    .split = mpi_split,
    .intra_node = mpi_intra_node,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .allgatherv = mpi_allgatherv,
    .broadcast = mpi_broadcast,
    .reduce_scatter = mpi_reduce_scatter,
    .alltoall = mpi_alltoall,
    .start_allreduce = mpi_start_allreduce,
    .start_allgather = mpi_start_allgather,
    .start_allgatherv = mpi_start_allgatherv,
    .start_alltoall = mpi_start_alltoall,
    .wait = mpi_wait,
    .test = mpi_test,
    .progress = mpi_progress,
    .fingerprint = mpi_fingerprint,
    .fingerprint_settle = mpi_fingerprint_settle,
};
