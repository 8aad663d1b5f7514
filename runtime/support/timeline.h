/* timeline.h: the Chrome/Perfetto trace of `[runtime] trace = FILE.json`.
 *
 * Each rank records, in memory, when each bucket became ready and was
 * launched (compute track), each hook call and each collective inside it
 * (communication track), and each step's wait.  At ddph_close rank 0
 * gathers every rank's events and writes one JSON file in the Trace Event
 * Format: one process per rank, two threads (compute, communication).
 * When the job fails, each rank writes its own events instead, to
 * FILE.json.rank<R>.
 * Open it in https://ui.perfetto.dev or chrome://tracing.  Recording is a
 * mutex and an array append; with no trace configured it costs a branch. */
#ifndef DDPH_TIMELINE_H
#define DDPH_TIMELINE_H

#include <pthread.h>
#include <stddef.h>

#include "support/util.h"

enum { DDPH_TRACK_COMPUTE = 0, DDPH_TRACK_COMM = 1 };

typedef struct ddph_trace_event {
    char name[96];
    int track;
    double ts, dur; /* microseconds since the rank's origin; dur < 0: instant */
} ddph_trace_event;

typedef struct ddph_timeline {
    int enabled;
    pthread_mutex_t mu;
    double origin; /* CLOCK_REALTIME seconds at open */
    ddph_trace_event *ev;
    size_t n, cap;
} ddph_timeline;

void ddph__timeline_init(ddph_timeline *tl, int enabled);
void ddph__timeline_free(ddph_timeline *tl);
/* Seconds on the timeline's clock (0 when disabled). */
double ddph__timeline_now(const ddph_timeline *tl);
/* A span [start, now) or, with start < 0, an instant at now. */
void ddph__timeline_record(ddph_timeline *tl, int track, double start,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The trace of a healthy job is every rank's part, gathered on rank 0
 * (core/context.c): this rank's events as JSON, its clock shifted so that
 * `first`, the earliest origin of any rank, is time 0 (malloc'd; NULL when
 * out of memory). */
char *ddph__timeline_part(const ddph_timeline *tl, int rank, double first,
                          size_t *len);
/* Writes the parts gathered (total bytes) to path as one trace. */
ddph_status ddph__timeline_write_parts(const char *path, const char *all,
                                       size_t total, ddph_err *err);
/* A failed job cannot gather: each rank writes what it recorded to
 * PATH.rank<R>, alone, marked as ending in failure (otherData.ended =
 * "in failure", the error, and a global "job failed" instant event). */
ddph_status ddph__timeline_write_failed(ddph_timeline *tl, int rank,
                                        const char *path, const char *why,
                                        ddph_err *err);

#endif
