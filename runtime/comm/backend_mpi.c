/* backend_mpi.c: see backend_mpi.h. */
#include "build-config.h"

#include "comm/backend_mpi.h"
#include "comm/shared_buckets.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "device/cpu_ops.h"

/* Elements per MPI call: counts are int in MPI-3. */
#define CHUNK ((size_t)1 << 30)

/* Elements of the next piece of an allreduce or broadcast of `count`
 * elements of `es` bytes (DDPH__MPI_PIECE_BYTES). */
static size_t piece(size_t count, size_t es)
{
    size_t most = DDPH__MPI_PIECE_BYTES / es;
    return count < most ? count : most;
}

/* ---- faults --------------------------------------------------------------- */

enum {
    NOTICE_TAG = 17,
    CLOSE_TAG = 18,
    DEPART_TAG = 19,
    PING_TAG = 20,  /* 0 bytes: ignored; 1 byte: answer with ANSWER_TAG */
    ANSWER_TAG = 21
};

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
static void departures_collect(ddph_mpi *m, int force)
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
    departures_collect(m, 0);
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
                      DEPART_TAG, m->alarm, &d->reqs[d->nreqs]) == MPI_SUCCESS)
            d->nreqs++;
    d->next = m->departures;
    m->departures = d;
}

/* A peer that left the steps after its syncs-th synchronised step, while
 * this rank waits on a collective of a later one that the peer will not
 * join: its data ended, or it waits in a trainer call this rank has not
 * made. */
