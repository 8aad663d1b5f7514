/* mpi_fault.c: the job-wide fault protocol (mpi_internal.h). */
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

#include "support/status_text.h"

/* A departure notice (backend_mpi.h), kept until its sends are done. */
typedef struct ddph_departure {
    struct {
        int64_t syncs, calls;
        int32_t kind;
        char what[48];
    } notice;
    MPI_Request *reqs;
    int nreqs;
    struct ddph_departure *next;
} ddph_departure;

/* Frees the notices whose sends are done (all of them with force: at
 * finalize, when nothing will be sent any more). */
void ddph__mpi_departures_collect(ddph_mpi *m, int force)
{
    for (ddph_departure **at = &m->departures, *d; (d = *at) != NULL;) {
        int done = 1;
        for (int k = 0; !force && k < d->nreqs; k++) {
            int sent = 1;
            if (d->reqs[k] != MPI_REQUEST_NULL)
                MPI_Test(&d->reqs[k], &sent, MPI_STATUS_IGNORE);
            done &= sent;
        }
        if (!done) {
            at = &d->next;
            continue;
        }
        *at = d->next;
        free(d->reqs);
        free(d);
    }
}

void ddph__mpi_depart(ddph_mpi *m, int kind, const char *what)
{
    if (kind == DDPH__DEPART_TRAINER_CALL)
        atomic_fetch_add(&m->trainer_calls, 1);
    if (m->alarm == MPI_COMM_NULL || atomic_load(&m->broken) ||
        m->world.size < 2)
        return;
    ddph__mpi_departures_collect(m, 0);
    ddph_departure *d = calloc(1, sizeof *d);
    if (!d || !(d->reqs = calloc((size_t)m->world.size, sizeof *d->reqs))) {
        free(d);
        return; /* only a quicker report is lost */
    }
    d->notice.syncs = (int64_t)atomic_load(&m->syncs_done);
    d->notice.calls = (int64_t)atomic_load(&m->trainer_calls);
    d->notice.kind = kind;
    snprintf(d->notice.what, sizeof d->notice.what, "%s", what);
    for (int r = 0; r < m->world.size; r++)
        if (r != m->world.rank &&
            MPI_Isend(&d->notice, (int)sizeof d->notice, MPI_BYTE, r,
                      DDPH__TAG_DEPART, m->alarm, &d->reqs[d->nreqs]) == MPI_SUCCESS)
            d->nreqs++;
    d->next = m->departures;
    m->departures = d;
}

/* A peer that left the steps (its data ended, it calls a trainer
 * collective this rank has not made, it closed the job) before the
 * synchronised step whose collective this rank waits on: it will never
 * join, so this rank fails at once instead of after timeout_s.  Any
 * collective outside steps (whose trailing completions cannot be told
 * from abandoned ones this way) waits for timeout_s as before. */
static void check_peers_left(ddph_mpi *m)
{
    if (atomic_load(&m->broken) || atomic_load(&m->closing) ||
        !atomic_load(&m->in_sync_step))
        return;
    char text[512];
    if (ddph__notices_breaking(m->notices,
                               (int64_t)atomic_load(&m->syncs_done),
                               (int64_t)atomic_load(&m->trainer_calls), text,
                               sizeof text) >= 0)
        /* Told to every peer: a closing rank's own barrier ends too. */
        ddph__mpi_fail_job(m, DDPH_ERR_STATE, text);
}

/* Records the first fault; later ones keep it.  notified: the peers know
 * already (the fault is a peer's notice). */
static void set_fault(ddph_mpi *m, ddph_status st, const char *msg,
                      int notified)
{
    pthread_mutex_lock(&m->fault_mu);
    if (!atomic_load(&m->broken)) {
        m->fault_status = st;
        snprintf(m->fault_msg, sizeof m->fault_msg, "%s", msg);
        m->fault_notified = notified;
        atomic_store(&m->broken, 1);
    }
    pthread_mutex_unlock(&m->fault_mu);
}

