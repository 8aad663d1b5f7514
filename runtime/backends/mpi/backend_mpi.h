/* backend_mpi.h: collectives on host memory over MPICH.
 *
 * The runtime works on a duplicate of MPI_COMM_WORLD so that its traffic
 * never matches the trainer's own MPI calls.  Every collective is started
 * non-blocking and polled against a deadline, so that a peer that died or
 * diverged turns into DDPH_ERR_TIMEOUT with a message instead of a hang.
 * f16 and bf16 travel as 2-byte opaque types with user reduction ops that
 * round after every addition (as gloo does).
 *
 * Faults (docs/reliability.md): the first collective that fails or times
 * out breaks the job.  From then on every collective fails at once with
 * the first failure's status and message, and finalize calls no collective
 * and does not finalize MPI.  A rank that fails tells every peer with a
 * short notice on a second duplicate of the world (the alarm
 * communicator); a rank waiting on a collective polls it, so the peers of
 * a failed rank stop within about 50 ms (the probe interval), with that
 * rank's message, instead of waiting for timeout_s.
 *
 * Implemented in the mpi_*.c files of this folder, one concern each
 * (mpi_internal.h lists them). */
#ifndef DDPH_BACKEND_MPI_H
#define DDPH_BACKEND_MPI_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include <ddphook/plugin.h>

#include "backends/comm.h"
#include "backends/peer_notices.h"
#include "support/config.h"
#include "support/util.h"

struct ddph_shared_segment; /* shared_buckets.h */

/* The MPI backend's group: comm.h's head (rank and size, read here by
 * name), then the communicators. */
typedef struct ddph_mpi_group {
    union {
        struct ddph_group head; /* what the tables hand out */
        struct {
            int rank, size;
        };
    };
    MPI_Comm comm;
    MPI_Comm fingerprints; /* comm's twin for the collectives' fingerprints
                              (MPI_COMM_NULL: not checked) */
    int64_t sequence;      /* collectives issued on comm by hooks so far */
    uint64_t digest;       /* of their fingerprints, for the end of step */
    int owned;               /* comm is freed with the group */
    int world_order;         /* the world's ranks in its order (the world,
                                a lane): shared buckets apply */
    struct ddph_mpi_group *next; /* groups made on behalf of hooks */
    /* The half-precision ring's receive buffer: a group is used by one
     * thread at a time. */
    char *scratch;
    size_t scratch_bytes;
} ddph_mpi_group;

/* Longest message a failure notice carries. */
#define DDPH__NOTICE_LEN 1024

/* The largest piece of one allreduce or broadcast, in bytes.  MPICH 4.0
 * over shared memory is ten times slower per byte for messages of 32 MiB
 * and more (475 MiB in 31 MiB pieces: 0.09 s; in 32 MiB pieces: 1.2 s;
 * notes/performance-history.md, "Large messages"), so a larger bucket is reduced in
 * pieces of this size, one after the other.  The benchmark's raw baseline
 * uses the same pieces. */
#define DDPH__MPI_PIECE_BYTES ((size_t)16 << 20)

