/* mpi_init.c: initialisation, lanes, agreement, leaving and finalize
 * (backend_mpi.h, mpi_internal.h). */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <dlfcn.h>
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

/* A call into MPI that cannot be bounded from outside (MPI_Init_thread,
 * MPI_Finalize): a thread ends the process if it has not returned within
 * limit_s, saying why. */
typedef struct mpi_watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    double limit_s;
    const char *what; /* the call, for the message */
    const char *why;  /* what it usually means */
    int exit_status;
} mpi_watch;

static void *watch_call(void *arg)
{
    mpi_watch *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)w->limit_s + 1;
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    int expired = !w->done;
    pthread_mutex_unlock(&w->mu);
    if (expired) {
        fprintf(stderr, "ddphook: %s did not return within %g s (%s); "
                        "exiting with status %d\n",
                w->what, w->limit_s, w->why, w->exit_status);
        fflush(NULL);
        _exit(w->exit_status);
    }
    return NULL;
}

static int watch_start(mpi_watch *w, pthread_t *t)
{
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    return pthread_create(t, NULL, watch_call, w) == 0;
}

static void watch_stop(mpi_watch *w, pthread_t t, int watching)
{
    if (watching) {
        pthread_mutex_lock(&w->mu);
        w->done = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(t, NULL);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* A duplicate of MPI_COMM_WORLD, within timeout_s (MPI_Comm_dup would
 * block forever on a rank whose peer never came). */
static ddph_status dup_world(ddph_mpi *m, MPI_Comm *out, const char *what,
                             ddph_err *err)
{
    MPI_Request req;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, out, &req);
    if (rc != MPI_SUCCESS)
        return ddph__mpi_failed(m, err, rc, "MPI_Comm_idup");
    ddph_status st = ddph__mpi_wait_timed(m, &req, what, err);
    if (st == DDPH_OK)
        MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return st;
}

ddph_status ddph__mpi_init(ddph_mpi *m, int *argc, char ***argv,
                           double timeout_s, ddph_err *err)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->fault_mu, NULL);
    m->timeout_s = timeout_s;
    m->wait_poll = ddph__mpi_fp_poll;
    m->world.comm = MPI_COMM_NULL;
    m->world.fingerprints = MPI_COMM_NULL;
    m->alarm = MPI_COMM_NULL;
    m->trainer.comm = MPI_COMM_NULL;
    m->trainer.fingerprints = MPI_COMM_NULL;
    int inited = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        /* MPI's start-up waits for every rank (a PMI fence): a rank that
         * is stopped or lost before it gets there would hold the others
         * for ever.  Nothing can interrupt it, so the process ends. */
        mpi_watch w = {.limit_s = timeout_s,
                       .what = "MPI_Init_thread (in ddph_open)",
                       .why = "a peer rank stopped, died or cannot be "
                              "reached during start-up; timeout_s bounds it",
                       .exit_status = 1};
        pthread_t t;
        int watching = watch_start(&w, &t);
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &m->thread_level);
        watch_stop(&w, t, watching);
        if (rc != MPI_SUCCESS)
            return ddph__mpi_failed(m, err, rc, "MPI_Init_thread");
        m->initialized_mpi = 1;
    } else {
        MPI_Query_thread(&m->thread_level);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &m->world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->world.size);
    /* The communication thread calls MPI while the trainer may too. */
    if (m->thread_level < MPI_THREAD_MULTIPLE)
        return ddph__fail(err, DDPH_ERR_BACKEND,
                          "MPI was initialised with thread level %d; ddphook "
                          "needs MPI_THREAD_MULTIPLE (call MPI_Init_thread "
                          "with it, or let ddph_open initialise MPI)",
                          m->thread_level);
    ddph_status st = dup_world(m, &m->world.comm, "MPI_Comm_idup", err);
    if (st != DDPH_OK)
        return st;
    m->world.owned = 1;
    m->world.world_order = 1;
    st = dup_world(m, &m->world.fingerprints, "MPI_Comm_idup", err);
    if (st != DDPH_OK)
        return st;
    st = dup_world(m, &m->alarm, "MPI_Comm_idup", err);
    if (st != DDPH_OK)
        return st;
    st = dup_world(m, &m->trainer.comm, "MPI_Comm_idup", err);
    if (st == DDPH_OK) /* the trainer calls' fingerprints */
        st = dup_world(m, &m->trainer.fingerprints, "MPI_Comm_idup", err);
    if (st != DDPH_OK)
        return st;
    m->trainer.rank = m->world.rank;
    m->trainer.size = m->world.size;
    m->trainer.owned = 1;
    m->heard_us = calloc((size_t)m->world.size, sizeof *m->heard_us);
    m->notices = ddph__notices_new(m->world.size);
    if (!m->heard_us || !m->notices)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph__mpi_types_init(m);
    return DDPH_OK;
}

