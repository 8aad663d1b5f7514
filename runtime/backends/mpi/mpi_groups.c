/* mpi_groups.c: barriers, splits and the ranks of a host (backend_mpi.h). */
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

static ddph_status barrier_timed(ddph_mpi *m, MPI_Comm comm, const char *what,
                                 ddph_err *err)
{
    MPI_Request req;
    int rc = MPI_Ibarrier(comm, &req);
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, "MPI_Ibarrier");
    return ddph__mpi_wait_timed(m, &req, what, err);
}

ddph_status ddph__mpi_barrier(ddph_mpi *m, ddph_mpi_group *g,
                              const char *what, ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    return broken != DDPH_OK ? broken : barrier_timed(m, g->comm, what, err);
}

static ddph_status adopt(ddph_mpi *m, MPI_Comm comm, ddph_mpi_group **out,
                         ddph_err *err)
{
    ddph_mpi_group *g = calloc(1, sizeof *g);
    if (!g) {
        MPI_Comm_free(&comm);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    g->comm = comm;
    g->owned = 1;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    /* Its twin for fingerprints: every rank of comm is here (the split
     * that made comm has just returned on all of them). */
    if (MPI_Comm_dup(comm, &g->fingerprints) != MPI_SUCCESS)
        g->fingerprints = MPI_COMM_NULL;
    else
        MPI_Comm_set_errhandler(g->fingerprints, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &g->rank);
    MPI_Comm_size(comm, &g->size);
    g->next = m->groups;
    m->groups = g;
    *out = g;
    return DDPH_OK;
}

ddph_status ddph__mpi_split(ddph_mpi *m, ddph_mpi_group *parent, int color,
                            int key, ddph_mpi_group **out, ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    /* MPI_Comm_split blocks: first make sure every rank is there. */
    ddph_status st = barrier_timed(m, parent->comm, "group_split", err);
    if (st != DDPH_OK)
        return st;
    MPI_Comm comm;
    int rc = MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color,
                            key, &comm);
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, "MPI_Comm_split");
    if (comm == MPI_COMM_NULL)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "group_split: a negative color leaves no group");
    return adopt(m, comm, out, err);
}

/* The ranks of this host: a shared-memory split of the world, after a
 * barrier that ends within timeout_s (the split itself cannot be timed). */
static ddph_status split_node(ddph_mpi *m, MPI_Comm *comm, ddph_err *err)
{
    ddph_status broken = ddph__mpi_collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    ddph_status st = barrier_timed(m, m->world.comm, "intra_node", err);
    if (st != DDPH_OK)
        return st;
    int rc = MPI_Comm_split_type(m->world.comm, MPI_COMM_TYPE_SHARED,
                                 m->world.rank, MPI_INFO_NULL, comm);
    return rc == MPI_SUCCESS ? DDPH_OK
                             : ddph__mpi_failed(m, err, rc, "MPI_Comm_split_type");
}

ddph_status ddph__mpi_intra_node(ddph_mpi *m, ddph_mpi_group **out,
                                 ddph_err *err)
{
    MPI_Comm comm;
    ddph_status st = split_node(m, &comm, err);
    return st != DDPH_OK ? st : adopt(m, comm, out, err);
}

ddph_status ddph__mpi_find_node(ddph_mpi *m, ddph_err *err)
{
    MPI_Comm comm;
    ddph_status st = split_node(m, &comm, err);
    if (st != DDPH_OK)
        return st;
    MPI_Comm_rank(comm, &m->node_rank);
    MPI_Comm_size(comm, &m->node_size);
    MPI_Comm_free(&comm);
    /* Whether every host has one rank: the same answer on every rank, as
     * the allreduce's choice of algorithm must be (mpi_allreduce.c). */
    int most = 0;
    MPI_Request req;
    int rc = MPI_Iallreduce(&m->node_size, &most, 1, MPI_INT, MPI_MAX,
                            m->world.comm, &req);
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, "MPI_Iallreduce");
    st = ddph__mpi_wait_timed(m, &req, "intra_node", err);
    if (st != DDPH_OK)
        return st;
    m->one_rank_per_host = most == 1;
    return DDPH_OK;
}
