/* backend_mpi.h: collectives on host memory over MPICH.
 *
 * The runtime works on a duplicate of MPI_COMM_WORLD so that its traffic
 * never matches the trainer's own MPI calls.  Every collective is started
 * non-blocking and polled against a deadline, so that a peer that died or
 * diverged turns into DDPH_ERR_TIMEOUT with a message instead of a hang.
 * f16 and bf16 travel as 2-byte opaque types with user reduction ops that
 * round after every addition (as gloo does). */
#ifndef DDPH_BACKEND_MPI_H
#define DDPH_BACKEND_MPI_H

#include <mpi.h>

#include <ddphook/plugin.h>

#include "util.h"

struct ddph_group {
    MPI_Comm comm;
    void *nccl; /* ncclComm_t of the same ranks (nccl backend), or NULL */
    int rank, size;
    int owned;               /* comm is freed with the group */
    struct ddph_group *next; /* groups made on behalf of hooks */
};

typedef struct ddph_mpi {
    struct ddph_group world;
    int initialized_mpi; /* ddph_open called MPI_Init_thread */
    int thread_level;
    double timeout_s;
    MPI_Datatype half_type;          /* f16 and bf16 */
    MPI_Op ops[DDPH_DTYPE_COUNT][3]; /* user ops for the half types */
    struct ddph_group *groups;       /* every split, freed at finalize */
} ddph_mpi;

/* Initialises MPI if needed (MPI_THREAD_MULTIPLE), dups the world. */
ddph_status ddph__mpi_init(ddph_mpi *m, int *argc, char ***argv,
                           double timeout_s, ddph_err *err);
void ddph__mpi_finalize(ddph_mpi *m);

ddph_status ddph__mpi_allreduce(ddph_mpi *m, struct ddph_group *g, void *buf,
                                size_t count, ddph_dtype dtype, ddph_redop op,
                                ddph_err *err);
ddph_status ddph__mpi_allgather(ddph_mpi *m, struct ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, ddph_err *err);
ddph_status ddph__mpi_broadcast(ddph_mpi *m, struct ddph_group *g, void *buf,
                                size_t count, ddph_dtype dtype, int root,
                                ddph_err *err);
ddph_status ddph__mpi_reduce_scatter(ddph_mpi *m, struct ddph_group *g,
                                     const void *send, void *recv,
                                     size_t count, ddph_dtype dtype,
                                     ddph_redop op, ddph_err *err);
/* Raw bytes, for the runtime's own agreement checks. */
ddph_status ddph__mpi_bcast_bytes(ddph_mpi *m, void *buf, size_t n, int root,
                                  ddph_err *err);
ddph_status ddph__mpi_allreduce_i64(ddph_mpi *m, int64_t *v, size_t n,
                                    ddph_redop op, ddph_err *err);

/* Concatenates every rank's bytes on rank 0 into *out (malloc'd, rank
 * order; NULL elsewhere). */
ddph_status ddph__mpi_gather_bytes(ddph_mpi *m, const void *buf, size_t n,
                                   char **out, size_t *total, ddph_err *err);

ddph_status ddph__mpi_split(ddph_mpi *m, struct ddph_group *parent, int color,
                            int key, struct ddph_group **out, ddph_err *err);
/* This rank's index among the ranks of `comm` on its host (a shared-memory
 * split): the nccl backend's GPU, and `ddphook bench gpu`'s.  Collective. */
int ddph__mpi_node_rank(MPI_Comm comm);
ddph_status ddph__mpi_intra_node(ddph_mpi *m, struct ddph_group **out,
                                 ddph_err *err);

#endif