ddph_status ddph__mpi_lane_groups(ddph_mpi *m, int n,
                                  ddph_mpi_group **out, ddph_err *err)
{
    out[0] = &m->world;
    for (int i = 1; i < n; i++) {
        ddph_mpi_group *g = calloc(1, sizeof *g);
        if (!g)
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        g->comm = MPI_COMM_NULL;
        g->fingerprints = MPI_COMM_NULL;
        ddph_status st = dup_world(m, &g->comm, "MPI_Comm_idup (lanes)", err);
        if (st == DDPH_OK)
            st = dup_world(m, &g->fingerprints, "MPI_Comm_idup (lanes)", err);
        if (st != DDPH_OK) {
            if (g->comm != MPI_COMM_NULL)
                MPI_Comm_free(&g->comm);
            free(g);
            return st;
        }
        g->rank = m->world.rank;
        g->size = m->world.size;
        g->world_order = 1;
        g->owned = 1;
        g->next = m->groups; /* freed with the hooks' groups */
        m->groups = g;
        out[i] = g;
    }
    return DDPH_OK;
}

/* MPI_Finalize can block after the job is over: MPICH 3.4 to 4.1's
 * ch4:ucx closes its endpoints, waiting for each peer's acknowledgement
 * (over UCX's TCP transport, a flush that the peer answers from its
 * progress loop), then enters a blocking PMI barrier; a rank already in
 * that barrier no longer progresses UCX, so a peer still closing waits
 * forever (MPICH 4.2 reordered them; preload/mpich-finalize.so avoids it
 * on older ones).  A peer that dies after the last barrier does the same.
 * Every rank has ended the job by then (the barrier of ddph__mpi_leave
 * passed), so a watchdog ends the process with status 0 after
 * FINALIZE_GRACE_S, saying so. */
#define FINALIZE_GRACE_S 10.0

/* Whether MPI is MPICH older than 4.2 on ch4:ucx (the finalize above). */
static int mpich_finalize_can_hang(char *version, size_t n)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0, minor = 0;
    if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS)
        return 0;
    const char *v = strstr(lib, "MPICH Version:");
    if (!v || !strstr(lib, "ch4:ucx"))
        return 0;
    v += strlen("MPICH Version:");
    v += strspn(v, " \t");
    if (sscanf(v, "%d.%d", &major, &minor) != 2)
        return 0;
    snprintf(version, n, "%.*s", (int)strcspn(v, " \t\n"), v);
    return (major == 3 && minor >= 4) || (major == 4 && minor < 2);
}

/* Whether UCX_TLS makes UCX use TCP and nothing else between hosts: no
 * RDMA transport named, and not a "^exclude" list. */