static void check_peer_departed(ddph_mpi *m)
{
    if (!atomic_load(&m->departed) || atomic_load(&m->broken) ||
        !atomic_load(&m->in_sync_step))
        return;
    pthread_mutex_lock(&m->departed_mu);
    int rank = m->departed_rank, kind = m->departed_kind;
    int64_t syncs = m->departed_syncs, calls = m->departed_calls;
    char what[48];
    snprintf(what, sizeof what, "%s", m->departed_what);
    pthread_mutex_unlock(&m->departed_mu);
    int64_t mine = (int64_t)atomic_load(&m->syncs_done);
    if (mine < syncs ||
        (kind == DDPH__DEPART_TRAINER_CALL &&
         (int64_t)atomic_load(&m->trainer_calls) >= calls))
        return;
    char text[512];
    if (kind == DDPH__DEPART_DATA_END)
        snprintf(text, sizeof text,
                 "rank %d ended its data (DDPH_STEP_LAST) after %lld "
                 "synchronised step%s, while this rank waits on a collective "
                 "of its step %lld (uneven inputs: every rank must run the "
                 "same number of synchronising steps)",
                 rank, (long long)syncs, syncs == 1 ? "" : "s",
                 (long long)mine + 1);
    else
        snprintf(text, sizeof text,
                 "rank %d called %s after %lld synchronised step%s, while this "
                 "rank waits on a collective of its step %lld (uneven inputs: "
                 "that rank ran out of steps early, or the ranks call the "
                 "trainer collectives at different points)",
                 rank, what, (long long)syncs, syncs == 1 ? "" : "s",
                 (long long)mine + 1);
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
static void notify_peers(ddph_mpi *m)
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
        if (MPI_Isend(&m->notice, n, MPI_BYTE, r, NOTICE_TAG, m->alarm,
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
        notify_peers(m);
    pthread_mutex_unlock(&m->fault_mu);
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
            MPI_Isend(&m->close_notice, 1, MPI_INT64_T, r, CLOSE_TAG,
                      m->alarm, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
}

/* A closing peer breaks the job only for a rank that waits on a
 * collective the peer will never join: one of a synchronised step past
 * the peer's last.  A rank still finishing the peer's last step, or any
 * collective outside steps (whose trailing completions cannot be told
 * from abandoned ones this way), is not affected: those wait for
 * timeout_s as before. */
static void check_peer_closed(ddph_mpi *m)
{
    if (!atomic_load(&m->peer_closed) || atomic_load(&m->closing) ||
        atomic_load(&m->broken) || !atomic_load(&m->in_sync_step) ||
        (int64_t)atomic_load(&m->syncs_done) < m->closed_after)
        return;
    char text[256];
    snprintf(text, sizeof text,
             "rank %d closed the job (ddph_close) after %lld synchronised "
             "step%s, while this rank waits on a collective after its own "
             "%lld",
             m->closed_rank, (long long)m->closed_after,
             m->closed_after == 1 ? "" : "s",
             (long long)atomic_load(&m->syncs_done));
    /* Told to every peer: the closing rank's own barrier ends too. */
    ddph__mpi_fail_job(m, DDPH_ERR_STATE, text);
}

/* How often the alarms are probed at most.  MPI_Improbe on the alarm
 * communicator while a collective is on the wire slows that collective
 * down: probing every 256 tests (or every 5 ms) made the allreduce hook's
 * step over a simulated 1 Gbit/s link 20-30% slower than the same
 * MPI_Allreduce calls without probes; every 50 ms costs a few percent at
 * most (docs/performance.md, "Probing for failure notices").  A failed
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
    if (status.MPI_TAG == PING_TAG || status.MPI_TAG == ANSWER_TAG) {
        /* A failing peer's probe: a reachability probe (no byte) needs
         * nothing; a roll call (one byte) an answer, never waited for. */
        char ask = 0;
        int n = 0;
        MPI_Get_count(&status, MPI_BYTE, &n);
        MPI_Mrecv(&ask, n == 1 ? 1 : 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        MPI_Request req;
        if (status.MPI_TAG == PING_TAG && n == 1 &&
            MPI_Isend(NULL, 0, MPI_BYTE, status.MPI_SOURCE, ANSWER_TAG,
                      m->alarm, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
        return 1;
    }
    if (status.MPI_TAG == DEPART_TAG) {
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
        pthread_mutex_lock(&m->departed_mu);
        m->departed_rank = status.MPI_SOURCE;
        m->departed_kind = d.notice.kind;
        m->departed_syncs = d.notice.syncs;
        m->departed_calls = d.notice.calls;
        snprintf(m->departed_what, sizeof m->departed_what, "%s",
                 d.notice.what);
        pthread_mutex_unlock(&m->departed_mu);
        atomic_store(&m->departed, 1);
        return 1;
    }
    if (status.MPI_TAG == CLOSE_TAG) {
        int64_t after = 0;
        if (MPI_Mrecv(&after, 1, MPI_INT64_T, &msg, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return 1;
        atomic_fetch_add(&m->closes_received, 1);
        if (!atomic_load(&m->peer_closed)) {
            m->closed_rank = status.MPI_SOURCE;
            m->closed_after = after;
            atomic_store(&m->peer_closed, 1);
        }
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

/* ddph__mpi_fault for a rank about to wait on a collective: a closed
 * peer may also have ended the job for it. */
static ddph_status collective_fault(ddph_mpi *m, ddph_err *err)
{
    poll_alarm(m);
    check_peer_closed(m);
    check_peer_departed(m);
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
            MPI_Isend(NULL, 0, MPI_BYTE, r, PING_TAG, m->alarm, &reqs[r]) !=
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
            MPI_Isend(&ask, 1, MPI_BYTE, r, PING_TAG, m->alarm, &req) ==
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
static ddph_status mpi_fail(ddph_mpi *m, ddph_err *err, int rc,
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
static ddph_status timed_out(ddph_mpi *m, const char *what, const char *since,
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

/* Polls reqs until all complete, the job breaks (a peer's notice, or
 * another thread's failure) or timeout_s passes after `start` (when the
 * collective began: a nonblocking one may be waited for later).  MPICH
 * moves data only inside MPI calls, so for the first SPIN_S seconds of a
 * wait the loop tests without pause, as MPICH's own blocking calls do;
 * after that (a slow or dead peer) it sleeps between tests so that a
 * waiting rank does not burn a core.  After YIELD_POLLS tests the spin
 * yields the core after each one: this rank's trainer thread (copying the
 * next bucket in, or a finished one back) or another rank of an
 * oversubscribed host then runs while MPI waits on a peer.  GPT-2 with
 * copies on 2 ranks and 2 cores: 188-215 -> 156-163 ms a step; 2 hosts x
 * 2 ranks: 1.90 -> 1.58 s (docs/performance.md, "Yielding while
 * waiting"). */
#define SPIN_S 0.25
#define YIELD_POLLS 256

/* MPI_Testall, one request at a time (a completed one becomes
 * MPI_REQUEST_NULL, which tests as done). */
static int test_all(int n, MPI_Request *reqs, int *done)
{
    *done = 1;
    for (int i = 0; i < n; i++) {
        int flag = 0, rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return rc;
        *done &= flag;
    }
    return MPI_SUCCESS;
}

static ddph_status fp_poll(const MPI_Request *waiting, ddph_err *err);

static ddph_status wait_timed_all(ddph_mpi *m, int n, MPI_Request *reqs,
                                  double start, const char *what,
                                  ddph_err *err)
{
    double deadline = start + m->timeout_s, spin_from = ddph__now();
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        int rc = test_all(n, reqs, &done);
        if (rc != MPI_SUCCESS)
            return mpi_fail(m, err, rc, what);
        if (done)
            return DDPH_OK;
        if (polls >= YIELD_POLLS)
            sched_yield();
        if (polls % 256 != 255)
            continue;
        ddph__activity_touch(); /* a bounded wait, not a stuck hook */
        ddph_status st = collective_fault(m, err);
        if (st == DDPH_OK)
            st = fp_poll(reqs, err);
        if (st != DDPH_OK)
            return st;
        double now = ddph__now();
        if (now > deadline)
            return timed_out(m, what, "", err);
        if (now - spin_from > SPIN_S) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

static ddph_status wait_timed(ddph_mpi *m, MPI_Request *req, const char *what,
                              ddph_err *err)
{
    return wait_timed_all(m, 1, req, ddph__now(), what, err);
}

/* ---- half types --------------------------------------------------------- */

#define HALF_OP(fn, dt, kernel)                                              \
    static void fn(void *in, void *inout, int *len, MPI_Datatype *type)      \
    {                                                                        \
        (void)type;                                                          \
        kernel(inout, in, dt, (size_t)*len);                                 \
    }
HALF_OP(f16_sum, DDPH_F16, ddph__cpu_add)
HALF_OP(f16_max, DDPH_F16, ddph__cpu_max)
HALF_OP(f16_min, DDPH_F16, ddph__cpu_min)
HALF_OP(bf16_sum, DDPH_BF16, ddph__cpu_add)
HALF_OP(bf16_max, DDPH_BF16, ddph__cpu_max)
HALF_OP(bf16_min, DDPH_BF16, ddph__cpu_min)
#undef HALF_OP

static MPI_Datatype mpi_type(const ddph_mpi *m, ddph_dtype t)
{
    switch (t) {
    case DDPH_F32:
        return MPI_FLOAT;
    case DDPH_F64:
        return MPI_DOUBLE;
    case DDPH_F16:
    case DDPH_BF16:
        return m->half_type;
    case DDPH_I32:
        return MPI_INT32_T;
    case DDPH_I64:
        return MPI_INT64_T;
    case DDPH_U8:
        return MPI_UINT8_T;
    case DDPH_I8:
        return MPI_INT8_T;
    case DDPH_DTYPE_COUNT:
        break;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(const ddph_mpi *m, ddph_dtype t, ddph_redop op)
{
    if (t == DDPH_F16 || t == DDPH_BF16)
        return m->ops[t][op];
    switch (op) {
    case DDPH_SUM:
        return MPI_SUM;
    case DDPH_MAX:
        return MPI_MAX;
    case DDPH_MIN:
        return MPI_MIN;
    }
    return MPI_OP_NULL;
}

static int valid(ddph_dtype t, ddph_redop op)
{
    return (unsigned)t < DDPH_DTYPE_COUNT && (unsigned)op <= DDPH_MIN;
}

/* A duplicate of MPI_COMM_WORLD, within timeout_s (MPI_Comm_dup would
 * block forever on a rank whose peer never came). */
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

static ddph_status dup_world(ddph_mpi *m, MPI_Comm *out, const char *what,
                             ddph_err *err)
{
    MPI_Request req;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, out, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, err, rc, "MPI_Comm_idup");
    ddph_status st = wait_timed(m, &req, what, err);
    if (st == DDPH_OK)
        MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return st;
}

ddph_status ddph__mpi_init(ddph_mpi *m, int *argc, char ***argv,
                           double timeout_s, ddph_err *err)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->fault_mu, NULL);
    pthread_mutex_init(&m->departed_mu, NULL);
    m->timeout_s = timeout_s;
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
            return mpi_fail(m, err, rc, "MPI_Init_thread");
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
    if (st != DDPH_OK)
        return st;
    m->trainer.rank = m->world.rank;
    m->trainer.size = m->world.size;
    m->trainer.owned = 1;
    m->heard_us = calloc((size_t)m->world.size, sizeof *m->heard_us);
    if (!m->heard_us)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    MPI_Type_contiguous(2, MPI_BYTE, &m->half_type);
    MPI_Type_commit(&m->half_type);
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min},
                                    {bf16_sum, bf16_max, bf16_min}};
    for (int k = 0; k < 3; k++) {
        MPI_Op_create(fns[0][k], 1, &m->ops[DDPH_F16][k]);
        MPI_Op_create(fns[1][k], 1, &m->ops[DDPH_BF16][k]);
    }
    return DDPH_OK;
}

ddph_status ddph__mpi_lane_groups(ddph_mpi *m, int n,
                                  struct ddph_group **out, ddph_err *err)
{
    out[0] = &m->world;
    for (int i = 1; i < n; i++) {
        struct ddph_group *g = calloc(1, sizeof *g);
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

/* MPI_Finalize can block after the job is over: MPICH 4.0's ch4:ucx
 * closes its endpoints, waiting for each peer's acknowledgement, then
 * enters a blocking PMI barrier; a rank already in that barrier no longer
 * progresses UCX, so a peer still closing waits forever (seen over TCP on
 * tests/cluster/cluster.sh's hosts; MPICH removed the barrier in 4.2,
 * pmodels/mpich#6596).  A peer that dies after the last barrier does the
 * same.  Every rank has ended the job by then (the barrier of
 * ddph__mpi_leave passed), so a watchdog ends the process with status 0
 * after FINALIZE_GRACE_S, saying so. */
#define FINALIZE_GRACE_S 10.0

void ddph__mpi_finalize_watched(double limit_s)
{
    mpi_watch w = {.limit_s = limit_s,
                   .what = "MPI_Finalize",
                   .why = "MPICH's finalize deadlock after every rank had "
                          "ended the job, or a peer that died since",
                   .exit_status = 0};
    pthread_t t;
    int watching = watch_start(&w, &t);
    MPI_Finalize();
    watch_stop(&w, t, watching);
}

ddph_status ddph__mpi_leave(ddph_mpi *m, ddph_err *err)
{
    m->left = 1;
    /* The peers wait for this rank's closing notice as it waits for
     * theirs: sent here if the caller did not (ddph_close sends it
     * earlier, before stopping the communication thread). */
    if (!atomic_load(&m->closing))
        ddph__mpi_closing(m);
    ddph_status st = ddph__mpi_fault(m, err);
    if (st != DDPH_OK || m->alarm == MPI_COMM_NULL)
        return st;
    /* On the alarm communicator: a peer still in a step must never see
     * this barrier match its step's collective. */
    MPI_Request req;
    int rc = MPI_Ibarrier(m->alarm, &req);
    st = rc == MPI_SUCCESS ? wait_timed(m, &req, "the barrier of ddph_close", err)
                           : mpi_fail(m, err, rc, "MPI_Ibarrier");
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
        ddph__mpi_leave(m, err);
    if (atomic_load(&m->broken)) {
        /* No collective, no MPI_Finalize: they could wait forever for a
         * dead peer.  The requests and communicators die with the process. */
        pthread_mutex_lock(&m->fault_mu);
        if (!m->fault_notified)
            notify_peers(m);
        st = ddph__fail(err, m->fault_status, "%s", m->fault_msg);
        pthread_mutex_unlock(&m->fault_mu);
        return st;
    }
    for (struct ddph_group *g = m->groups, *next; g; g = next) {
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
    if (m->alarm != MPI_COMM_NULL)
        MPI_Comm_free(&m->alarm);
    for (int t = DDPH_F16; t <= DDPH_BF16; t++)
        for (int k = 0; k < 3; k++)
            if (m->ops[t][k] != MPI_OP_NULL && m->ops[t][k])
                MPI_Op_free(&m->ops[t][k]);
    if (m->half_type)
        MPI_Type_free(&m->half_type);
    if (m->initialized_mpi)
        ddph__mpi_finalize_watched(m->timeout_s < FINALIZE_GRACE_S
                                       ? m->timeout_s
                                       : FINALIZE_GRACE_S);
out:
    departures_collect(m, 1);
    pthread_mutex_destroy(&m->departed_mu);
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

/* ---- half-precision sums: a ring of point-to-point messages ---------------
 * MPI has no f16 or bf16, so their sums are user-defined operations, and
 * MPICH 4.0 runs MPI_Iallreduce with one 1.5-1.9x slower than its blocking
 * MPI_Allreduce over TCP (docs/performance.md, "1 Gbit/s after the
 * half-precision work").  Large half-precision sums go round a ring
 * instead: reduce-scatter, then allgather, W-1 steps each, every rank
 * sending 2(W-1)/W of the buffer as plain bytes to the next rank and
 * adding what the previous one sent with the register kernels.  Every
 * wait keeps the call's deadline.  Concurrent calls are on different
 * communicators (lanes, subgroups), so the tag cannot mix them up. */
enum { RING_TAG = 19 };
#define RING_BLOCK_BYTES ((size_t)4 << 20) /* per message */
#define RING_MIN_BYTES ((size_t)32 << 10) /* below: MPICH's allreduce */

/* The group's receive buffer for a ring of count elements: grown, never
 * shrunk, freed with the group.  After a failed wait a receive into it
 * may still be posted; the job is broken then and never calls here again. */
static char *ring_scratch(struct ddph_group *g, size_t count, size_t es)
{
    size_t most = (count + (size_t)g->size - 1) / (size_t)g->size * es;
    size_t want = most < RING_BLOCK_BYTES ? most : RING_BLOCK_BYTES;
    if (want > g->scratch_bytes) {
        char *p = realloc(g->scratch, want);
        if (!p)
            return NULL;
        g->scratch = p;
        g->scratch_bytes = want;
    }
    return g->scratch;
}

/* One step: chunk `out` of buf to the next rank while the previous rank's
 * chunk `in` arrives, a block at a time (the peer splits its chunk the
 * same way); with `sum`, each block arrives in the group's scratch and is
 * added into buf, else it lands in place. */
static ddph_status ring_step(ddph_mpi *m, struct ddph_group *g, char *buf,
                             size_t count, ddph_dtype dtype, int out, int in,
                             int sum, double start, ddph_err *err)
{
    size_t es = ddph__dtype_size(dtype), blk = RING_BLOCK_BYTES / es;
    size_t oat, on, iat, inn;
    ddph__chunk(count, g->size, out, &oat, &on);
    ddph__chunk(count, g->size, in, &iat, &inn);
    char *tmp = g->scratch;
    int next = (g->rank + 1) % g->size;
    int prev = (g->rank + g->size - 1) % g->size;
    for (size_t i = 0; i < on || i < inn; i += blk) {
        size_t so = i < on ? (on - i < blk ? on - i : blk) : 0;
        size_t ri = i < inn ? (inn - i < blk ? inn - i : blk) : 0;
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        int rc = MPI_SUCCESS;
        if (ri)
            rc = MPI_Irecv(sum ? tmp : buf + (iat + i) * es, (int)(ri * es),
                           MPI_BYTE, prev, RING_TAG, g->comm, &reqs[0]);
        if (rc == MPI_SUCCESS && so)
            rc = MPI_Isend(buf + (oat + i) * es, (int)(so * es), MPI_BYTE,
                           next, RING_TAG, g->comm, &reqs[1]);
        if (rc != MPI_SUCCESS)
            return mpi_fail(m, err, rc, "allreduce (ring)");
        ddph_status st = wait_timed_all(m, 2, reqs, start, "allreduce", err);
        if (st != DDPH_OK)
            return st;
        if (sum && ri)
            ddph__cpu_add(buf + (iat + i) * es, tmp, dtype, ri);
    }
    return DDPH_OK;
}

static ddph_status ring_allreduce(ddph_mpi *m, struct ddph_group *g,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  ddph_err *err)
{
    int w = g->size, r = g->rank;
    double start = ddph__now();
    if (!ring_scratch(g, count, ddph__dtype_size(dtype)))
        return ddph__fail(err, DDPH_ERR_NOMEM,
                          "allreduce: out of memory for the ring's buffer");
    ddph_status st = DDPH_OK;
    /* Reduce-scatter: at step s chunk r-s goes on, chunk r-s-1 comes in
     * and is added; rank r ends with chunk r+1 summed over every rank. */
    for (int s = 0; s < w - 1 && st == DDPH_OK; s++)
        st = ring_step(m, g, buf, count, dtype, (r - s + w) % w,
                       (r - s - 1 + w) % w, 1, start, err);
    /* Allgather: the summed chunks go round. */
    for (int s = 0; s < w - 1 && st == DDPH_OK; s++)
        st = ring_step(m, g, buf, count, dtype, (r + 1 - s + w) % w,
                       (r - s + w) % w, 0, start, err);
    return st;
}

ddph_status ddph__mpi_allreduce(ddph_mpi *m, struct ddph_group *g, void *buf,
                                size_t count, ddph_dtype dtype, ddph_redop op,
                                ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!valid(dtype, op))
        return ddph__fail(err, DDPH_ERR_INVALID, "allreduce: bad dtype or op");
    size_t es = ddph__dtype_size(dtype);
    if (g->world_order && atomic_load(&m->segments)) {
        int done = 0;
        ddph_status st = ddph__shared_allreduce(m, g, buf, count, dtype, op,
                                                &done, err);
        if (st != DDPH_OK || done)
            return st;
    }
    if ((dtype == DDPH_F16 || dtype == DDPH_BF16) && op == DDPH_SUM &&
        g->size > 1 && count * es >= RING_MIN_BYTES)
        return ring_allreduce(m, g, buf, count, dtype, err);
    char *p = buf;
    /* An empty allreduce still synchronises, as PyTorch's does. */
    do {
        size_t n = piece(count, es);
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, n ? (void *)p : NULL, (int)n,
                                mpi_type(m, dtype), mpi_op(m, dtype, op),
                                g->comm, &req);
        if (rc != MPI_SUCCESS)
            return mpi_fail(m, err, rc, "MPI_Iallreduce");
        ddph_status st = wait_timed(m, &req, "allreduce", err);
        if (st != DDPH_OK)
            return st;
        p += n * es;
        count -= n;
    } while (count > 0);
    return DDPH_OK;
}

ddph_status ddph__mpi_allgather(ddph_mpi *m, struct ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, const char *what,
                                ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!valid(dtype, DDPH_SUM))
        return ddph__fail(err, DDPH_ERR_INVALID, "allgather: bad dtype");
    if (count > CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "allgather: %zu elements per rank is over 2^30",
                          count);
    MPI_Request req;
    int rc = MPI_Iallgather(send, (int)count, mpi_type(m, dtype), recv,
                            (int)count, mpi_type(m, dtype), g->comm, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, err, rc, "MPI_Iallgather");
    return wait_timed(m, &req, what, err);
}

ddph_status ddph__mpi_broadcast(ddph_mpi *m, struct ddph_group *g, void *buf,
                                size_t count, ddph_dtype dtype, int root,
                                ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!valid(dtype, DDPH_SUM) || root < 0 || root >= g->size)
        return ddph__fail(err, DDPH_ERR_INVALID, "broadcast: bad dtype or root");
    size_t es = ddph__dtype_size(dtype);
    char *p = buf;
    do {
        size_t n = piece(count, es);
        MPI_Request req;
        int rc = MPI_Ibcast(p, (int)n, mpi_type(m, dtype), root, g->comm, &req);
        if (rc != MPI_SUCCESS)
            return mpi_fail(m, err, rc, "MPI_Ibcast");
        ddph_status st = wait_timed(m, &req, "broadcast", err);
        if (st != DDPH_OK)
            return st;
        p += n * es;
        count -= n;
    } while (count > 0);
    return DDPH_OK;
}

ddph_status ddph__mpi_reduce_scatter(ddph_mpi *m, struct ddph_group *g,
                                     const void *send, void *recv,
                                     size_t count, ddph_dtype dtype,
                                     ddph_redop op, ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (!valid(dtype, op))
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "reduce_scatter: bad dtype or op");
    if (count > CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "reduce_scatter: %zu elements per rank is over 2^30",
                          count);
    MPI_Request req;
    int rc = MPI_Ireduce_scatter_block(send, recv, (int)count,
                                       mpi_type(m, dtype), mpi_op(m, dtype, op),
                                       g->comm, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, err, rc, "MPI_Ireduce_scatter_block");
    return wait_timed(m, &req, "reduce_scatter", err);
}

/* ---- nonblocking collectives (ABI minor 2) -------------------------------- */

static ddph_status op_begin(ddph_mpi *m, ddph_mpi_op *op, int nreqs,
                            const char *what, ddph_err *err)
{
    memset(op, 0, sizeof *op);
    op->what = what;
    op->start = ddph__now();
    op->reqs = malloc((size_t)nreqs * sizeof *op->reqs);
    if (!op->reqs)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nreqs; i++)
        op->reqs[i] = MPI_REQUEST_NULL;
    (void)m;
    return DDPH_OK;
}

/* A start that failed before any request was posted. */
static ddph_status op_cancel(ddph_mpi_op *op, ddph_status st)
{
    free(op->reqs);
    free(op->counts);
    free(op->displs);
    memset(op, 0, sizeof *op);
    return st;
}

/* After an MPI call failed part-way: the requests already posted may still
 * touch op's arrays, so they are left allocated. */
static ddph_status op_broken(ddph_mpi *m, ddph_mpi_op *op, int rc,
                             const char *what, ddph_err *err)
{
    memset(op, 0, sizeof *op);
    return mpi_fail(m, err, rc, what);
}

ddph_status ddph__mpi_start_allreduce(ddph_mpi *m, struct ddph_group *g,
                                      void *buf, size_t count,
                                      ddph_dtype dtype, ddph_redop op,
                                      ddph_mpi_op *out, ddph_err *err)
{
    ddph_status st = collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    if (!valid(dtype, op))
        return ddph__fail(err, DDPH_ERR_INVALID, "allreduce: bad dtype or op");
    size_t es = ddph__dtype_size(dtype), most = piece(SIZE_MAX, es);
    size_t pieces = count ? (count + most - 1) / most : 1;
    if (pieces > INT_MAX / 2)
        return ddph__fail(err, DDPH_ERR_INVALID, "allreduce: too large");
    if ((st = op_begin(m, out, (int)pieces, "allreduce", err)) != DDPH_OK)
        return st;
    char *p = buf;
    for (size_t i = 0; i < pieces; i++) {
        size_t n = piece(count, es);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, n ? (void *)p : NULL, (int)n,
                                mpi_type(m, dtype), mpi_op(m, dtype, op),
                                g->comm, &out->reqs[out->nreqs]);
        if (rc != MPI_SUCCESS)
            return op_broken(m, out, rc, "MPI_Iallreduce", err);
        out->nreqs++;
        p += n * es;
        count -= n;
    }
    return DDPH_OK;
}

/* allgather and alltoall: one call, count elements per rank's block. */
static ddph_status start_blocks(ddph_mpi *m, struct ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, int alltoall,
                                ddph_mpi_op *out, ddph_err *err)
{
    const char *what = alltoall ? "alltoall" : "allgather";
    ddph_status st = collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    if (!valid(dtype, DDPH_SUM) || count > CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "%s: bad dtype, or %zu elements per block (at "
                          "most 2^30)",
                          what, count);
    if ((st = op_begin(m, out, 1, what, err)) != DDPH_OK)
        return st;
    MPI_Datatype t = mpi_type(m, dtype);
    int n = (int)count;
    int rc = alltoall ? MPI_Ialltoall(send, n, t, recv, n, t, g->comm,
                                      &out->reqs[0])
                      : MPI_Iallgather(send, n, t, recv, n, t, g->comm,
                                       &out->reqs[0]);
    if (rc != MPI_SUCCESS)
        return op_broken(m, out, rc,
                         alltoall ? "MPI_Ialltoall" : "MPI_Iallgather", err);
    out->nreqs = 1;
    return DDPH_OK;
}

ddph_status ddph__mpi_start_allgather(ddph_mpi *m, struct ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_mpi_op *out, ddph_err *err)
{
    return start_blocks(m, g, send, recv, count, dtype, 0, out, err);
}

ddph_status ddph__mpi_start_allgatherv(ddph_mpi *m, struct ddph_group *g,
                                       const void *send, void *recv,
                                       const size_t *counts, ddph_dtype dtype,
                                       ddph_mpi_op *out, ddph_err *err)
{
    ddph_status st = collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    if (!valid(dtype, DDPH_SUM))
        return ddph__fail(err, DDPH_ERR_INVALID, "allgatherv: bad dtype");
    if ((st = op_begin(m, out, 1, "allgatherv", err)) != DDPH_OK)
        return st;
    out->counts = malloc((size_t)g->size * sizeof *out->counts);
    out->displs = malloc((size_t)g->size * sizeof *out->displs);
    if (!out->counts || !out->displs)
        return op_cancel(out, ddph__fail(err, DDPH_ERR_NOMEM, "out of memory"));
    size_t total = 0;
    for (int r = 0; r < g->size; r++) {
        /* MPI-3 counts and displacements are int. */
        if (counts[r] > CHUNK || total > INT_MAX)
            return op_cancel(out, ddph__fail(err, DDPH_ERR_INVALID,
                                             "allgatherv: rank %d's count "
                                             "%zu, or the total, is over "
                                             "2^30",
                                             r, counts[r]));
        out->counts[r] = (int)counts[r];
        out->displs[r] = (int)total;
        total += counts[r];
    }
    int rc = MPI_Iallgatherv(send, out->counts[g->rank], mpi_type(m, dtype),
                             recv, out->counts, out->displs,
                             mpi_type(m, dtype), g->comm, &out->reqs[0]);
    if (rc != MPI_SUCCESS)
        return op_broken(m, out, rc, "MPI_Iallgatherv", err);
    out->nreqs = 1;
    return DDPH_OK;
}

ddph_status ddph__mpi_start_alltoall(ddph_mpi *m, struct ddph_group *g,
                                     const void *send, void *recv,
                                     size_t count, ddph_dtype dtype,
                                     ddph_mpi_op *out, ddph_err *err)
{
    return start_blocks(m, g, send, recv, count, dtype, 1, out, err);
}

ddph_status ddph__mpi_op_wait(ddph_mpi *m, ddph_mpi_op *op, ddph_err *err)
{
    ddph_status st =
        wait_timed_all(m, op->nreqs, op->reqs, op->start, op->what, err);
    if (st == DDPH_OK)
        op_cancel(op, DDPH_OK);
    else
        memset(op, 0, sizeof *op); /* MPI may still use the arrays */
    return st;
}

ddph_status ddph__mpi_op_test(ddph_mpi *m, ddph_mpi_op *op, int *done,
                              ddph_err *err)
{
    *done = 0;
    ddph__activity_touch(); /* polled by a hook: bounded by its deadline */
    int rc = test_all(op->nreqs, op->reqs, done);
    const char *what = op->what ? op->what : "test";
    ddph_status st = DDPH_OK;
    if (rc != MPI_SUCCESS)
        st = mpi_fail(m, err, rc, what);
    else if (*done)
        return op_cancel(op, DDPH_OK);
    else if ((st = collective_fault(m, err)) == DDPH_OK &&
             ddph__now() > op->start + m->timeout_s)
        st = timed_out(m, what, " of its start", err);
    if (st != DDPH_OK)
        memset(op, 0, sizeof *op); /* MPI may still use the arrays */
    return st;
}

ddph_status ddph__mpi_allgatherv(ddph_mpi *m, struct ddph_group *g,
                                 const void *send, void *recv,
                                 const size_t *counts, ddph_dtype dtype,
                                 ddph_err *err)
{
    ddph_mpi_op op;
    ddph_status st =
        ddph__mpi_start_allgatherv(m, g, send, recv, counts, dtype, &op, err);
    return st != DDPH_OK ? st : ddph__mpi_op_wait(m, &op, err);
}

ddph_status ddph__mpi_alltoall(ddph_mpi *m, struct ddph_group *g,
                               const void *send, void *recv, size_t count,
                               ddph_dtype dtype, ddph_err *err)
{
    ddph_mpi_op op;
    ddph_status st =
        ddph__mpi_start_alltoall(m, g, send, recv, count, dtype, &op, err);
    return st != DDPH_OK ? st : ddph__mpi_op_wait(m, &op, err);
}

/* The runtime's own small collectives take their callers' stack buffers.
 * A collective abandoned on a timeout cannot be cancelled, and a late peer
 * would still write into its buffer: they run on a heap copy instead,
 * which is left allocated when the wait fails. */
/* ---- collective fingerprints -------------------------------------------- */

/* The collectives a hook can issue, by the names the services use. */
static const char *const fp_kinds[] = {
    "allreduce",  "allgather",  "broadcast",   "reduce_scatter", "allgatherv",
    "alltoall",   "iallreduce", "iallgather",  "iallgatherv",    "ialltoall",
};
/* sequence, kind, dtype, count, op, root, iteration, bucket */
enum { FP_FIELDS = 8 };

static const char *fp_op_name(int64_t op)
{
    return op == DDPH_SUM ? ", sum" : op == DDPH_MAX ? ", max"
           : op == DDPH_MIN ? ", min" : "";
}

/* "allreduce(f32, 4096, sum)" for one rank's record. */
static void fp_describe(const int64_t *r, char *out, size_t cap)
{
    size_t nk = sizeof fp_kinds / sizeof *fp_kinds;
    const char *kind = r[1] >= 0 && (size_t)r[1] < nk ? fp_kinds[r[1]] : "?";
    char root[32] = "";
    if (r[5] >= 0)
        snprintf(root, sizeof root, ", root %lld", (long long)r[5]);
    char where[64];
    if (r[7] >= 0)
        snprintf(where, sizeof where, "iteration %lld, bucket %lld",
                 (long long)r[6], (long long)r[7]);
    else
        snprintf(where, sizeof where, "step %lld, after the optimizer",
                 (long long)r[6]);
    snprintf(out, cap, "%s(%s, %lld%s%s) as its collective #%lld (%s)", kind,
             r[2] >= 0 && r[2] < DDPH_DTYPE_COUNT
                 ? ddph__dtype_name((ddph_dtype)r[2])
                 : "?",
             (long long)r[3], fp_op_name(r[4]), root, (long long)r[0] + 1,
             where);
}

/* The fingerprint exchange of this thread's last hook collective, in
 * flight while the collective itself runs (a hook call runs on one
 * thread): checked when the thread's next hook collective starts, while
 * its waits poll, and when the hook call ends
 * (ddph__mpi_fingerprint_settle).  Waiting for it before the collective
 * cost a round trip per bucket that could not overlap anything: ResNet-50
 * at 1 Gbit/s, 2 hosts, about 3.5% a step. */
static _Thread_local struct {
    ddph_mpi *m;
    MPI_Request req;
    int64_t *block; /* this rank's record, then every rank's; NULL: none */
    int size;
    const char *what, *model;
} pending_fp;

/* Compares the records of a completed exchange; the first rank whose
 * record differs from rank 0's fails the job on every rank. */
static ddph_status fp_compare(ddph_mpi *m, const int64_t *all, int size,
                              const char *model, ddph_err *err)
{
    size_t bytes = FP_FIELDS * sizeof *all;
    int odd = -1;
    for (int r = 1; r < size && odd < 0; r++)
        if (memcmp(all + (size_t)r * FP_FIELDS, all, bytes) != 0)
            odd = r;
    if (odd < 0)
        return DDPH_OK;
    char same[128] = "", first[224], other[224];
    size_t used = 0;
    for (int r = 0; r < size; r++)
        if (memcmp(all + (size_t)r * FP_FIELDS, all, bytes) == 0 &&
            used + 12 < sizeof same)
            used += (size_t)snprintf(same + used, sizeof same - used, "%s%d",
                                     used ? ", " : "", r);
    fp_describe(all, first, sizeof first);
    fp_describe(all + (size_t)odd * FP_FIELDS, other, sizeof other);
    char msg[DDPH__NOTICE_LEN];
    snprintf(msg, sizeof msg,
             "the ranks' collectives differ (model '%s', group of %d ranks): "
             "rank %d called %s where rank%s %s called %s (a hook issued an "
             "extra, a missing or a different collective on some rank)",
             model ? model : "?", size, odd, other,
             strchr(same, ',') ? "s" : "", same, first);
    ddph_status st = ddph__fail(err, DDPH_ERR_MISMATCH, "%s", msg);
    ddph__mpi_fail_job(m, st, msg);
    return st;
}

/* The pending exchange has completed: compared, and forgotten. */
static ddph_status fp_finish(ddph_err *err)
{
    ddph_status st = fp_compare(pending_fp.m, pending_fp.block + FP_FIELDS,
                                pending_fp.size, pending_fp.model, err);
    free(pending_fp.block);
    pending_fp.block = NULL;
    return st;
}

/* From a wait's polling loop: the pending exchange, if it has completed
 * (a mismatch then ends the wait at once, whatever the data does). */
static ddph_status fp_poll(const MPI_Request *waiting, ddph_err *err)
{
    if (!pending_fp.block || waiting == &pending_fp.req)
        return DDPH_OK;
    int flag = 0;
    if (MPI_Test(&pending_fp.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
        !flag)
        return DDPH_OK; /* a failed exchange: the settle reports it */
    return fp_finish(err);
}

ddph_status ddph__mpi_fingerprint_settle(ddph_mpi *m, ddph_err *err)
{
    if (!pending_fp.block)
        return DDPH_OK;
    ddph_status st = wait_timed(m, &pending_fp.req, pending_fp.what, err);
    if (st != DDPH_OK) {
        /* Abandoned: a late peer may still write into the block, which
         * stays allocated (as every abandoned collective's buffer). */
        pending_fp.block = NULL;
        return st;
    }
    return fp_finish(err);
}

ddph_status ddph__mpi_fingerprint(ddph_mpi *m, struct ddph_group *g,
                                  const char *what, ddph_dtype dtype,
                                  size_t count, int op, int root,
                                  const char *model, int64_t iteration,
                                  int64_t bucket, ddph_err *err)
{
    if (!m->check_collectives || g->fingerprints == MPI_COMM_NULL ||
        g->size < 2)
        return DDPH_OK;
    /* The previous collective's exchange first: a mismatch there is the
     * one to report. */
    ddph_status st = ddph__mpi_fingerprint_settle(m, err);
    if (st != DDPH_OK)
        return st;
    st = collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    int64_t kind = -1;
    for (size_t k = 0; k < sizeof fp_kinds / sizeof *fp_kinds; k++)
        if (strcmp(fp_kinds[k], what) == 0)
            kind = (int64_t)k;
    int64_t *block = malloc(((size_t)g->size + 1) * FP_FIELDS * sizeof *block);
    if (!block)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    const int64_t record[FP_FIELDS] = {g->sequence++, kind,  (int64_t)dtype,
                                       (int64_t)count, op,    root,
                                       iteration,      bucket};
    memcpy(block, record, sizeof record);
    int rc = MPI_Iallgather(block, FP_FIELDS, MPI_INT64_T, block + FP_FIELDS,
                            FP_FIELDS, MPI_INT64_T, g->fingerprints,
                            &pending_fp.req);
    if (rc != MPI_SUCCESS) {
        free(block);
        return mpi_fail(m, err, rc, "MPI_Iallgather");
    }
    pending_fp.m = m;
    pending_fp.block = block;
    pending_fp.size = g->size;
    pending_fp.what = what;
    pending_fp.model = model;
    return DDPH_OK;
}

ddph_status ddph__mpi_bcast_bytes(ddph_mpi *m, void *buf, size_t n, int root,
                                  ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    if (n > CHUNK)
        return ddph__fail(err, DDPH_ERR_INVALID, "broadcast: too large");
    void *copy = malloc(n ? n : 1);
    if (!copy)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    memcpy(copy, buf, n);
    MPI_Request req;
    int rc = MPI_Ibcast(copy, (int)n, MPI_BYTE, root, m->world.comm, &req);
    if (rc != MPI_SUCCESS) {
        free(copy);
        return mpi_fail(m, err, rc, "MPI_Ibcast");
    }
    ddph_status st = wait_timed(m, &req, "broadcast", err);
    if (st == DDPH_OK) {
        memcpy(buf, copy, n);
        free(copy);
    }
    return st;
}

ddph_status ddph__mpi_allreduce_i64(ddph_mpi *m, int64_t *v, size_t n,
                                    ddph_redop op, ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
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
        return mpi_fail(m, err, rc, "MPI_Iallreduce");
    }
    ddph_status st = wait_timed(m, &req, "allreduce", err);
    if (st == DDPH_OK) {
        memcpy(v, copy, n * sizeof *copy);
        free(copy);
    }
    return st;
}

ddph_status ddph__mpi_gather_bytes(ddph_mpi *m, const void *buf, size_t n,
                                   char **out, size_t *total, ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    int size = m->world.size, root = m->world.rank == 0;
    if (n > CHUNK)
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
    ddph_status st = rc == MPI_SUCCESS ? wait_timed(m, &req, "gather", err)
                                       : mpi_fail(m, err, rc, "MPI_Igather");
    size_t sum = 0;
    for (int r = 0; root && r < size; r++) {
        displs[r] = (int)sum;
        sum += (size_t)lens[r];
    }
    char *all = NULL;
    if (st == DDPH_OK && root && (sum > CHUNK || !(all = malloc(sum + 1))))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "gather: %zu bytes", sum);
    /* Every rank enters the second collective, even if rank 0 failed to
     * allocate (it then receives nothing useful but does not hang). */
    if (st == DDPH_OK || (root && st == DDPH_ERR_NOMEM)) {
        rc = MPI_Igatherv(buf, len, MPI_BYTE, all, lens, displs, MPI_BYTE, 0,
                          m->world.comm, &req);
        ddph_status st2 = rc == MPI_SUCCESS ? wait_timed(m, &req, "gather", err)
                                            : mpi_fail(m, err, rc, "MPI_Igatherv");
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

static ddph_status barrier_timed(ddph_mpi *m, MPI_Comm comm, const char *what,
                                 ddph_err *err)
{
    MPI_Request req;
    int rc = MPI_Ibarrier(comm, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(m, err, rc, "MPI_Ibarrier");
    return wait_timed(m, &req, what, err);
}

ddph_status ddph__mpi_barrier(ddph_mpi *m, struct ddph_group *g,
                              const char *what, ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    return broken != DDPH_OK ? broken : barrier_timed(m, g->comm, what, err);
}

static ddph_status adopt(ddph_mpi *m, MPI_Comm comm, struct ddph_group **out,
                         ddph_err *err)
{
    struct ddph_group *g = calloc(1, sizeof *g);
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

ddph_status ddph__mpi_split(ddph_mpi *m, struct ddph_group *parent, int color,
                            int key, struct ddph_group **out, ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
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
        return mpi_fail(m, err, rc, "MPI_Comm_split");
    if (comm == MPI_COMM_NULL)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "group_split: a negative color leaves no group");
    return adopt(m, comm, out, err);
}

/* The ranks of this host: a shared-memory split of the world, after a
 * barrier that ends within timeout_s (the split itself cannot be timed). */
static ddph_status split_node(ddph_mpi *m, MPI_Comm *comm, ddph_err *err)
{
    ddph_status broken = collective_fault(m, err);
    if (broken != DDPH_OK)
        return broken;
    ddph_status st = barrier_timed(m, m->world.comm, "intra_node", err);
    if (st != DDPH_OK)
        return st;
    int rc = MPI_Comm_split_type(m->world.comm, MPI_COMM_TYPE_SHARED,
                                 m->world.rank, MPI_INFO_NULL, comm);
    return rc == MPI_SUCCESS ? DDPH_OK
                             : mpi_fail(m, err, rc, "MPI_Comm_split_type");
}

ddph_status ddph__mpi_intra_node(ddph_mpi *m, struct ddph_group **out,
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
    return DDPH_OK;
}
