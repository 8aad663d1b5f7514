/* exit_guard.h: a process that exits while its job is open fails the job.
 *
 * A rank that calls exit() (or returns from main, or Python's sys.exit
 * ends in exit()) without ddph_close leaves its peers waiting on it, and
 * MPICH's launcher then kills them before they can say why, often
 * reporting success.  ddph_open arms an atexit handler for its context;
 * ddph_close disarms it.  If it fires, it says which rank left and how,
 * tells the peers through the fault path (they fail with "rank R failed:
 * rank R exited ..."), gives the notices time to arrive, and ends the
 * process with DDPH__EXIT_JOB_LEFT_OPEN instead of the status the trainer
 * gave.  It does nothing in a forked child (a data loader) and cannot see
 * _exit() or a signal, which run no handler. */
#ifndef DDPH_EXIT_GUARD_H
#define DDPH_EXIT_GUARD_H

#include "core/context.h"

/* The exit status of a process that exited with its job open. */
#define DDPH__EXIT_JOB_LEFT_OPEN 1

/* How long the leaving rank keeps MPI moving after telling its peers: a
 * peer waiting on a collective hears within 50 ms (mpi_fault.c) and must
 * report before the launcher kills it, which hydra does within tens of
 * milliseconds of this process's end. */
#define DDPH__EXIT_LINGER_S 0.5

/* ddph_open succeeded: exit() from now on fails the job. */
void ddph__exit_guard_arm(ddph_ctx *ctx);
/* ddph_close began: exit() no longer concerns this context. */
void ddph__exit_guard_disarm(ddph_ctx *ctx);

#endif