static int ucx_forced_to_tcp(void)
{
    const char *tls = getenv("UCX_TLS");
    if (!tls || tls[0] == '^')
        return 0;
    int tcp = 0;
    for (const char *t = tls; *t;) {
        size_t len = strcspn(t, ",");
        if (len == 3 && strncmp(t, "tcp", 3) == 0)
            tcp = 1;
        else if (len >= 2 && (strncmp(t, "rc", 2) == 0 || strncmp(t, "ud", 2) == 0 ||
                              strncmp(t, "dc", 2) == 0 || strncmp(t, "ib", 2) == 0))
            return 0;
        else if (len == 3 && strncmp(t, "all", 3) == 0)
            return 0;
        t += len + (t[len] == ',');
    }
    return tcp;
}

int ddph__mpi_finalize_hazard(const ddph_mpi *m, char *msg, size_t n)
{
    char version[32];
    if (m->node_size >= m->world.size || !ucx_forced_to_tcp() ||
        !mpich_finalize_can_hang(version, sizeof version))
        return 0;
    /* The preload library says it is there with a symbol of its own. */
    if (dlsym(RTLD_DEFAULT, "ddph_mpich_finalize_preloaded"))
        return 0;
    snprintf(msg, n,
             "MPICH %s's MPI_Finalize can hang between hosts over UCX's TCP "
             "transport (UCX_TLS=%s); preload %s/mpich-finalize.so in every "
             "rank (mpiexec -genv LD_PRELOAD ...) or use MPICH 4.2 or later "
             "(docs/usage.md); without it, ddph_close ends a hung finalize "
             "after %g s",
             version, getenv("UCX_TLS"), DDPH_PRELOAD_DIR, FINALIZE_GRACE_S);
    return 1;
}

void ddph__mpi_finalize_watched(double limit_s)
{
    mpi_watch w = {.limit_s = limit_s,
                   .what = "MPI_Finalize",
                   .why = "MPICH's finalize deadlock after every rank had "
                          "ended the job (docs/usage.md: preload "
                          "mpich-finalize.so), or a peer that died since",
                   .exit_status = 0};
    pthread_t t;
    int watching = watch_start(&w, &t);
    MPI_Finalize();
    watch_stop(&w, t, watching);
}

ddph_status ddph__mpi_leave(ddph_mpi *m, ddph_status local,
                            ddph_status *job, int *job_rank, ddph_err *err)
{
    m->left = 1;
    *job = DDPH_OK;
    *job_rank = -1;
    /* The peers wait for this rank's closing notice as it waits for
     * theirs: sent here if the caller did not (ddph_close sends it
     * earlier, before stopping the communication thread). */
    if (!atomic_load(&m->closing))
        ddph__mpi_closing(m);
    ddph_status st = ddph__mpi_fault(m, err);
    if (st != DDPH_OK || m->alarm == MPI_COMM_NULL)
        return st;
    /* On the alarm communicator: a peer still in a step must never see
     * this meeting match its step's collective.  It is a barrier that
     * also brings every rank the worst status a call reported there. */
    MPI_Request req;
    /* The lowest rank that reported one, and its status (MINLOC keeps
     * the "location" of the smallest value: here the status). */
    int mine[2] = {local != DDPH_OK ? m->world.rank : m->world.size,
                   (int)local};
    int first[2] = {m->world.size, 0};
    int rc = MPI_Iallreduce(mine, first, 1, MPI_2INT, MPI_MINLOC, m->alarm,
                            &req);
    st = rc == MPI_SUCCESS ? ddph__mpi_wait_timed(m, &req, "the barrier of ddph_close", err)
                           : ddph__mpi_failed(m, err, rc, "MPI_Iallreduce");
    if (st == DDPH_OK && first[0] < m->world.size) {
        *job = (ddph_status)first[1];
        *job_rank = first[0];
    }
    /* Every peer sent one closing notice before the barrier: take them
     * all, so that no message is left unmatched at MPI_Finalize (MPICH's
     * finalize then waits for its receiver). */
    double deadline = ddph__now() + m->timeout_s;
    while (st == DDPH_OK &&
           atomic_load(&m->closes_received) < m->world.size - 1) {
        st = ddph__mpi_fault(m, err);
        if (st == DDPH_OK && ddph__now() > deadline)
            st = ddph__fail(err, DDPH_ERR_TIMEOUT,
                            "ddph_close: %d of %d peers' closing notices "
                            "did not arrive within timeout_s = %g s",
                            m->world.size - 1 -
                                atomic_load(&m->closes_received),
                            m->world.size - 1, m->timeout_s);
    }
    if (st != DDPH_OK) {
        char msg[DDPH__NOTICE_LEN];
        snprintf(msg, sizeof msg, "rank %d: %s", m->world.rank, err->msg);
        ddph__mpi_fail_job(m, st, msg);
    }
    return st;
}