typedef struct ddph_mpi {
    ddph_mpi_group world;
    MPI_Comm alarm;      /* notices, and the barrier of ddph_close: never
                            a collective a peer could match with a step's */
    ddph_mpi_group trainer; /* the trainer's own collectives (ddph_barrier,
                                  replica checks), likewise never matched
                                  with a step's */
    int initialized_mpi; /* ddph_open called MPI_Init_thread */
    int left;            /* ddph__mpi_leave was called */
    int thread_level;
    double timeout_s;
    MPI_Datatype half_type;          /* f16 and bf16 */
    MPI_Op ops[DDPH_DTYPE_COUNT][3]; /* user ops for the half types */
    ddph_mpi_group *groups;       /* every split, freed at finalize */
    int node_rank, node_size; /* this rank's index among the ranks of
                                 its host, and their number (set by
                                 ddph__mpi_find_node) */
    int one_rank_per_host;    /* no host has two ranks of the world (set
                                 by ddph__mpi_find_node) */
    /* Bucket memory shared by the ranks of a one-host job
     * (shared_buckets.h): added by model finalize, read by the lanes. */
    struct ddph_shared_segment *_Atomic segments;
    int64_t segments_made;

    /* The fault state: set once, read by every thread. */
    atomic_int broken;
    pthread_mutex_t fault_mu;
    int fault_notified;   /* peers were told (or the fault came from one) */
    ddph_status fault_status;
    char fault_msg[DDPH__NOTICE_LEN];
    struct {              /* the notice this rank sent: it must outlive */
        int32_t status;   /* the sends, which are never waited for */
        char msg[DDPH__NOTICE_LEN];
    } notice;

    /* Closing: a rank that enters ddph_close tells its peers how many
     * synchronised steps it did; a peer waiting on a collective of a later
     * step (which the closing rank will never join) then fails at once. */
    atomic_llong syncs_done;  /* synchronised steps this rank completed */
    atomic_int closing;       /* this rank is in ddph_close */
    atomic_int in_sync_step;  /* between a synchronising step_begin and
                                 its step_wait */
    int64_t close_notice;     /* what this rank sent (outlives the sends) */
    atomic_int closes_received; /* closing notices received so far */

    /* Leaving the steps without closing: a rank whose data ended
     * (DDPH_STEP_LAST) or that calls a trainer collective (ddph_barrier,
     * ...) tells its peers after how many synchronised steps, and how many
     * trainer calls it has made; a peer waiting on a step's collective
     * past that point, that has not made as many trainer calls, fails at
     * once instead of after timeout_s (uneven inputs). */
    atomic_llong trainer_calls;   /* this rank's, so far */
    int check_collectives;        /* [runtime] check_collectives */
    /* What every bounded wait (mpi_wait.c) polls besides its own
     * requests: the calling thread's pending fingerprint exchange
     * (mpi_fingerprint.c, which waits through mpi_wait.c: hence a
     * pointer, set by ddph__mpi_init, and not a call). */
    ddph_status (*wait_poll)(const MPI_Request *waiting, ddph_err *err);
    struct ddph_departure *departures; /* notices sent, until delivered */
    /* Each peer's latest departure and close (peer_notices.h). */
    ddph_peer_notices *notices;
    atomic_llong alarm_polled_us; /* when the alarms were last probed */
    /* When each peer was last heard on the alarm communicator (any
     * message, microseconds of ddph__now): a rank whose collective timed
     * out asks every peer to answer, and names those that stay silent. */
    atomic_llong *heard_us;
    /* The job's models by id (their finalize order, the same on every
     * rank), named in fingerprint mismatches. */
    char model_names[DDPH__MAX_NAMED_MODELS][64];
} ddph_mpi;

/* Initialises MPI if needed (MPI_THREAD_MULTIPLE), dups the world twice
 * (collectives, alarms), within timeout_s. */
ddph_status ddph__mpi_init(ddph_mpi *m, int *argc, char ***argv,
                           double timeout_s, ddph_err *err);
/* ddph_close begins: the peers learn that this rank will join no
 * collective of a synchronised step after its syncs_done-th. */
void ddph__mpi_closing(ddph_mpi *m);
/* 1 when peer `rank`'s closing notice has arrived (the alarms read now),
 * its synchronised steps in *after; else 0. */
int ddph__mpi_peer_closed(ddph_mpi *m, int rank, int64_t *after);
/* This rank leaves the steps for now: its data ended (no more steps
 * follow), or it calls the trainer collective `what` (counted). */
void ddph__mpi_depart(ddph_mpi *m, int kind, const char *what);
/* The last collective of a job: every rank meets (on the alarm
 * communicator) within timeout_s, or the job is broken (and the peers
 * told).  `local` is the first error this rank's calls reported (DDPH_OK
 * if none); *job gets the status of the lowest rank that reported one,
 * *job_rank that rank (DDPH_OK and -1 when no rank reported one). */
ddph_status ddph__mpi_leave(ddph_mpi *m, ddph_status local,
                            ddph_status *job, int *job_rank, ddph_err *err);
/* Ends the job: on a healthy job every rank meets in a barrier (within
 * timeout_s, unless ddph__mpi_leave did it), then the communicators are
 * freed and MPI is finalized if ddph_open initialised it.  On a broken job, or when the barrier fails,
 * nothing collective is called and MPI is left as it is (the process is
 * expected to exit non-zero); the job's failure is returned in err. */
ddph_status ddph__mpi_finalize(ddph_mpi *m, ddph_err *err);

/* MPI_Finalize under a watchdog: if it has not returned after limit_s
 * (MPICH 4.0's ch4:ucx finalize can deadlock between hosts once the job is
 * over), the process exits with status 0, saying so on stderr.  Call it
 * only when every rank has ended its work (after a barrier). */
void ddph__mpi_finalize_watched(double limit_s);

/* Whether this job's MPI_Finalize can hang as above: MPICH 3.4-4.1 on
 * ch4:ucx, ranks on more than one host, UCX_TLS forcing TCP between them,
 * and preload/mpich-finalize.so not loaded.  If so, msg (n bytes) says
 * what to do.  Call after ddph__mpi_find_node. */
