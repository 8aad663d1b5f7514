/* torch_internal.h: the torch backend's state and helpers, shared by its
 * tables (torch_backend.c: collectives, groups, the job) and its control
 * plane (torch_control.c: agreements, fingerprints, leaving). */
#ifndef DDPH_TORCH_INTERNAL_H
#define DDPH_TORCH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/torch/torch_pg.h"

/* A group as the tables hand it out: comm.h's head first. */
typedef struct torch_group {
    struct ddph_group head;
    tpg_group *pg;
    tpg_group *checks; /* the fingerprints' twin (a hook group's), or pg */
    char name[96];   /* its rendezvous in the store */
    int made;        /* groups made from it so far: names the next */
    struct torch_group *next;
    /* The hooks' collectives on this group so far (check_collectives):
     * how many, and a digest of their fingerprints, compared by the
     * end-of-step agreement of the lanes. */
    int64_t collectives;
    uint64_t digest;
} torch_group;

typedef struct torch_state {
    torch_group world;   /* hooks' collectives (lane 0) */
    torch_group control; /* the runtime's own: agreements, leave */
    torch_group trainer; /* ddph_barrier, replica checks */
    torch_group *groups; /* lanes and splits, freed at close */
    pthread_mutex_t mu;  /* guards groups */
    tpg_job *job;
    double timeout_s;
    int host_index;      /* which host (its first rank), from find_host */
    int up;              /* open made every group */
    int left;            /* leave met every rank */
    int check_collectives; /* [runtime] check_collectives */
    atomic_int in_sync_step;
    atomic_llong syncs_done, trainer_calls;
} torch_state;

/* This backend's state of a nonblocking collective, kept in the op. */
typedef struct torch_op {
    tpg_work *work;
} torch_op;
_Static_assert(sizeof(torch_op) <= DDPH__COMM_OP_STATE,
               "torch_op must fit in ddph_comm_op.state");

static inline torch_op *OP(ddph_comm_op *op)
{
    return (torch_op *)(void *)op->state;
}

static inline torch_group *G(struct ddph_group *g)
{
    return (torch_group *)g;
}

/* A torch_pg.h call's message into err (which may be NULL). */
#define E(e) (e).msg, sizeof (e).msg
static inline ddph_status out_err(ddph_status st, const ddph_err *e, ddph_err *err)
{
    return st == DDPH_OK ? st : ddph__fail(err, st, "%s", e->msg);
}

static inline void publish(torch_state *s)
{
    tpg_set_progress(s->job, atomic_load(&s->in_sync_step),
                     (int64_t)atomic_load(&s->syncs_done),
                     (int64_t)atomic_load(&s->trainer_calls));
}

/* One collective on g, to its end within timeout_s. */
ddph_status ddph__torch_run(torch_state *s, torch_group *g, const tpg_args *a,
                            const char *what, ddph_err *err);
/* The same on one of g's gloo groups (pg or its twin, checks). */
ddph_status ddph__torch_run_on(torch_state *s, tpg_group *pg,
                               const tpg_args *a, const char *what,
                               ddph_err *err);
/* A new group of `size` ranks named `name`, made collectively; freed at
 * close. */
ddph_status ddph__torch_new_group(torch_state *s, const char *name, int rank,
                                  int size, torch_group **out, ddph_err *err);

extern const ddph_control_ops ddph__torch_control_ops;
ddph_status ddph__torch_fault(void *self, ddph_err *err);
ddph_status ddph__torch_leave(void *self, ddph_status local, ddph_status *job,
                              int *job_rank, ddph_err *err);
/* The records the ranks of a hook group exchange with check_collectives
 * (torch_fingerprint.c): a collective's fingerprint before gloo runs it,
 * or an end of step (a kind of -1, then the TORCH_STEP_FIELDS of the
 * step's summary), all of one size: a rank with an extra or a missing
 * collective meets the others' end of step, never their data. */
enum { TORCH_RECORD_FIELDS = 12, TORCH_STEP_FIELDS = 8 };
/* Allgathers `mine` on g and compares every rank's: a difference fails
 * the job on every rank (DDPH_ERR_MISMATCH), naming the odd rank, what
 * each called and why it matters. */
ddph_status ddph__torch_exchange(torch_state *s, torch_group *g,
                                 const int64_t *mine, const char *what,
                                 ddph_err *err);
/* A hook's collective (comm.h): with check_collectives its fingerprint is
 * exchanged and compared before the collective starts, and folded into
 * its group's digest. */
ddph_status ddph__torch_fingerprint(void *self, struct ddph_group *g,
                                    const char *what, ddph_dtype dtype,
                                    size_t count, const size_t *counts,
                                    int op, int root, int64_t model,
                                    int64_t iteration, int64_t bucket,
                                    int64_t offset, ddph_err *err);
/* A trainer call about to run on the trainer group (backend.h): with
 * check_collectives every rank's is compared first, so calls that
 * differ in kind, size, op or root never meet in gloo. */
ddph_status ddph__torch_trainer_call(void *self, const char *what,
                                     ddph_dtype dtype, size_t count, int op,
                                     int root, ddph_err *err);
/* A split of `parent` about to gather its colors there: compared first,
 * as a hook collective (a hook that splits on one rank only must not
 * meet its peers' collectives in gloo). */
ddph_status ddph__torch_split_call(torch_state *s, torch_group *parent,
                                   ddph_err *err);

#endif
