/* peer_notices.c: the peers' departures, per rank (peer_notices.h). */
#include "build-config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/comm.h"
#include "backends/peer_notices.h"

typedef struct {
    int kind; /* 0: none yet; DDPH__DEPART_* */
    int64_t syncs, calls;
    char what[48];
} departure;

struct ddph_peer_notices {
    pthread_mutex_t mu; /* the backend's threads record and read at once */
    int world_size;
    departure peer[]; /* one a rank */
};

ddph_peer_notices *ddph__notices_new(int world_size)
{
    if (world_size < 1)
        return NULL;
    ddph_peer_notices *n =
        calloc(1, sizeof *n + (size_t)world_size * sizeof n->peer[0]);
    if (!n)
        return NULL;
    pthread_mutex_init(&n->mu, NULL);
    n->world_size = world_size;
    return n;
}

void ddph__notices_free(ddph_peer_notices *n)
{
    if (!n)
        return;
    pthread_mutex_destroy(&n->mu);
    free(n);
}

void ddph__notices_record(ddph_peer_notices *n, int rank, int kind,
                          int64_t syncs, int64_t calls, const char *what)
{
    if (!n || rank < 0 || rank >= n->world_size ||
        kind < DDPH__DEPART_DATA_END || kind > DDPH__DEPART_CLOSED)
        return; /* not a notice of this job's: nothing to learn */
    pthread_mutex_lock(&n->mu);
    departure *d = &n->peer[rank];
    if (d->kind != DDPH__DEPART_CLOSED) {
        d->kind = kind;
        d->syncs = syncs;
        d->calls = calls;
        snprintf(d->what, sizeof d->what, "%s", what ? what : "");
    }
    pthread_mutex_unlock(&n->mu);
}

int ddph__notices_closed(ddph_peer_notices *n, int rank, int64_t *after)
{
    if (!n || rank < 0 || rank >= n->world_size)
        return 0;
    pthread_mutex_lock(&n->mu);
    int closed = n->peer[rank].kind == DDPH__DEPART_CLOSED;
    if (closed && after)
        *after = n->peer[rank].syncs;
    pthread_mutex_unlock(&n->mu);
    return closed;
}

/* Whether d keeps its peer out of the collective of the step after
 * this rank's syncs_done-th: the peer's last synchronised step is behind
 * it, and (a trainer call) this rank has not made that call yet. */
static int never_joins(const departure *d, int64_t syncs_done,
                       int64_t trainer_calls)
{
    if (!d->kind || syncs_done < d->syncs)
        return 0;
    return d->kind != DDPH__DEPART_TRAINER_CALL || trainer_calls < d->calls;
}

static void describe(const departure *d, int rank, int64_t syncs_done,
                     char *text, size_t cap)
{
    long long s = (long long)d->syncs, mine = (long long)syncs_done;
    const char *steps = s == 1 ? "" : "s";
    if (d->kind == DDPH__DEPART_CLOSED)
        snprintf(text, cap,
                 "rank %d closed the job (ddph_close) after %lld "
                 "synchronised step%s, while this rank waits on a "
                 "collective after its own %lld",
                 rank, s, steps, mine);
    else if (d->kind == DDPH__DEPART_DATA_END)
        snprintf(text, cap,
                 "rank %d ended its data (DDPH_STEP_LAST) after %lld "
                 "synchronised step%s, while this rank waits on a "
                 "collective of its step %lld (uneven inputs: every rank "
                 "must run the same number of synchronising steps)",
                 rank, s, steps, mine + 1);
    else
        snprintf(text, cap,
                 "rank %d called %s after %lld synchronised step%s, while "
                 "this rank waits on a collective of its step %lld (uneven "
                 "inputs: that rank ran out of steps early, or the ranks "
                 "call the trainer collectives at different points)",
                 rank, d->what, s, steps, mine + 1);
}

int ddph__notices_breaking(ddph_peer_notices *n, int64_t syncs_done,
                           int64_t trainer_calls, char *text, size_t cap)
{
    if (!n)
        return -1;
    pthread_mutex_lock(&n->mu);
    int found = -1;
    for (int r = 0; r < n->world_size && found < 0; r++)
        if (never_joins(&n->peer[r], syncs_done, trainer_calls)) {
            found = r;
            describe(&n->peer[r], r, syncs_done, text, cap);
        }
    pthread_mutex_unlock(&n->mu);
    return found;
}
