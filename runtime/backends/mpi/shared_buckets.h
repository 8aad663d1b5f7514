/* shared_buckets.h: bucket memory that every rank of a one-host job maps.
 *
 * When every rank runs on one host (the usual single-machine job), a
 * model's host buckets live in one shared-memory segment (in /dev/shm's
 * file system, never named there) that each rank maps whole: rank r's buckets are part r.  An allreduce of a buffer
 * in that memory then needs no message at all: each rank adds up its
 * 1/W slice of the buffer over every rank's part and writes the result
 * into every part, between two small collectives that order the phases
 * (an allgather of where the buffer lies, which also tells whether every
 * rank called with the same buffer, and a barrier).  On this machine
 * that is 1.2-1.6x faster than MPICH's MPI_Allreduce over shared memory
 * (notes/performance-history.md, "Buckets in shared memory").
 *
 * Both collectives are timed like every other (timeout_s, failure
 * notices), and a peer that dies leaves its part mapped here, so nothing
 * can hang or fault.  Nothing about the segment is collective after it is
 * made: it has no name to remove, and unmapping it never waits for a
 * peer. */
#ifndef DDPH_SHARED_BUCKETS_H
#define DDPH_SHARED_BUCKETS_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

#include "backends/mpi/backend_mpi.h"
#include "support/util.h"

typedef struct ddph_shared_segment {
    char *map;         /* every rank's part, one after the other */
    size_t part_bytes; /* of each part (a multiple of the page size) */
    int nranks;
    int rank;                         /* this rank's part */
    int64_t id;                       /* 1, 2, ... in the order made */
    struct ddph_shared_segment *next; /* ddph_mpi's list */
} ddph_shared_segment;

/* Collective over the world.  Makes a segment with a part of `bytes` for
 * every rank when every rank wants one (`wanted`) with the same size and
 * every rank is on this host; *out is NULL otherwise (not an error: why,
 * in `why`, for the log; *failed when it was wanted and possible but could
 * not be made, e.g. on a full /dev/shm).  Fails only when the job is
 * broken. */
ddph_status ddph__shared_open(ddph_mpi *m, size_t bytes, int wanted,
                              ddph_shared_segment **out, char *why,
                              size_t why_cap, int *failed, ddph_err *err);
/* This rank's part. */
void *ddph__shared_part(const ddph_shared_segment *s);
/* Unmaps the segment (never waits for a peer). */
void ddph__shared_close(ddph_mpi *m, ddph_shared_segment *s);

/* The allreduce of ddph__mpi_allreduce on a group of the world's ranks in
 * the world's order, when segments exist: every rank calls it with the
 * same count, dtype and op, and it does the whole allreduce (*done = 1)
 * when every rank's buf lies at the same place in a segment, or nothing
 * (*done = 0, the same on every rank). */
ddph_status ddph__shared_allreduce(ddph_mpi *m, ddph_mpi_group *g,
                                   void *buf, size_t count, ddph_dtype dtype,
                                   ddph_redop op, int *done, ddph_err *err);

#endif
