/* backend.h: a job backend, as the core sees it.
 *
 * A backend joins the ranks of a job and carries its control plane and
 * its host collectives: MPI (built in, runtime/backends/mpi/), or a
 * module loaded at run time (registry.c lists them).  A device backend
 * (the nccl module, gpu.h) runs the hooks' collectives on GPU memory over
 * a job backend's control plane.
 *
 * The core holds a backend as this table and an opaque state it never
 * reads: it reaches the job only through the table, comm.h's collectives
 * (ddph_comm) and its control plane (ddph_control). */
#ifndef DDPH_BACKEND_H
#define DDPH_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backends/comm.h"

/* Bumped when the table changes in any way: a module is built from the
 * same tree as the library, and a different version is refused. */
#define DDPH__BACKEND_VERSION 1

/* What opening a job needs to know. */
typedef struct ddph_backend_args {
    int *argc; /* the program's arguments (MPI_Init may read them), */
    char ***argv; /* or NULL */
    double timeout_s;       /* every collective ends within it */
    int check_collectives;  /* [runtime] check_collectives */
    /* Marks the calling lane busy in a bounded wait (util.h), for a module
     * whose waits cannot reach the runtime's own thread-local clock: the
     * watchdog then leaves the wait to end by its own deadline, instead of
     * blaming the hook for being stuck in its own code. */
    void (*activity_touch)(void);
} ddph_backend_args;

/* Memory of one model's buckets shared by the ranks of a one-host job. */
typedef struct ddph_shared_memory {
    void *handle; /* the backend's */
    void *part;   /* this rank's part */
} ddph_shared_memory;

typedef struct ddph_backend_ops {
    uint32_t version;     /* DDPH__BACKEND_VERSION */
    uint32_t struct_size; /* sizeof(ddph_backend_ops) */
    const char *name;     /* [runtime] backend's value: "mpi", ... */

    /* Collective: this rank joins the job.  *state is set even when it
     * fails (its world is then this rank alone), and close frees it. */
    ddph_status (*open)(const ddph_backend_args *a, void **state,
                        ddph_err *err);
    /* Collective, once every rank agreed on the job file: this rank's
     * index among the ranks of its host, and their number. */
    ddph_status (*find_host)(void *state, int *host_rank, int *host_size,
                             ddph_err *err);
    /* The host collectives (hooks, the runtime's own), and the control
     * plane (comm.h). */
    ddph_comm (*comm)(void *state);
    ddph_control (*control)(void *state);

    /* The trainer's own collectives (ddph_barrier, replica checks) go to
     * this group through comm's table, never matched with a step's. */
    struct ddph_group *(*trainer_group)(void *state);
    /* Before a trainer collective `what`: compares its description across
     * ranks (with check_collectives); NULL where none is compared. */
    ddph_status (*trainer_call)(void *state, const char *what,
                                ddph_dtype dtype, size_t count, int op,
                                int root, ddph_err *err);
    /* A barrier on g within timeout_s; `what` names it in a timeout. */
    ddph_status (*barrier)(void *state, struct ddph_group *g,
                           const char *what, ddph_err *err);
    /* Every rank's bytes, one after the other in rank order, on rank 0
     * in *out (malloc'd; NULL elsewhere). */
    ddph_status (*gather_bytes)(void *state, const void *buf, size_t n,
                                char **out, size_t *total, ddph_err *err);

    /* Collective: one host's ranks share their buckets' memory when every
     * rank wants `bytes` (wanted) and all are on this host; out->handle
     * NULL otherwise (why says so; *failed when it could not be made).
     * NULL members: the backend shares none. */
    ddph_status (*shared_open)(void *state, size_t bytes, int wanted,
                               ddph_shared_memory *out, char *why,
                               size_t why_cap, int *failed, ddph_err *err);
    void (*shared_close)(void *state, void *handle);

    /* A warning about this job's shutdown, for rank 0 to log (1), or 0. */
    int (*close_hazard)(void *state, char *msg, size_t n);
    /* The job's last meeting: every rank gives its outcome; *job is the
     * worst, from *job_rank.  A failure: the job is broken. */
    ddph_status (*leave)(void *state, ddph_status local, ddph_status *job,
                         int *job_rank, ddph_err *err);
    /* Ends the job and frees state; on a broken job what a late peer may
     * still write into stays allocated.  Never blocks past timeout_s. */
    ddph_status (*close)(void *state, ddph_err *err);
    /* Keeps the job moving for `seconds` (notices just sent leave this
     * process) before it exits. */
    void (*linger)(void *state, double seconds);
} ddph_backend_ops;

/* A job backend: its table and its state. */
typedef struct ddph_backend {
    const ddph_backend_ops *ops;
    void *state;
} ddph_backend;

/* A job backend module's entry symbol. */
typedef const ddph_backend_ops *(*ddph_backend_module_fn)(void);
#define DDPH__BACKEND_MODULE_SYMBOL "ddph_backend_module_v1"

#endif
