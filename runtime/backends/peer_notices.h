/* peer_notices.h: what each peer said of its leaving the steps, kept per
 * rank for every backend: its latest departure (its data ended, it calls
 * a trainer collective, it closed the job).  The rule that turns a
 * departure into this rank's failure (a collective of a step the peer
 * will never join) and that failure's words are here once, so that the
 * MPI and torch backends, and any other, report a departed peer alike.
 * The backend carries the notices (MPI messages, the store's keys) and
 * records each one here as it reads it. */
#ifndef DDPH_PEER_NOTICES_H
#define DDPH_PEER_NOTICES_H

#include <stddef.h>
#include <stdint.h>

/* A departure's kind: comm.h's DDPH__DEPART_DATA_END (1) and
 * DDPH__DEPART_TRAINER_CALL (2), and this one. */
enum { DDPH__DEPART_CLOSED = 3 };

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddph_peer_notices ddph_peer_notices;

/* NULL when out of memory. */
ddph_peer_notices *ddph__notices_new(int world_size);
void ddph__notices_free(ddph_peer_notices *n);

/* Peer `rank` left after `syncs` synchronised steps and `calls` trainer
 * calls (what: the trainer call, "ddph_barrier", ...).  Its latest notice
 * replaces the earlier: a peer that made a trainer call and went on
 * stepping is back in the steps.  A close is final. */
void ddph__notices_record(ddph_peer_notices *n, int rank, int kind,
                          int64_t syncs, int64_t calls, const char *what);

/* 1 when `rank` closed the job (*after: its synchronised steps), else 0. */
int ddph__notices_closed(ddph_peer_notices *n, int rank, int64_t *after);

/* For a rank that waits on a collective of the synchronised step after
 * its `syncs_done`-th, having made `trainer_calls` trainer calls: the
 * lowest peer whose departure means it will never join that collective,
 * the failure's words in text; -1 when none. */
int ddph__notices_breaking(ddph_peer_notices *n, int64_t syncs_done,
                           int64_t trainer_calls, char *text, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
