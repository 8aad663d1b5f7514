/* mpi_allreduce.c: the allreduce of backend_mpi.h, which picks its way:
 * through the buckets' shared memory (shared_buckets.h) when the buffer
 * lies in a segment, the runtime's ring (below) for large half-precision
 * sums and for f32 ones between hosts of one rank each, else MPI's own,
 * in pieces.  Apart from the other collectives because
 * the shared-memory allreduce is itself made of them. */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/mpi/shared_buckets.h"
#include "device/cpu_ops.h"

/* ---- sums as a ring of point-to-point messages ----------------------------
 * MPI has no f16 or bf16, so their sums are user-defined operations, and
 * MPICH 4.0 runs MPI_Iallreduce with one 1.5-1.9x slower than its blocking
 * MPI_Allreduce over TCP (notes/performance-history.md, "1 Gbit/s after the
 * half-precision work").  Large half-precision sums go round a ring
 * instead, and so do f32 ones between hosts of one rank each
 * (mpi_allreduce.c says when): reduce-scatter, then allgather, W-1 steps
 * each, every rank sending 2(W-1)/W of the buffer as plain bytes to the
 * next rank and adding what the previous one sent with the register
 * kernels.  Every wait keeps the call's deadline.  Concurrent calls are
 * on different communicators (lanes, subgroups), so the tag cannot mix
 * them up. */
#define RING_BLOCK_BYTES ((size_t)4 << 20) /* per message */

/* The group's receive buffer for a ring of count elements: grown, never
 * shrunk, freed with the group.  After a failed wait a receive into it
 * may still be posted; the job is broken then and never calls here again. */
static char *ring_scratch(ddph_mpi_group *g, size_t count, size_t es)
{
    size_t most = (count + (size_t)g->size - 1) / (size_t)g->size * es;
    size_t want = most < RING_BLOCK_BYTES ? most : RING_BLOCK_BYTES;
    if (want > g->scratch_bytes) {
        char *p = realloc(g->scratch, want);
        if (!p)
            return NULL;
        g->scratch = p;
        g->scratch_bytes = want;
    }
    return g->scratch;
}

/* One step: chunk `out` of buf to the next rank while the previous rank's
 * chunk `in` arrives, a block at a time (the peer splits its chunk the
 * same way); with `sum`, each block arrives in the group's scratch and is
 * added into buf, else it lands in place. */
static ddph_status ring_step(ddph_mpi *m, ddph_mpi_group *g, char *buf,
                             size_t count, ddph_dtype dtype, int out, int in,
                             int sum, double start, ddph_err *err)
{
    size_t es = ddph__dtype_size(dtype), blk = RING_BLOCK_BYTES / es;
    size_t oat, on, iat, inn;
    ddph__chunk(count, g->size, out, &oat, &on);
    ddph__chunk(count, g->size, in, &iat, &inn);
    char *tmp = g->scratch;
    int next = (g->rank + 1) % g->size;
    int prev = (g->rank + g->size - 1) % g->size;
    for (size_t i = 0; i < on || i < inn; i += blk) {
        size_t so = i < on ? (on - i < blk ? on - i : blk) : 0;
        size_t ri = i < inn ? (inn - i < blk ? inn - i : blk) : 0;
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        int rc = MPI_SUCCESS;
        if (ri)
            rc = MPI_Irecv(sum ? tmp : buf + (iat + i) * es, (int)(ri * es),
                           MPI_BYTE, prev, DDPH__TAG_RING, g->comm, &reqs[0]);
        if (rc == MPI_SUCCESS && so)
            rc = MPI_Isend(buf + (oat + i) * es, (int)(so * es), MPI_BYTE,
                           next, DDPH__TAG_RING, g->comm, &reqs[1]);
        if (rc != MPI_SUCCESS)
            return ddph__mpi_failed(m, err, rc, "allreduce (ring)");
        ddph_status st =
            ddph__mpi_wait_round(m, 2, reqs, start, "allreduce", err);
        if (st != DDPH_OK)
            return st;
        if (sum && ri)
            ddph__cpu_add(buf + (iat + i) * es, tmp, dtype, ri);
    }
    return DDPH_OK;
}

static ddph_status ring_allreduce(ddph_mpi *m, ddph_mpi_group *g,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  ddph_err *err)
{
    int w = g->size, r = g->rank;
    double start = ddph__now();
    if (!ring_scratch(g, count, ddph__dtype_size(dtype)))
        return ddph__fail(err, DDPH_ERR_NOMEM,
                          "allreduce: out of memory for the ring's buffer");
    ddph_status st = DDPH_OK;
    /* Reduce-scatter: at step s chunk r-s goes on, chunk r-s-1 comes in
     * and is added; rank r ends with chunk r+1 summed over every rank. */
    for (int s = 0; s < w - 1 && st == DDPH_OK; s++)
        st = ring_step(m, g, buf, count, dtype, (r - s + w) % w,
                       (r - s - 1 + w) % w, 1, start, err);
    /* Allgather: the summed chunks go round. */
    for (int s = 0; s < w - 1 && st == DDPH_OK; s++)
        st = ring_step(m, g, buf, count, dtype, (r + 1 - s + w) % w,
                       (r - s + w) % w, 0, start, err);
    return st;
}

/* Which sums go round the runtime's ring (below) instead of MPI's
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
        return ring_allreduce(m, g, buf, count, dtype, err);
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