int ddph__mpi_finalize_hazard(const ddph_mpi *m, char *msg, size_t n);

/* Breaks the job because of a failure on this rank and tells every peer
 * (once: later calls only keep the first failure).  msg should name the
 * rank, and the bucket or the call that failed. */
void ddph__mpi_fail_job(ddph_mpi *m, ddph_status st, const char *msg);
/* Keeps MPI progressing for `seconds` (the notices just sent leave this
 * rank even when no other thread calls MPI): for a process about to end. */
void ddph__mpi_linger(ddph_mpi *m, double seconds);
/* Whether the job is broken (polls the alarms first).  If it is, err gets
 * the first failure's message and the return value is its status;
 * DDPH_OK otherwise. */
ddph_status ddph__mpi_fault(ddph_mpi *m, ddph_err *err);
/* Collective agreement on a local outcome: every rank gives its status and
 * message; all get DDPH_OK, or the status of the lowest failing rank with
 * its message ("rank R failed: ..." on the others).  Two small collectives
 * on success, three on failure. */
ddph_status ddph__mpi_agree(ddph_mpi *m, ddph_status local,
                            const char *local_msg, ddph_err *err);

ddph_status ddph__mpi_allreduce(ddph_mpi *m, ddph_mpi_group *g, void *buf,
                                size_t count, ddph_dtype dtype, ddph_redop op,
                                ddph_err *err);
/* A barrier on g within timeout_s; `what` names it in a timeout. */
ddph_status ddph__mpi_barrier(ddph_mpi *m, ddph_mpi_group *g,
                              const char *what, ddph_err *err);
/* `what` names the collective in a failure ("allgather" for a hook's). */
ddph_status ddph__mpi_allgather(ddph_mpi *m, ddph_mpi_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, const char *what,
                                ddph_err *err);

/* A collective started and not yet waited for: its requests (an allreduce
 * over DDPH__MPI_PIECE_BYTES has one per piece, all in flight at once),
 * and the int counts an allgatherv reads until it completes.  It must
 * complete within timeout_s of `start`.  Ended by ddph__mpi_op_wait, or by
 * ddph__mpi_op_test reporting done or an error; when it ends in an error
 * the arrays are left allocated, since MPI may still use them. */
typedef struct ddph_mpi_op {
    const char *what;
    double start;
    int nreqs;
    MPI_Request *reqs;
    int *counts, *displs;
} ddph_mpi_op;

ddph_status ddph__mpi_start_allreduce(ddph_mpi *m, ddph_mpi_group *g,
                                      void *buf, size_t count,
                                      ddph_dtype dtype, ddph_redop op,
                                      ddph_mpi_op *out, ddph_err *err);
ddph_status ddph__mpi_start_allgather(ddph_mpi *m, ddph_mpi_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_mpi_op *out, ddph_err *err);
ddph_status ddph__mpi_start_allgatherv(ddph_mpi *m, ddph_mpi_group *g,
                                       const void *send, void *recv,
                                       const size_t *counts, ddph_dtype dtype,
                                       ddph_mpi_op *out, ddph_err *err);
ddph_status ddph__mpi_start_alltoall(ddph_mpi *m, ddph_mpi_group *g,
                                     const void *send, void *recv,
                                     size_t count, ddph_dtype dtype,
                                     ddph_mpi_op *out, ddph_err *err);
/* Waits for op within timeout_s of its start (or a broken job). */
ddph_status ddph__mpi_op_wait(ddph_mpi *m, ddph_mpi_op *op, ddph_err *err);
/* *done = 1 when op completed (and is ended); an error ends it too. */
ddph_status ddph__mpi_op_test(ddph_mpi *m, ddph_mpi_op *op, int *done,
                              ddph_err *err);
/* Moves op along (MPI progresses only inside its calls) without ending
 * it: its completed requests become MPI_REQUEST_NULL, which a later wait
 * or test takes as done.  A failure, a broken job or the deadline is
 * returned; op is then left for the wait that ends it. */
ddph_status ddph__mpi_op_progress(ddph_mpi *m, ddph_mpi_op *op, ddph_err *err);

