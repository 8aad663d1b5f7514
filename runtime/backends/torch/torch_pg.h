/* torch_pg.h: the torch backend's C++ half (torch_pg.cc) as C functions,
 * for its tables (torch_backend.c): a job over the store of the script's
 * torch.distributed process group, groups of gloo made from that store,
 * and their collectives, each bounded by timeout_s.
 *
 * Why two halves: the tables are C (comm.h and backend.h are C11), c10d is
 * C++.  Everything fallible returns a status and writes its message into
 * msg (msg_cap bytes). */
#ifndef DDPH_TORCH_PG_H
#define DDPH_TORCH_PG_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/status.h>
#include <ddphook/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpg_job tpg_job;     /* the job: store, fault state */
typedef struct tpg_group tpg_group; /* one gloo process group */
typedef struct tpg_work tpg_work;   /* a collective in flight */

/* Joins the job the Python bridge attached (ddph_torch_attach_v1): its
 * store, rank and size.  *out is set even on failure (freed by
 * tpg_job_free). */
ddph_status tpg_job_open(double timeout_s, void (*activity_touch)(void),
                         tpg_job **out, int *rank, int *size, char *msg,
                         size_t msg_cap);
/* Frees the job; its groups are released unless `abandon` (a broken job:
 * gloo's threads may still be inside a collective with a dead peer, and
 * releasing a group joins them). */
void tpg_job_free(tpg_job *j, int abandon);

/* A new gloo group of `size` ranks, this rank being `rank` among them,
 * rendezvous under `name` in the job's store (collective over its ranks,
 * within timeout_s). */
ddph_status tpg_group_new(tpg_job *j, const char *name, int rank, int size,
                          tpg_group **out, char *msg, size_t msg_cap);

/* Collectives, started: *out is the work to wait for (NULL when it
 * completed at once).  counts: an allgatherv's, one per rank.  f16 and
 * bf16 sums go round ddphook's ring (torch_ring.h), the rest to gloo. */
enum tpg_kind {
    TPG_ALLREDUCE,
    TPG_ALLGATHER,
    TPG_ALLGATHERV,
    TPG_BROADCAST,
    TPG_REDUCE_SCATTER,
    TPG_ALLTOALL,
    TPG_BARRIER
};
typedef struct tpg_args {
    enum tpg_kind kind;
    const void *send; /* allgather(v), reduce_scatter, alltoall */
    void *buf;        /* in place (allreduce, broadcast), or recv */
    size_t count;
    const size_t *counts;
    ddph_dtype dtype;
    ddph_redop op;
    int root;
} tpg_args;
ddph_status tpg_start(tpg_job *j, tpg_group *g, const tpg_args *a,
                      tpg_work **out, char *msg, size_t msg_cap);
/* Waits until deadline (ddph__now's clock), polling the job's notices:
 * ends and frees w, whatever the outcome (an abandoned collective's
 * memory stays the caller's to keep). */
ddph_status tpg_wait(tpg_job *j, tpg_work *w, const char *what,
                     double deadline, char *msg, size_t msg_cap);
/* *done = 1 (and w ended and freed) when it completed, or failed. */
ddph_status tpg_test(tpg_job *j, tpg_work *w, const char *what,
                     double deadline, int *done, char *msg, size_t msg_cap);
/* Whether w failed or the deadline passed, without ending it. */
ddph_status tpg_progress(tpg_job *j, tpg_work *w, const char *what,
                         double deadline, char *msg, size_t msg_cap);

/* The fault state, shared with the peers through the store. */
/* DDPH_OK, or the job's first failure (msg gets it); polls the notices
 * (at most every few ms). */
ddph_status tpg_fault(tpg_job *j, char *msg, size_t msg_cap);
int tpg_broken(tpg_job *j);
/* Breaks the job; the peers read "rank R failed: msg" within a poll. */
void tpg_fail(tpg_job *j, ddph_status st, const char *msg);

/* Where this rank is, for peers that wait on a step it will not join:
 * what tpg_notify_leaving tells them. */
enum { TPG_CLOSED = 0, TPG_DATA_END = 1, TPG_TRAINER_CALL = 2 };
/* (1 and 2 are comm.h's DDPH__DEPART_*) */
void tpg_set_progress(tpg_job *j, int in_sync_step, int64_t syncs_done,
                      int64_t trainer_calls);
void tpg_notify_leaving(tpg_job *j, int kind, const char *what,
                        int64_t syncs_done, int64_t trainer_calls);
/* 1 when peer `rank`'s TPG_CLOSED notice has come, the notices read now
 * (*syncs_done: its synchronised steps); else 0. */
int tpg_peer_closed(tpg_job *j, int rank, int64_t *syncs_done);

#ifdef __cplusplus
}
#endif

#endif
