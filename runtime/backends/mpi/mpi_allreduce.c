/* mpi_allreduce.c: the allreduce of backend_mpi.h, which picks its way:
 * through the buckets' shared memory (shared_buckets.h) when the buffer
 * lies in a segment, the runtime's ring for large half-precision sums and
 * for f32 ones between hosts of one rank each (mpi_ring.c), else MPI's
 * own, in pieces.  Apart from the other collectives because
 * the shared-memory allreduce is itself made of them. */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <stdatomic.h>

#include "backends/mpi/shared_buckets.h"

/* Which sums go round the runtime's ring (mpi_ring.c) instead of MPI's
 * allreduce; every rank of g decides alike.  Half-precision ones of
 * DDPH__MPI_RING_MIN_BYTES or more (MPI has no such type).  f32 ones
 * where every host has one rank, there are more than 2, and each rank's
 * chunk is DDPH__MPI_RING_MIN_BYTES or more (below that the ring's
 * 2(W-1) rounds cost more than MPI's 2 log W): with one rank a host,
 * MPICH 4.0's MPI_Iallreduce carried the GPT example's 3.34 MB at 36% of
 * 3 simulated hosts' 100 Mbit/s links (0.99-1.00 s a step), the ring at
 * 87-88% (0.41 s); 4 hosts: 57-60% (0.67-0.71 s) against 73-79%
 * (0.51-0.55 s) (docs/performance.md, "One rank a host").  With 2 ranks
 * both send the same halves in two rounds, and MPICH's was as fast or
 * 1-3% faster; with 2 ranks on each of 2 hosts the ring was slower
 * (ResNet-50's buckets at 1 Gbit/s: 1.52-1.62 s against 1.40-1.47). */
static int ring_sum(const ddph_mpi *m, const ddph_mpi_group *g,
                    size_t bytes, ddph_dtype dtype, ddph_redop op)
{
    if (op != DDPH_SUM || g->size < 2 || bytes < DDPH__MPI_RING_MIN_BYTES)
        return 0;
    if (dtype == DDPH_F16 || dtype == DDPH_BF16)
        return 1;
    return dtype == DDPH_F32 && m->one_rank_per_host && g->size > 2 &&
           bytes / (size_t)g->size >= DDPH__MPI_RING_MIN_BYTES;
}

ddph_status ddph__mpi_allreduce(ddph_mpi *m, ddph_mpi_group *g, void *buf,
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
    if (ring_sum(m, g, count * es, dtype, op))
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
