/* mpi_allreduce.c: the allreduce of backend_mpi.h, which picks its way:
 * through the buckets' shared memory (shared_buckets.h) when the buffer
 * lies in a segment, the ring for large half-precision sums (mpi_ring.c),
 * else MPI's own, in pieces.  Apart from the other collectives because
 * the shared-memory allreduce is itself made of them. */
#include "build-config.h"

#include "comm/mpi_internal.h"

#include <stdatomic.h>

#include "comm/shared_buckets.h"

ddph_status ddph__mpi_allreduce(ddph_mpi *m, struct ddph_group *g, void *buf,
                                size_t count, ddph_dtype dtype, ddph_redop op,
                                ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!ddph__mpi_valid(dtype, op))
        return ddph__fail(err, DDPH_ERR_INVALID, "allreduce: bad dtype or op");
    size_t es = ddph__dtype_size(dtype);
    if (g->world_order && atomic_load(&m->segments)) {
        int done = 0;
        ddph_status st = ddph__shared_allreduce(m, g, buf, count, dtype, op,
                                                &done, err);
        if (st != DDPH_OK || done)
            return st;
    }
    if ((dtype == DDPH_F16 || dtype == DDPH_BF16) && op == DDPH_SUM &&
        g->size > 1 && count * es >= DDPH__MPI_RING_MIN_BYTES)
        return ddph__mpi_ring_allreduce(m, g, buf, count, dtype, err);
    char *p = buf;
    /* An empty allreduce still synchronises, as PyTorch's does. */
    do {
        size_t n = ddph__mpi_piece(count, es);
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, n ? (void *)p : NULL, (int)n,
                                ddph__mpi_type(m, dtype), ddph__mpi_op(m, dtype, op),
                                g->comm, &req);
        if (rc != MPI_SUCCESS)
            return ddph__mpi_failed(m, err, rc, "MPI_Iallreduce");
        ddph_status st = ddph__mpi_wait_timed(m, &req, "allreduce", err);
        if (st != DDPH_OK)
            return st;
        p += n * es;
        count -= n;
    } while (count > 0);
    return DDPH_OK;
}
