/* comm.h: the collectives a hook and the reducer use, as one table that
 * every backend fills: the MPI backend (backends/mpi/mpi_collectives.c,
 * host memory), the NCCL module (backends/nccl/backend_nccl.c, device
 * memory), `ddphook plan`'s recorder and the tests' fake communicator.  A
 * context chooses its backend once, when it opens (ddph_ctx.comm), and
 * hands it to every hook; plugin/services.c then checks, counts and
 * traces each collective in one place and calls the table, whatever the
 * backend.
 *
 * The job's control plane (faults, agreement, the lanes' communicators,
 * the steps' bookkeeping that tells peers where a rank is) is the second
 * table here, ddph_control_ops: core/ reaches the job through it and
 * through the job backend's table (backend.h: opening, closing, the
 * trainer's own collectives), so that the reducer runs over the tests'
 * fake communicator too.
 *
 * Nothing here names a backend: groups and the state of a nonblocking
 * collective are each backend's own (a group begins with the neutral head
 * below, an op carries opaque room for the backend's requests). */
#ifndef DDPH_COMM_H
#define DDPH_COMM_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

#include "support/util.h"

/* A group of ranks.  Every backend's group begins with this head (its
 * first member), which core/ and the services read; the rest is the
 * backend's own (the MPI backend's communicators, NCCL's). */
struct ddph_group {
    int rank, size;
};

/* Room for a backend's state of one nonblocking collective, kept in the
 * op itself so that starting one allocates nothing (each backend checks
 * at compile time that its state fits). */
#define DDPH__COMM_OP_STATE 64

/* A nonblocking collective from its start until wait or test ends it.
 * The caller sets group, what and start before the start call; the
 * backend keeps its own state in the rest. */
typedef struct ddph_comm_op {
    struct ddph_group *group;
    const char *what; /* "iallreduce", ...: named in failures */
    double start;     /* ddph__now() at the start: the deadline's origin */
    /* The backend's own state of the collective (MPI: its requests). */
    _Alignas(max_align_t) unsigned char state[DDPH__COMM_OP_STATE];
    ddph_status done; /* a backend that completes at the start: its status */
} ddph_comm_op;

typedef struct ddph_comm_ops {
    const char *name; /* "mpi", "nccl", "fake" */

    /* The world group, with this rank and the job's size. */
    struct ddph_group *(*world)(void *self);
    ddph_status (*split)(void *self, struct ddph_group *parent, int color,
                         int key, struct ddph_group **out, ddph_err *err);
    ddph_status (*intra_node)(void *self, struct ddph_group **out,
                              ddph_err *err);

    /* Blocking collectives: plugin.h's definitions. */
    ddph_status (*allreduce)(void *self, struct ddph_group *g, void *buf,
                             size_t count, ddph_dtype dtype, ddph_redop op,
                             ddph_err *err);
    ddph_status (*allgather)(void *self, struct ddph_group *g,
                             const void *send, void *recv, size_t count,
                             ddph_dtype dtype, ddph_err *err);
    ddph_status (*allgatherv)(void *self, struct ddph_group *g,
                              const void *send, void *recv,
                              const size_t *counts, ddph_dtype dtype,
                              ddph_err *err);
    ddph_status (*broadcast)(void *self, struct ddph_group *g, void *buf,
                             size_t count, ddph_dtype dtype, int root,
                             ddph_err *err);
    ddph_status (*reduce_scatter)(void *self, struct ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_redop op,
                                  ddph_err *err);
    ddph_status (*alltoall)(void *self, struct ddph_group *g,
                            const void *send, void *recv, size_t count,
                            ddph_dtype dtype, ddph_err *err);

    /* Nonblocking: started into *op, then ended by wait, or by test
     * setting *done (a failure ends it too).  progress moves op along
     * without ending it; it returns a failure or the passed deadline. */
    ddph_status (*start_allreduce)(void *self, struct ddph_group *g,
                                   void *buf, size_t count, ddph_dtype dtype,
                                   ddph_redop op, ddph_comm_op *out,
                                   ddph_err *err);
    ddph_status (*start_allgather)(void *self, struct ddph_group *g,
                                   const void *send, void *recv, size_t count,
                                   ddph_dtype dtype, ddph_comm_op *out,
                                   ddph_err *err);
    ddph_status (*start_allgatherv)(void *self, struct ddph_group *g,
                                    const void *send, void *recv,
                                    const size_t *counts, ddph_dtype dtype,
                                    ddph_comm_op *out, ddph_err *err);
    ddph_status (*start_alltoall)(void *self, struct ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_comm_op *out,
                                  ddph_err *err);
    ddph_status (*wait)(void *self, ddph_comm_op *op, ddph_err *err);
    ddph_status (*test)(void *self, ddph_comm_op *op, int *done,
                        ddph_err *err);
    ddph_status (*progress)(void *self, ddph_comm_op *op, ddph_err *err);

    /* The collectives' fingerprints (backend_mpi.h, check_collectives),
     * compared while the collective runs; NULL where the backend does not
     * compare them (the stream orders a GPU's). */
    ddph_status (*fingerprint)(void *self, struct ddph_group *g,
                               const char *what, ddph_dtype dtype,
                               size_t count, const size_t *counts, int op,
                               int root, int64_t model,
                               int64_t iteration, int64_t bucket,
                               int64_t offset, ddph_err *err);
    ddph_status (*fingerprint_settle)(void *self, ddph_err *err);
} ddph_comm_ops;

