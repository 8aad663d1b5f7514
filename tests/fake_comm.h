/* fake_comm.h: a communicator for unit tests, behind comm.h's tables:
 * the ranks of a job are threads of one process, and every collective
 * moves real data between them (each rank's input is copied aside, the
 * ranks meet, each computes its result from all the inputs in rank order,
 * the ranks meet again), so results are the same bits on every rank.
 *
 * A failure can be planted on a chosen collective of a chosen rank: that
 * call fails; when its caller breaks the job (ddph_control_ops.fail, as
 * the reducer does), the peers waiting for it, and every later
 * collective, fail with the caller's message, as on a job over MPI.
 * No rank waits longer than FAKE_COMM_WAIT_S: a collective one rank
 * never calls fails with DDPH_ERR_TIMEOUT instead of hanging.
 *
 * Groups: the world and its duplicates (the lanes); splits are refused.
 * Nonblocking collectives complete when they start. */
#ifndef DDPH_TESTS_FAKE_COMM_H
#define DDPH_TESTS_FAKE_COMM_H

#include "backends/comm.h"

#define FAKE_COMM_WAIT_S 10.0
#define FAKE_COMM_MAX_LANES 4
#define FAKE_COMM_MAX_RANKS 16
#define FAKE_COMM_LOG 256 /* collectives remembered per rank */

typedef struct fake_world fake_world;

/* One collective as a rank called it. */
typedef struct fake_call {
    const char *what; /* "allreduce", ... */
    size_t count;
    int lane;
    float first; /* its buffer's first f32 element as the rank gave it */
} fake_call;

/* `size` ranks (1 to FAKE_COMM_MAX_RANKS); NULL when out of memory. */
fake_world *fake_world_new(int size);
void fake_world_free(fake_world *w);

/* Rank `rank`'s tables: a hook's collectives and a reducer's control
 * plane. */
ddph_comm fake_comm(fake_world *w, int rank);
ddph_control fake_control(fake_world *w, int rank);

/* Rank `rank`'s collective number `nth` (0: its first, counting every
 * group) returns `st` instead of running. */
void fake_fail_at(fake_world *w, int rank, int64_t nth, ddph_status st);

/* The collectives rank `rank` has called so far, and the i-th of them
 * (the first FAKE_COMM_LOG). */
int64_t fake_calls(fake_world *w, int rank);
fake_call fake_call_at(fake_world *w, int rank, int64_t i);

/* Whether the job is broken, and its first failure's message. */
int fake_broken(fake_world *w, const char **why);

#endif