/* Sends the notice to every peer.  Called once, with fault_mu held; the
 * sends are never waited for (a dead peer must not block this rank). */
void ddph__mpi_notify_peers(ddph_mpi *m)
{
    m->fault_notified = 1;
    if (m->alarm == MPI_COMM_NULL)
        return;
    m->notice.status = (int32_t)m->fault_status;
    snprintf(m->notice.msg, sizeof m->notice.msg, "%s", m->fault_msg);
    int n = (int)(sizeof m->notice.status + strlen(m->notice.msg) + 1);
    for (int r = 0; r < m->world.size; r++) {
        if (r == m->world.rank)
            continue;
        MPI_Request req;
        if (MPI_Isend(&m->notice, n, MPI_BYTE, r, DDPH__TAG_NOTICE, m->alarm,
                      &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
}

void ddph__mpi_fail_job(ddph_mpi *m, ddph_status st, const char *msg)
{
    pthread_mutex_lock(&m->fault_mu);
    if (!atomic_load(&m->broken)) {
        m->fault_status = st;
        snprintf(m->fault_msg, sizeof m->fault_msg, "%s", msg);
        atomic_store(&m->broken, 1);
    } else if (!m->fault_notified) {
        /* A collective broke the job here and the caller knows more
         * (hook, model, bucket): the peers get the fuller message. */
        snprintf(m->fault_msg, sizeof m->fault_msg, "%s", msg);
    }
    if (!m->fault_notified)
        ddph__mpi_notify_peers(m);
    pthread_mutex_unlock(&m->fault_mu);
}

void ddph__mpi_linger(ddph_mpi *m, double seconds)
{
    if (m->alarm == MPI_COMM_NULL || m->world.size < 2)
        return;
    double until = ddph__now() + seconds;
    struct timespec ms = {0, 1000000};
    while (ddph__now() < until) {
        int flag = 0; /* only progress: nothing is received */
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->alarm, &flag,
                   MPI_STATUS_IGNORE);
        nanosleep(&ms, NULL);
    }
}

void ddph__mpi_closing(ddph_mpi *m)
{
    atomic_store(&m->closing, 1);
    if (m->alarm == MPI_COMM_NULL || atomic_load(&m->broken))
        return;
    m->close_notice = (int64_t)atomic_load(&m->syncs_done);
    for (int r = 0; r < m->world.size; r++) {
        MPI_Request req;
        if (r != m->world.rank &&
            MPI_Isend(&m->close_notice, 1, MPI_INT64_T, r, DDPH__TAG_CLOSE,
                      m->alarm, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
}

/* How often the alarms are probed at most.  MPI_Improbe on the alarm
 * communicator while a collective is on the wire slows that collective
 * down: probing every 256 tests (or every 5 ms) made the allreduce hook's
 * step over a simulated 1 Gbit/s link 20-30% slower than the same
 * MPI_Allreduce calls without probes; every 50 ms costs a few percent at
 * most (notes/performance-history.md, "Probing for failure notices").  A failed
 * peer is still heard within about 50 ms. */
#define ALARM_POLL_US 50000

/* Receives one pending alarm message; 1 when one was taken and more may
 * follow, 0 when there is none or the job is now broken.  Matched probes,
 * because two threads (the trainer's and the communication thread) may
 * poll. */
static int take_alarm(ddph_mpi *m)
{
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->alarm, &flag, &msg,
                    &status) != MPI_SUCCESS ||
        !flag)
        return 0;
    if (m->heard_us && status.MPI_SOURCE >= 0 &&
        status.MPI_SOURCE < m->world.size)
        atomic_store(&m->heard_us[status.MPI_SOURCE],
                     (long long)(ddph__now() * 1e6));
    if (status.MPI_TAG == DDPH__TAG_PING || status.MPI_TAG == DDPH__TAG_ANSWER) {
        /* A failing peer's probe: a reachability probe (no byte) needs
         * nothing; a roll call (one byte) an answer, never waited for. */
        char ask = 0;
        int n = 0;
        MPI_Get_count(&status, MPI_BYTE, &n);
        MPI_Mrecv(&ask, n == 1 ? 1 : 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        MPI_Request req;
        if (status.MPI_TAG == DDPH__TAG_PING && n == 1 &&
            MPI_Isend(NULL, 0, MPI_BYTE, status.MPI_SOURCE, DDPH__TAG_ANSWER,
                      m->alarm, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
        return 1;
    }
    if (status.MPI_TAG == DDPH__TAG_DEPART) {
        ddph_departure d;
        memset(&d.notice, 0, sizeof d.notice);
        int n = 0;
        MPI_Get_count(&status, MPI_BYTE, &n);
        if (n != (int)sizeof d.notice ||
            MPI_Mrecv(&d.notice, n, MPI_BYTE, &msg, MPI_STATUS_IGNORE) !=
                MPI_SUCCESS) {
            if (n != (int)sizeof d.notice) /* not ours: take it anyway */
                MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            return 1;
        }
        d.notice.what[sizeof d.notice.what - 1] = '\0';
        ddph__notices_record(m->notices, status.MPI_SOURCE, d.notice.kind,
                             d.notice.syncs, d.notice.calls, d.notice.what);
        return 1;
    }
    if (status.MPI_TAG == DDPH__TAG_CLOSE) {
        int64_t after = 0;
        if (MPI_Mrecv(&after, 1, MPI_INT64_T, &msg, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return 1;
        atomic_fetch_add(&m->closes_received, 1);
        ddph__notices_record(m->notices, status.MPI_SOURCE,
                             DDPH__DEPART_CLOSED, after, 0, "ddph_close");
        return 1;
    }
    struct {
        int32_t status;
        char msg[DDPH__NOTICE_LEN];
    } notice;
    memset(&notice, 0, sizeof notice);
    int n = 0;
    MPI_Get_count(&status, MPI_BYTE, &n);
    if (n < 0 || (size_t)n > sizeof notice ||
        MPI_Mrecv(&notice, n, MPI_BYTE, &msg, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
        snprintf(notice.msg, sizeof notice.msg, "(unreadable notice)");
    notice.msg[sizeof notice.msg - 1] = '\0';
    /* A status this build does not know (a newer peer) reads as a
     * backend failure. */
    ddph_status st = (ddph_status)notice.status;
    if (st == DDPH_OK ||
        strcmp(ddph_status_name(st), "DDPH_UNKNOWN") == 0)
        st = DDPH_ERR_BACKEND;
    char text[DDPH__NOTICE_LEN + 64];
    snprintf(text, sizeof text, "rank %d failed: %s", status.MPI_SOURCE,
             notice.msg);
    set_fault(m, st, text, 1);
    return 0;
}

static void poll_alarm(ddph_mpi *m)
{
    if (m->alarm == MPI_COMM_NULL || atomic_load(&m->broken))
        return;
    long long now = (long long)(ddph__now() * 1e6),
              last = atomic_load(&m->alarm_polled_us);
    if (now - last < ALARM_POLL_US ||
        !atomic_compare_exchange_strong(&m->alarm_polled_us, &last, now))
        return;
    /* Every pending message: departure notices may come at each of a
     * peer's trainer calls. */
    while (take_alarm(m) && !atomic_load(&m->broken))
        ;
}

/* The job's failure, if it is broken: its status, its message in err. */
static ddph_status recorded_fault(ddph_mpi *m, ddph_err *err)
{
    if (!atomic_load(&m->broken))
        return DDPH_OK;
    pthread_mutex_lock(&m->fault_mu);
    ddph_status st = ddph__fail(err, m->fault_status, "%s", m->fault_msg);
    pthread_mutex_unlock(&m->fault_mu);
    return st;
}

ddph_status ddph__mpi_fault(ddph_mpi *m, ddph_err *err)
{
    poll_alarm(m);
    return recorded_fault(m, err);
}

int ddph__mpi_peer_closed(ddph_mpi *m, int rank, int64_t *after)
{
    poll_alarm(m);
    return ddph__notices_closed(m->notices, rank, after);
}

/* ddph__mpi_fault for a rank about to wait on a collective: a closed
 * peer may also have ended the job for it. */
ddph_status ddph__mpi_collective_fault(ddph_mpi *m, ddph_err *err)
{
    poll_alarm(m);
    check_peers_left(m);
    return recorded_fault(m, err);
}

/* How long a reachability probe waits for its sends to fail. */
#define PROBE_WAIT_S 0.1

/* Writes into out (", "-separated) the peers this rank cannot reach, and
 * returns how many.  When MPI reports an error in a collective the cause
 * is nearly always a dead peer, but not which: MPICH 4.0 on ch4 has no
 * failure query (its MPIX_Comm_failure_ack aborts the process).  A
 * zero-byte send to a peer whose connection MPI found broken fails, at
 * once or within PROBE_WAIT_S; one to a live peer completes (it is eager)
 * and is dropped by the peer's alarm poll.  A peer that is alive but
 * stuck is reachable: only the timeout can tell about it. */
static int unreachable_peers(ddph_mpi *m, char *out, size_t cap)
{
    out[0] = '\0';
    if (m->alarm == MPI_COMM_NULL)
        return 0;
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)m->world.size);
    char *gone = calloc((size_t)m->world.size, 1);
    if (!reqs || !gone) {
        free(reqs);
        free(gone);
        return 0;
    }
    for (int r = 0; r < m->world.size; r++) {
        reqs[r] = MPI_REQUEST_NULL;
        if (r != m->world.rank &&
            MPI_Isend(NULL, 0, MPI_BYTE, r, DDPH__TAG_PING, m->alarm, &reqs[r]) !=
                MPI_SUCCESS)
            gone[r] = 1;
    }
    double until = ddph__now() + PROBE_WAIT_S;
    for (int pending = 1; pending && ddph__now() < until;) {
        pending = 0;
        for (int r = 0; r < m->world.size; r++) {
            if (reqs[r] == MPI_REQUEST_NULL)
                continue;
            int flag = 0;
            if (MPI_Test(&reqs[r], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                gone[r] = 1;
                reqs[r] = MPI_REQUEST_NULL;
            } else if (!flag) {
                pending = 1;
            }
        }
    }
    int found = 0;
    size_t used = 0;
    for (int r = 0; r < m->world.size; r++) {
        /* A send still pending is left to MPI, never waited for. */
        if (reqs[r] != MPI_REQUEST_NULL)
            MPI_Request_free(&reqs[r]);
        if (!gone[r])
            continue;
        int w = snprintf(out + used, cap - used, "%s%d", found ? ", " : "",
                         r);
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
        found++;
    }
    free(reqs);
    free(gone);
    return found;
}

/* MPI's error text on one line: its stack comes one frame per line with
 * the frame names padded by dots. */
static void one_line(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r == '\n') {
            if (w > s && r[1])
                *w++ = ' ';
            continue;
        }
        if (r[0] == '.' && r[1] == '.') {
            while (r[1] == '.')
                r++;
            continue;
        }
        *w++ = *r;
    }
    *w = '\0';
}

/* The peers unreachable_peers finds, as a clause for a message ("rank 3
 * cannot be reached (dead or disconnected)"); empty when every peer
 * answers. */
static int lost_peers_clause(ddph_mpi *m, char *out, size_t cap)
{
    char gone[256];
    int lost = unreachable_peers(m, gone, sizeof gone);
    out[0] = '\0';
    if (lost)
        snprintf(out, cap, "rank%s %s cannot be reached (dead or "
                           "disconnected)",
                 lost > 1 ? "s" : "", gone);
    return lost;
}

/* How long a roll call waits for answers.  A peer that waits on a
 * collective probes its alarms every ALARM_POLL_US, so a live one answers
 * well within this; one cut off, stopped or busy outside ddphook does not. */
#define ROLL_CALL_S 1.0

/* Asks every peer to answer, and writes into out (", "-separated) those
 * not heard from within ROLL_CALL_S; returns how many.  The peers behind
 * a cut link, whose sends neither fail nor complete (TCP keeps trying),
 * are told from live ones only this way. */
static int silent_peers(ddph_mpi *m, char *out, size_t cap)
{
    static const char ask = 1;
    out[0] = '\0';
    if (m->alarm == MPI_COMM_NULL || !m->heard_us)
        return 0;
    long long since = (long long)(ddph__now() * 1e6);
    for (int r = 0; r < m->world.size; r++) {
        MPI_Request req;
        if (r != m->world.rank &&
            MPI_Isend(&ask, 1, MPI_BYTE, r, DDPH__TAG_PING, m->alarm, &req) ==
                MPI_SUCCESS)
            MPI_Request_free(&req);
    }
    double until = ddph__now() + ROLL_CALL_S;
    int silent = m->world.size - 1;
    while (silent > 0 && ddph__now() < until) {
        while (take_alarm(m))
            ;
        silent = 0;
        for (int r = 0; r < m->world.size; r++)
            silent += r != m->world.rank && atomic_load(&m->heard_us[r]) < since;
        struct timespec ts = {0, 1000000};
        if (silent)
            nanosleep(&ts, NULL);
    }
    size_t used = 0;
    for (int r = 0, found = 0; r < m->world.size && silent; r++) {
        if (r == m->world.rank || atomic_load(&m->heard_us[r]) >= since)
            continue;
        int w = snprintf(out + used, cap - used, "%s%d", found++ ? ", " : "",
                         r);
        if (w > 0 && (size_t)w < cap - used)
            used += (size_t)w;
    }
    return silent;
}

/* A failed MPI call: the job is broken.  The message names the peers
 * that can no longer be reached, when there are any, since MPI's own
 * text rarely does. */
ddph_status ddph__mpi_failed(ddph_mpi *m, ddph_err *err, int rc,
                            const char *what)
{
    char msg[MPI_MAX_ERROR_STRING], lost[320];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    if (len < 0 || len >= MPI_MAX_ERROR_STRING)
        len = len < 0 ? 0 : MPI_MAX_ERROR_STRING - 1;
    msg[len] = '\0';
    one_line(msg);
    ddph_status st =
        lost_peers_clause(m, lost, sizeof lost)
            ? ddph__fail(err, DDPH_ERR_BACKEND, "%s failed: %s; MPI says: %s",
                         what, lost, msg)
            : ddph__fail(err, DDPH_ERR_BACKEND, "%s failed: %s", what, msg);
    set_fault(m, st, err->msg, 0);
    return st;
}

/* A collective past its deadline (timeout_s after `since`, said in the
 * message): the job is broken.  The message names the unreachable peers
 * when the probe finds any; a stopped or stuck peer answers it. */
ddph_status ddph__mpi_timed_out(ddph_mpi *m, const char *what, const char *since,
                             ddph_err *err)
{
    char lost[320], silent[256];
    int quiet = 0;
    ddph_status st =
        lost_peers_clause(m, lost, sizeof lost)
            ? ddph__fail(err, DDPH_ERR_TIMEOUT,
                         "%s did not complete within timeout_s = %g s%s: %s",
                         what, m->timeout_s, since, lost)
        : (quiet = silent_peers(m, silent, sizeof silent)) > 0
            ? ddph__fail(err, DDPH_ERR_TIMEOUT,
                         "%s did not complete within timeout_s = %g s%s: "
                         "rank%s %s did not answer within %g s (cut off, "
                         "stopped, or busy outside ddphook)",
                         what, m->timeout_s, since, quiet > 1 ? "s" : "",
                         silent, ROLL_CALL_S)
            : ddph__fail(err, DDPH_ERR_TIMEOUT,
                         "%s did not complete within timeout_s = %g s%s (a "
                         "peer rank died, is stuck, or called a different "
                         "collective)",
                         what, m->timeout_s, since);
    set_fault(m, st, err->msg, 0);
    return st;
}