/* A backend: its table and its state, chosen once per context. */
typedef struct ddph_comm {
    const ddph_comm_ops *ops;
    void *self;
} ddph_comm;

/* What defines a synchronising step, compared across ranks at its end. */
typedef struct ddph_step_summary {
    int64_t models;      /* a bit per model id stepped (a digest with the
                            sign bit set past 62 models) */
    int64_t passes;      /* backward passes synchronised (first model) */
    int64_t digest;      /* hooks' identities, every model's passes */
    int64_t trainer_calls; /* trainer calls made so far */
    int64_t iteration;   /* the first model's synchronised steps so far */
    int64_t first_model; /* its id */
    int64_t passes_digest; /* every model's passes */
    int64_t join_role;   /* DDPH__STEP_PLAIN, or the rank's part under join */
} ddph_step_summary;

/* What a rank's passes must match at a step's end.  Without join every
 * rank's must be the same (PLAIN).  Under [runtime] join the ranks
 * still TRAINING must agree; a rank whose DATA_ENDED (a step flagged
 * END_OF_DATA or LAST) may have synchronised fewer passes than they (its
 * data cut its window short), never more; a JOINED rank's shadow step has
 * none of its own. */
enum {
    DDPH__STEP_PLAIN = -1,
    DDPH__STEP_TRAINING = 0,
    DDPH__STEP_DATA_ENDED = 1,
    DDPH__STEP_JOINED = 2
};

/* The job's control plane as core/ sees it (backend_mpi.h says what each
 * does over MPI).  A fake serves at least rank to lane_groups, what the
 * reducer calls. */
typedef struct ddph_control_ops {
    /* The job's world: this rank and the job's size.  core/ reads them
     * here only (the state lives as long as the job). */
    struct ddph_group *(*world)(void *self);
    /* DDPH_OK, or the job's first failure (err gets its message). */
    ddph_status (*fault)(void *self, ddph_err *err);
    /* Whether the job is broken, without polling the peers. */
    int (*broken)(void *self);
    /* Breaks the job because of this rank's failure; the peers hear it. */
    void (*fail)(void *self, ddph_status st, const char *msg);
    /* Every rank's outcome: DDPH_OK, or the lowest failing rank's. */
    ddph_status (*agree)(void *self, ddph_status local, const char *local_msg,
                         ddph_err *err);
    /* The lanes' groups: out[0] the world, out[1..n-1] duplicates. */
    ddph_status (*lane_groups)(void *self, int n, struct ddph_group **out,
                               ddph_err *err);

    /* The runtime's own small collectives on the world (agreements, roll
     * calls, state files). */
    ddph_status (*allreduce_i64)(void *self, int64_t *v, size_t n,
                                 ddph_redop op, ddph_err *err);
    ddph_status (*bcast_bytes)(void *self, void *buf, size_t n, int root,
                               ddph_err *err);
    /* The end-of-step agreement of the lanes' groups. */
    ddph_status (*step_agree)(void *self, struct ddph_group *const *groups,
                              int n, const ddph_step_summary *s,
                              ddph_err *err);
    /* Where this rank is, for its peers: in a synchronising step or not
     * (returns what it was), one more synchronised step done, how many,
     * and the trainer calls made so far. */
    int (*in_sync_step)(void *self, int on);
    void (*step_synced)(void *self);
    int64_t (*syncs_done)(void *self);
    int64_t (*trainer_calls)(void *self);
    /* This rank leaves the steps (DDPH__DEPART_*, below), or closes the
     * job. */
    void (*depart)(void *self, int kind, const char *what);
    void (*closing)(void *self);
    /* 1 when peer `rank`'s closing notice (ddph_close) has arrived, the
     * notices read now; *after: its synchronised steps.  0: not yet. */
    int (*peer_closed)(void *self, int rank, int64_t *after);
    /* Names model id `id` in the peers' mismatch messages. */
    void (*model_named)(void *self, int64_t id, const char *name);
} ddph_control_ops;