ddph_status ddph__mpi_finalize(ddph_mpi *m, ddph_err *err)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    ddph_status st = DDPH_OK;
    if (finalized)
        goto out;
    if (!m->left)
    {
        ddph_status job;
        int job_rank;
        ddph__mpi_leave(m, DDPH_OK, &job, &job_rank, err);
    }
    if (atomic_load(&m->broken)) {
        /* No collective, no MPI_Finalize: they could wait forever for a
         * dead peer.  The requests and communicators die with the process. */
        pthread_mutex_lock(&m->fault_mu);
        if (!m->fault_notified)
            ddph__mpi_notify_peers(m);
        st = ddph__fail(err, m->fault_status, "%s", m->fault_msg);
        pthread_mutex_unlock(&m->fault_mu);
        return st;
    }
    for (ddph_mpi_group *g = m->groups, *next; g; g = next) {
        next = g->next;
        if (g->owned)
            MPI_Comm_free(&g->comm);
        if (g->owned && g->fingerprints != MPI_COMM_NULL)
            MPI_Comm_free(&g->fingerprints);
        free(g->scratch);
        free(g);
    }
    free(m->world.scratch);
    if (m->world.owned)
        MPI_Comm_free(&m->world.comm);
    if (m->world.fingerprints != MPI_COMM_NULL)
        MPI_Comm_free(&m->world.fingerprints);
    free(m->trainer.scratch);
    free((void *)m->heard_us);
    m->heard_us = NULL;
    if (m->trainer.owned)
        MPI_Comm_free(&m->trainer.comm);
    if (m->trainer.fingerprints != MPI_COMM_NULL)
        MPI_Comm_free(&m->trainer.fingerprints);
    if (m->alarm != MPI_COMM_NULL)
        MPI_Comm_free(&m->alarm);
    ddph__mpi_types_free(m);
    if (m->initialized_mpi)
        ddph__mpi_finalize_watched(m->timeout_s < FINALIZE_GRACE_S
                                       ? m->timeout_s
                                       : FINALIZE_GRACE_S);
out:
    ddph__mpi_departures_collect(m, 1);
    ddph__notices_free(m->notices);
    pthread_mutex_destroy(&m->fault_mu);
    memset(m, 0, sizeof *m);
    return st;
}

ddph_status ddph__mpi_agree(ddph_mpi *m, ddph_status local,
                            const char *local_msg, ddph_err *err)
{
    struct {
        int32_t status;
        char msg[DDPH__NOTICE_LEN];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    outcome.status = (int32_t)local;
    snprintf(outcome.msg, sizeof outcome.msg, "%s",
             local != DDPH_OK && local_msg ? local_msg : "");
    int64_t first = local != DDPH_OK ? m->world.rank : m->world.size;
    ddph_status st = ddph__mpi_allreduce_i64(m, &first, 1, DDPH_MIN, err);
    if (st != DDPH_OK || first == m->world.size)
        return st;
    st = ddph__mpi_bcast_bytes(m, &outcome, sizeof outcome, (int)first, err);
    if (st != DDPH_OK)
        return st;
    outcome.msg[sizeof outcome.msg - 1] = '\0';
    if (first == m->world.rank)
        return ddph__fail(err, local, "%s", outcome.msg);
    return ddph__fail(err, (ddph_status)outcome.status, "rank %lld failed: %s",
                      (long long)first, outcome.msg);
}
