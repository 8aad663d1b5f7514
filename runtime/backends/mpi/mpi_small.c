/* mpi_small.c: the runtime's own small collectives on the world
 * (agreements, roll calls, state files, the trace): backend_mpi.h. */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The runtime's own small collectives take their callers' stack buffers.
 * A collective abandoned on a timeout cannot be cancelled, and a late peer
 * would still write into its buffer: they run on a heap copy instead,
 * which is left allocated when the wait fails. */
ddph_status ddph__mpi_bcast_bytes(ddph_mpi *m, void *buf, size_t n, int root,
                                  ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (n > DDPH__MPI_CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID, "broadcast: too large");
    void *copy = malloc(n ? n : 1);
    if (!copy)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    memcpy(copy, buf, n);
    MPI_Request req;
    int rc = MPI_Ibcast(copy, (int)n, MPI_BYTE, root, m->world.comm, &req);
    if (rc != MPI_SUCCESS) {
        free(copy);
        return ddph__mpi_failed(m, err, rc, "MPI_Ibcast");
    }
    ddph_status st = ddph__mpi_wait_timed(m, &req, "broadcast", err);
    if (st == DDPH_OK) {
        memcpy(buf, copy, n);
        free(copy);
    }
    return st;
}

ddph_status ddph__mpi_allreduce_i64(ddph_mpi *m, int64_t *v, size_t n,
                                    ddph_redop op, ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    int64_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    memcpy(copy, v, n * sizeof *copy);
    MPI_Request req;
    MPI_Op o = op == DDPH_MAX ? MPI_MAX : op == DDPH_MIN ? MPI_MIN : MPI_SUM;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, copy, (int)n, MPI_INT64_T, o,
                            m->world.comm, &req);
    if (rc != MPI_SUCCESS) {
        free(copy);
        return ddph__mpi_failed(m, err, rc, "MPI_Iallreduce");
    }
    ddph_status st = ddph__mpi_wait_timed(m, &req, "allreduce", err);
    if (st == DDPH_OK) {
        memcpy(v, copy, n * sizeof *copy);
        free(copy);
    }
    return st;
}

ddph_status ddph__mpi_gather_bytes(ddph_mpi *m, const void *buf, size_t n,
                                   char **out, size_t *total, ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    int size = m->world.size, root = m->world.rank == 0;
    if (n > DDPH__MPI_CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID, "gather: too large");
    int len = (int)n, *lens = root ? calloc((size_t)size, sizeof *lens) : NULL;
    int *displs = root ? calloc((size_t)size, sizeof *displs) : NULL;
    if (root && (!lens || !displs)) {
        free(lens);
        free(displs);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    MPI_Request req;
    int rc = MPI_Igather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, m->world.comm,
                         &req);
    ddph_status st = rc == MPI_SUCCESS ? ddph__mpi_wait_timed(m, &req, "gather", err)
                                       : ddph__mpi_failed(m, err, rc, "MPI_Igather");
    size_t sum = 0;
    for (int r = 0; root && r < size; r++) {
        displs[r] = (int)sum;
        sum += (size_t)lens[r];
    }
    char *all = NULL;
    if (st == DDPH_OK && root && (sum > DDPH__MPI_CHUNK || !(all = malloc(sum + 1))))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "gather: %zu bytes", sum);
    /* Every rank enters the second collective, even if rank 0 failed to
     * allocate (it then receives nothing useful but does not hang). */
    if (st == DDPH_OK || (root && st == DDPH_ERR_NOMEM)) {
        rc = MPI_Igatherv(buf, len, MPI_BYTE, all, lens, displs, MPI_BYTE, 0,
                          m->world.comm, &req);
        ddph_status st2 = rc == MPI_SUCCESS ? ddph__mpi_wait_timed(m, &req, "gather", err)
                                            : ddph__mpi_failed(m, err, rc, "MPI_Igatherv");
        st = st == DDPH_OK ? st2 : st;
    }
    if (st != DDPH_OK)
        return st; /* lens, displs and all may still be written to */
    free(lens);
    free(displs);
    *out = all;
    *total = root ? sum : 0;
    return DDPH_OK;
}
