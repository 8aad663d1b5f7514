/* mpi_fingerprint.c: the collectives' fingerprints (backend_mpi.h). */
#include "build-config.h"

#include "comm/mpi_internal.h"

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

#include <ddphook/ddphook.h>

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
ddph_status ddph__mpi_fp_poll(const MPI_Request *waiting, ddph_err *err)
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
    ddph_status st = ddph__mpi_wait_timed(m, &pending_fp.req, pending_fp.what, err);
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
    st = ddph__mpi_collective_fault(m, err);
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
        return ddph__mpi_failed(m, err, rc, "MPI_Iallgather");
    }
    pending_fp.m = m;
    pending_fp.block = block;
    pending_fp.size = g->size;
    pending_fp.what = what;
    pending_fp.model = model;
    return DDPH_OK;
}
