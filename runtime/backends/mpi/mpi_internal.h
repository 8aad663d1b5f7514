/* mpi_internal.h: what the files of the MPI backend share and no other
 * module uses.  The backend (backend_mpi.h) is split by concern:
 *
 *   mpi_fault.c        the job-wide fault protocol: failure, closing and
 *                      departure notices on the alarm communicator, probes
 *                      and the roll call that name lost or silent peers
 *   mpi_wait.c         waits bounded by timeout_s
 *   mpi_types.c        dtypes and reduction ops in MPI terms (f16/bf16 as
 *                      user-defined operations)
 *   mpi_init.c         initialisation, lanes, agreement, leaving, finalize
 *   mpi_allreduce.c    the allreduce: in shared memory, by the runtime's
 *                      ring (half types, and f32 between hosts of one rank
 *                      each) or by MPI
 *   mpi_collectives.c  the hooks' collectives as comm.h's table (the other
 *                      blocking ones here)
 *   mpi_small.c        the runtime's own small collectives
 *   mpi_nonblocking.c  nonblocking collectives (ABI minor 2)
 *   mpi_fingerprint.c  the collectives' fingerprints ([runtime]
 *                      check_collectives)
 *   mpi_groups.c       barriers, splits, the ranks of a host
 *   mpi_backend.c      the job backend's and the control plane's tables */
#ifndef DDPH_MPI_INTERNAL_H
#define DDPH_MPI_INTERNAL_H

#include <mpi.h>
#include <stddef.h>

#include "backends/mpi/backend_mpi.h"

/* Every tag the backend sends with, in one place.  The notices, pings and
 * answers go on the alarm communicator; the ring's messages on the
 * group's own communicator. */
enum {
    DDPH__TAG_NOTICE = 17, /* a failure notice */
    DDPH__TAG_CLOSE = 18,  /* ddph_close reached */
    DDPH__TAG_DEPART = 19, /* left the steps (departure notice) */
    DDPH__TAG_PING = 20,   /* 0 bytes: ignored; 1 byte: answer with ANSWER */
    DDPH__TAG_ANSWER = 21,
    DDPH__TAG_RING = 22 /* the ring's pieces */
};

/* Elements per MPI call: counts are int in MPI-3. */
#define DDPH__MPI_CHUNK ((size_t)1 << 30)
/* Ring sums (mpi_allreduce.c): half-precision ones below this go through
 * MPICH's allreduce, and f32 ones whose chunk a rank is below it. */
#define DDPH__MPI_RING_MIN_BYTES ((size_t)32 << 10)

/* Elements of the next piece of an allreduce or broadcast of `count`
 * elements of `es` bytes (DDPH__MPI_PIECE_BYTES). */
static inline size_t ddph__mpi_piece(size_t count, size_t es)
{
    size_t most = DDPH__MPI_PIECE_BYTES / es;
    return count < most ? count : most;
}

/* ---- the tables (mpi_collectives.c, mpi_backend.c) ---- */
/* A group the tables handed out is the head of one of this backend's. */
static inline ddph_mpi_group *G(struct ddph_group *g)
{
    return (ddph_mpi_group *)g;
}

/* This backend's state of a nonblocking collective, kept in the op. */
_Static_assert(sizeof(ddph_mpi_op) <= DDPH__COMM_OP_STATE,
               "ddph_mpi_op must fit in ddph_comm_op.state");

static inline ddph_mpi_op *OP(ddph_comm_op *op)
{
    return (ddph_mpi_op *)(void *)op->state;
}

/* A group this backend made (st: how the making went), handed out as its
 * head.  Called after the making, as a statement of its own: as an
 * argument beside the call, g could be read before the call sets it. */
static inline ddph_status handed(ddph_status st, ddph_mpi_group *g,
                          struct ddph_group **out)
{
    *out = st == DDPH_OK ? &g->head : NULL;
    return st;
}

/* ---- mpi_fault.c ---- */
/* Frees the departure notices whose sends are done (all with force). */
void ddph__mpi_departures_collect(ddph_mpi *m, int force);
/* Sends this rank's failure notice to every peer. */
void ddph__mpi_notify_peers(ddph_mpi *m);
/* The job's failure as seen while a collective waits (a notice, a
 * departure, a closed peer), or DDPH_OK; polls the alarm. */
ddph_status ddph__mpi_collective_fault(ddph_mpi *m, ddph_err *err);
/* An MPI error code rc from `what`: recorded as the job's failure. */
ddph_status ddph__mpi_failed(ddph_mpi *m, ddph_err *err, int rc,
                             const char *what);
/* `what` did not complete within timeout_s (since: " of its start" or
 * ""): names the lost or silent peers, records the failure. */
ddph_status ddph__mpi_timed_out(ddph_mpi *m, const char *what,
                                const char *since, ddph_err *err);

/* ---- mpi_wait.c ---- */
/* MPI_Test over reqs; *done when all completed.  An MPI error code. */
int ddph__mpi_test_all(int n, MPI_Request *reqs, int *done);
/* Waits for reqs until done, the job breaks, or timeout_s after start. */
ddph_status ddph__mpi_wait_timed_all(ddph_mpi *m, int n, MPI_Request *reqs,
                                     double start, const char *what,
                                     ddph_err *err);
ddph_status ddph__mpi_wait_timed(ddph_mpi *m, MPI_Request *req,
                                 const char *what, ddph_err *err);
/* The same for one round of the ring: yields at once while the machine's
 * cores are all wanted. */
ddph_status ddph__mpi_wait_round(ddph_mpi *m, int n, MPI_Request *reqs,
                                 double start, const char *what, ddph_err *err);

/* ---- mpi_types.c ---- */
MPI_Datatype ddph__mpi_type(const ddph_mpi *m, ddph_dtype t);
MPI_Op ddph__mpi_op(const ddph_mpi *m, ddph_dtype t, ddph_redop op);
int ddph__mpi_valid(ddph_dtype t, ddph_redop op);
/* The f16/bf16 type and operations, made at init and freed at finalize. */
void ddph__mpi_types_init(ddph_mpi *m);
void ddph__mpi_types_free(ddph_mpi *m);

/* ---- mpi_fingerprint.c ---- */
/* Checks this thread's pending fingerprint exchange while `waiting` (the
 * collective's own request) is polled: every wait's ddph_mpi.wait_poll. */
ddph_status ddph__mpi_fp_poll(const MPI_Request *waiting, ddph_err *err);

#endif