/* With a hook's collective `what` on g (with check_collectives): every
 * rank of g gives its fingerprint (the collective's number on g, kind,
 * dtype, count, op, root, and the model, iteration and bucket the hook is
 * reducing) on g's twin communicator, and all are compared.  The exchange
 * runs while the collective does: it is checked when the calling thread's
 * next hook collective starts, while the thread waits on a collective,
 * and at ddph__mpi_fingerprint_settle (after each hook call), so a
 * mismatched step never completes.  A rank that calls an extra, a missing
 * or a different collective fails the job on every rank, with
 * DDPH_ERR_MISMATCH naming the ranks and what each called.  `model` is
 * the model's id (ddph__mpi_model_named), -1 for none; `offset` the byte
 * where the data starts in the hook's bucket, -1 outside it.  `counts`
 * (an allgatherv's, one per rank of g; NULL for the others) is compared
 * whole: counts that differ but add up to the same total fail too, naming
 * the first count this rank expects other than its sender sends. */
ddph_status ddph__mpi_fingerprint(ddph_mpi *m, ddph_mpi_group *g,
                                  const char *what, ddph_dtype dtype,
                                  size_t count, const size_t *counts, int op,
                                  int root, int64_t model, int64_t iteration,
                                  int64_t bucket, int64_t offset,
                                  ddph_err *err);
/* Waits for the calling thread's fingerprint exchange still in flight, if
 * any, and compares it (within timeout_s). */
ddph_status ddph__mpi_fingerprint_settle(ddph_mpi *m, ddph_err *err);
/* Names model id `id` in mismatch messages (ids past the table's end are
 * shown as numbers). */
void ddph__mpi_model_named(ddph_mpi *m, int64_t id, const char *name);

/* A trainer call (`what`: "ddph_barrier", "ddph_allreduce_f64",
 * "ddph_average_f64", "ddph_broadcast") about to run on the trainer
 * communicator: with check_collectives every rank's call is compared
 * first (its number, kind, count, dtype, op and root), so calls that
 * differ fail on every rank, naming both, before they meet in MPI. */
ddph_status ddph__mpi_trainer_call(ddph_mpi *m, const char *what,
                                   ddph_dtype dtype, size_t count, int op,
                                   int root, ddph_err *err);

/* The end-of-step agreement (with check_collectives): one small exchange
 * on each lane's twin communicator, in the same sequence as the lane's
 * collectives' fingerprints.  A rank that skipped, added or reordered a
 * collective, or whose step differs in s, meets a different record: the
 * job fails on every rank in this very step, naming the rank and what
 * differed.  Every lane's exchange is started before any is waited for. */
ddph_status ddph__mpi_step_agree(ddph_mpi *m, ddph_mpi_group *const *groups,
                                 int n, const ddph_step_summary *s,
                                 ddph_err *err);

/* Raw bytes, for the runtime's own agreement checks. */
ddph_status ddph__mpi_bcast_bytes(ddph_mpi *m, void *buf, size_t n, int root,
                                  ddph_err *err);
ddph_status ddph__mpi_allreduce_i64(ddph_mpi *m, int64_t *v, size_t n,
                                    ddph_redop op, ddph_err *err);

/* Concatenates every rank's bytes on rank 0 into *out (malloc'd, rank
 * order; NULL elsewhere). */
ddph_status ddph__mpi_gather_bytes(ddph_mpi *m, const void *buf, size_t n,
                                   char **out, size_t *total, ddph_err *err);

/* The communicators of the communication lanes: out[0] is the world,
 * out[1..n-1] duplicates of it, made within timeout_s.  Collective: every
 * rank must ask for the same n. */
ddph_status ddph__mpi_lane_groups(ddph_mpi *m, int n,
                                  ddph_mpi_group **out, ddph_err *err);
ddph_status ddph__mpi_split(ddph_mpi *m, ddph_mpi_group *parent, int color,
                            int key, ddph_mpi_group **out, ddph_err *err);
ddph_status ddph__mpi_intra_node(ddph_mpi *m, ddph_mpi_group **out,
                                 ddph_err *err);
/* Where this rank is among the ranks of its host (a shared-memory split
 * of the world, timed): sets node_rank, node_size and one_rank_per_host.
 * Collective; called once by ddph_open. */
ddph_status ddph__mpi_find_node(ddph_mpi *m, ddph_err *err);

/* The MPI backend's tables (mpi_collectives.c, mpi_backend.c). */
extern const ddph_comm_ops ddph__mpi_comm_ops;
extern const ddph_control_ops ddph__mpi_control_ops;

static inline ddph_comm ddph__mpi_comm(ddph_mpi *m)
{
    return (ddph_comm){&ddph__mpi_comm_ops, m};
}

static inline ddph_control ddph__mpi_control(ddph_mpi *m)
{
    return (ddph_control){&ddph__mpi_control_ops, m};
}

#endif