/* What a departure says this rank is doing: its data ended, or it calls
 * a trainer collective (and peer_notices.h's DDPH__DEPART_CLOSED: it
 * closed the job). */
enum { DDPH__DEPART_DATA_END = 1, DDPH__DEPART_TRAINER_CALL = 2 };

typedef struct ddph_control {
    const ddph_control_ops *ops;
    void *self;
} ddph_control;

/* The control plane's calls, one each (the table above says what each
 * does). */
static inline struct ddph_group *ddph__ctl_world(ddph_control c)
{
    return c.ops->world(c.self);
}

static inline ddph_status ddph__ctl_fault(ddph_control c, ddph_err *err)
{
    return c.ops->fault(c.self, err);
}

static inline int ddph__ctl_broken(ddph_control c)
{
    return c.ops->broken(c.self);
}

static inline void ddph__ctl_fail(ddph_control c, ddph_status st,
                                  const char *msg)
{
    (c.ops->fail)(c.self, st, msg); /* (check.h defines a macro fail) */
}

static inline ddph_status ddph__ctl_agree(ddph_control c, ddph_status local,
                                          const char *local_msg, ddph_err *err)
{
    return c.ops->agree(c.self, local, local_msg, err);
}

static inline ddph_status ddph__ctl_lane_groups(ddph_control c, int n,
                                                struct ddph_group **out,
                                                ddph_err *err)
{
    return c.ops->lane_groups(c.self, n, out, err);
}

static inline ddph_status ddph__ctl_allreduce_i64(ddph_control c, int64_t *v,
                                                  size_t n, ddph_redop op,
                                                  ddph_err *err)
{
    return c.ops->allreduce_i64(c.self, v, n, op, err);
}

static inline ddph_status ddph__ctl_bcast_bytes(ddph_control c, void *buf,
                                                size_t n, int root,
                                                ddph_err *err)
{
    return c.ops->bcast_bytes(c.self, buf, n, root, err);
}

static inline ddph_status
ddph__ctl_step_agree(ddph_control c, struct ddph_group *const *groups, int n,
                     const ddph_step_summary *s, ddph_err *err)
{
    return c.ops->step_agree(c.self, groups, n, s, err);
}

static inline int ddph__ctl_in_sync_step(ddph_control c, int on)
{
    return c.ops->in_sync_step(c.self, on);
}

static inline void ddph__ctl_step_synced(ddph_control c)
{
    c.ops->step_synced(c.self);
}

static inline int64_t ddph__ctl_syncs_done(ddph_control c)
{
    return c.ops->syncs_done(c.self);
}

static inline int64_t ddph__ctl_trainer_calls(ddph_control c)
{
    return c.ops->trainer_calls(c.self);
}

static inline void ddph__ctl_depart(ddph_control c, int kind, const char *what)
{
    c.ops->depart(c.self, kind, what);
}

static inline void ddph__ctl_closing(ddph_control c)
{
    c.ops->closing(c.self);
}

/* (0 from a control plane with no closing notices: the tests' fake.) */
static inline int ddph__ctl_peer_closed(ddph_control c, int rank,
                                        int64_t *after)
{
    return c.ops->peer_closed ? c.ops->peer_closed(c.self, rank, after) : 0;
}

static inline void ddph__ctl_model_named(ddph_control c, int64_t id,
                                         const char *name)
{
    c.ops->model_named(c.self, id, name);
}

#endif
