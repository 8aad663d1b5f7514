/* mpi_fingerprint.c: the collectives' fingerprints (backend_mpi.h). */
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

/* ---- collective fingerprints -------------------------------------------- */

/* The calls a rank's fingerprints name, by the names the services and the
 * trainer calls use; "end of step" closes a synchronising step
 * (ddph__mpi_step_agree). */
static const char *const fp_kinds[] = {
    "allreduce",    "allgather",          "broadcast",        "reduce_scatter",
    "allgatherv",   "alltoall",           "iallreduce",       "iallgather",
    "iallgatherv",  "ialltoall",          "end of step",      "ddph_barrier",
    "ddph_allreduce_f64", "ddph_average_f64", "ddph_broadcast",
};
enum { FP_KIND_STEP_END = 10, FP_KIND_TRAINER_BROADCAST = 14 };
/* sequence, kind, dtype, count, op, root, iteration, bucket, model, byte
 * offset in the bucket, counts digest (an allgatherv's whole counts, whose
 * total alone would let counts that differ pass; an end of step's: the
 * lane's records so far); then, not compared, the count this rank sends
 * (its counts[rank]).  An end of step holds its summary in the middle
 * fields (ddph__mpi_step_agree). */
enum { FP_FIELDS = 12, FP_COMPARED = 11, FP_COUNTS = 10, FP_SENDS = 11 };
/* The bucket field of a trainer call and of an end of step. */
enum { FP_TRAINER_CALL = -3, FP_STEP_END = -2 };
/* The bits of an end of step's last field that hold the rank's part
 * under join (DDPH__STEP_TRAINING ...). */
#define FP_ROLE_MASK ((int64_t)3)

/* An end of step under join (its last field is not negative). */
static int fp_joined_step(const int64_t *r)
{
    return r[1] == FP_KIND_STEP_END && r[9] >= 0;
}


static const char *fp_op_name(int64_t op)
{
    return op == DDPH_SUM ? ", sum" : op == DDPH_MAX ? ", max"
           : op == DDPH_MIN ? ", min" : "";
}

void ddph__mpi_model_named(ddph_mpi *m, int64_t id, const char *name)
{
    if (id < 0 || id >= DDPH__MAX_NAMED_MODELS)
        return;
    snprintf(m->model_names[id], sizeof m->model_names[id], "%s", name);
}

/* " of model 'x'" for a model id (nothing for -1). */
static void fp_model(const ddph_mpi *m, int64_t id, char *out, size_t cap)
{
    if (id < 0)
        out[0] = '\0';
    else if (id < DDPH__MAX_NAMED_MODELS && m->model_names[id][0])
        snprintf(out, cap, " of model '%s'", m->model_names[id]);
    else
        snprintf(out, cap, " of model #%lld", (long long)id);
}

/* The models of a step (a bit per model id) as "'a', 'b'". */
static void fp_models(const ddph_mpi *m, int64_t mask, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    if (mask < 0) { /* ids past 62: a digest (ddph__step_models_mask) */
        snprintf(out, cap, "models digest %llx", (unsigned long long)mask);
        return;
    }
    for (int id = 0; id < 63 && used < cap; id++)
        if (mask & ((int64_t)1 << id)) {
            const char *name = id < DDPH__MAX_NAMED_MODELS &&
                                       m->model_names[id][0]
                                   ? m->model_names[id]
                                   : "?";
            used += (size_t)snprintf(out + used, cap - used, "%s'%s'",
                                     used ? ", " : "", name);
        }
}

/* One rank's record in words, e.g. "allreduce(f32, 4096, sum) as its
 * collective #3 (iteration 2, bucket 1 of model 'm')". */
static void fp_describe(const ddph_mpi *m, const int64_t *r, char *out,
                        size_t cap)
{
    size_t nk = sizeof fp_kinds / sizeof *fp_kinds;
    const char *kind = r[1] >= 0 && (size_t)r[1] < nk ? fp_kinds[r[1]] : "?";
    char model[96];
    if (r[1] == FP_KIND_STEP_END) {
        char models[256];
        fp_models(m, r[2], models, sizeof models);
        int64_t role = fp_joined_step(r) ? r[9] & FP_ROLE_MASK : -1;
        snprintf(out, cap,
                 "the end of its step (models %s, iteration %lld, %lld "
                 "backward pass%s%s, %lld trainer call%s so far, hooks%s "
                 "digest %llx) after %lld collective%s (digest %llx)",
                 models, (long long)r[6], (long long)r[3],
                 r[3] == 1 ? "" : "es",
                 role == DDPH__STEP_DATA_ENDED ? ", the end of its data"
                 : role == DDPH__STEP_JOINED   ? " of zeros, joined"
                                               : "",
                 (long long)r[5], r[5] == 1 ? "" : "s",
                 role < 0 ? " and passes" : "", (unsigned long long)r[4],
                 (long long)r[0], r[0] == 1 ? "" : "s",
                 (unsigned long long)r[FP_COUNTS]);
        return;
    }
    const char *dtype = r[2] >= 0 && r[2] < DDPH_DTYPE_COUNT
                            ? ddph__dtype_name((ddph_dtype)r[2])
                            : "?";
    char root[48] = "";
    if (r[5] >= 0)
        snprintf(root, sizeof root, ", root %lld", (long long)r[5]);
    else if (r[FP_COUNTS])
        snprintf(root, sizeof root, ", counts digest %llx",
                 (unsigned long long)r[FP_COUNTS]);
    if (r[7] == FP_TRAINER_CALL) {
        snprintf(out, cap, "%s(%lld x %s%s%s) as its trainer call #%lld",
                 kind, (long long)r[3], dtype, fp_op_name(r[4]), root,
                 (long long)r[0] + 1);
        return;
    }
    fp_model(m, r[8], model, sizeof model);
    char where[200];
    if (r[7] >= 0 && r[9] >= 0)
        snprintf(where, sizeof where,
                 "iteration %lld, bucket %lld%s, from its byte %lld",
                 (long long)r[6], (long long)r[7], model, (long long)r[9]);
    else if (r[7] >= 0)
        snprintf(where, sizeof where, "iteration %lld, bucket %lld%s",
                 (long long)r[6], (long long)r[7], model);
    else
        snprintf(where, sizeof where, "step %lld%s, after the optimizer",
                 (long long)r[6], model);
    snprintf(out, cap, "%s(%s, %lld%s%s) as its collective #%lld (%s)", kind,
             dtype, (long long)r[3], fp_op_name(r[4]), root,
             (long long)r[0] + 1, where);
}

/* Why two records differ, in the words a user can act on. */
static const char *fp_hint(const int64_t *a, const int64_t *b)
{
    int a_end = a[1] == FP_KIND_STEP_END, b_end = b[1] == FP_KIND_STEP_END;
    if (a[7] == FP_TRAINER_CALL || b[7] == FP_TRAINER_CALL) {
        if (a[1] == b[1] && a[1] == FP_KIND_TRAINER_BROADCAST && a[3] != b[3])
            return "the broadcast sizes differ";
        return "a trainer call (ddph_barrier, ddph_allreduce_f64, "
               "ddph_average_f64, ddph_broadcast) differs in kind, size, "
               "operation or root, or is missing or extra on some rank";
    }
    if (a_end != b_end)
        return "a hook skipped or added a collective on some rank";
    if (!a_end)
        return a[8] != b[8]   ? "the ranks reduce different models here"
               : a[9] != b[9] ? "the ranks reduce different parts of the "
                                "bucket here (collectives in another order)"
               : a[1] == b[1] && a[3] == b[3] && a[FP_COUNTS] != b[FP_COUNTS]
                   ? "the ranks passed different counts: counts[r] is "
                     "what rank r sends, and every rank must pass the "
                     "same"
                   : "a hook issued an extra, a missing or a "
                     "different collective on some rank";
    if (a[2] != b[2])
        return "the ranks stepped different models";
    /* ([9]: every model's passes, under join) */
    if (a[3] != b[3] || a[6] != b[6] || a[9] != b[9])
        return "the ranks synchronised different backward passes: a "
               "DDPH_STEP_NO_SYNC or an accumulation window on some rank "
               "only";
    if (a[5] != b[5])
        return "the ranks made different numbers of trainer calls";
    if (a[4] != b[4])
        return "the hooks' builds or the models' backward passes differ";
    if (a[0] == b[0] && a[FP_COUNTS] != b[FP_COUNTS])
        return "the step's collectives differed in kind, size or counts";
    return "the ranks issued different numbers of collectives";
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
    int64_t *block; /* this rank's record, then every rank's, then its
                       counts (allgatherv); NULL: none */
    const int64_t *counts;
    int size, rank;
    const char *what;
} pending_fp;

/* The records of a step's end under join as they must agree: a joined
 * rank's passes, and those of a rank whose data ended short of the
 * window of the ranks still training, are taken from the first of those
 * (the one they must match); a longer window keeps its own and differs.
 * Returns the rank whose record stands for the group in messages. */
static int fp_join_view(const int64_t *all, int size, int64_t *view)
{
    memcpy(view, all, (size_t)size * FP_FIELDS * sizeof *all);
    int ref = -1;
    for (int r = 0; r < size && ref < 0; r++) {
        const int64_t *rec = all + (size_t)r * FP_FIELDS;
        if (fp_joined_step(rec) &&
            (rec[9] & FP_ROLE_MASK) == DDPH__STEP_TRAINING)
            ref = r;
    }
    /* No rank still training: no window to match. */
    const int64_t passes = ref < 0 ? 0 : all[(size_t)ref * FP_FIELDS + 3];
    const int64_t digest = ref < 0 ? 0 : all[(size_t)ref * FP_FIELDS + 9];
    for (int r = 0; r < size; r++) {
        int64_t *v = view + (size_t)r * FP_FIELDS;
        int64_t role = v[9] & FP_ROLE_MASK;
        if (!fp_joined_step(v) || role == DDPH__STEP_TRAINING)
            continue; /* compared as it is */
        int longer =
            ref >= 0 && role == DDPH__STEP_DATA_ENDED && v[3] > passes;
        v[3] = longer ? v[3] : passes;
        v[9] = digest;
    }
    return ref < 0 ? 0 : ref;
}

/* Where the counts of rank `me` part from what each rank sends, after
 * "; " (the message may reach the other ranks as this rank's). */
static void fp_counts_detail(const int64_t *all, int size, int me,
                             const int64_t *counts, char *out, size_t cap)
{
    const int64_t *mine = all + (size_t)me * FP_FIELDS;
    for (int r = 0; r < size; r++) {
        const int64_t *theirs = all + (size_t)r * FP_FIELDS;
        if (theirs[1] != mine[1]) /* another collective: no counts */
            continue;
        int64_t sends = theirs[FP_SENDS];
        if (counts[r] != sends) {
            snprintf(out, cap,
                     "; on rank %d, counts[%d] is %lld, but rank %d sends "
                     "%lld",
                     me, r, (long long)counts[r], r, (long long)sends);
            return;
        }
    }
    snprintf(out, cap, "; rank %d's counts are what each rank sends", me);
}

/* Compares the records of a completed exchange; the first rank whose
 * record differs from the one most ranks share (under join, at a step's
 * end, from the first rank still training's) fails the job on every
 * rank.  counts: this
 * rank's (rank `me` of the group), or NULL. */
static ddph_status fp_compare(ddph_mpi *m, const int64_t *records, int size,
                              int me, const int64_t *counts, ddph_err *err)
{
    size_t bytes = FP_COMPARED * sizeof *records;
    int differ = 0; /* the usual case first: every record the same */
    for (int r = 1; r < size && !differ; r++)
        differ = memcmp(records + (size_t)r * FP_FIELDS, records, bytes) != 0;
    if (!differ)
        return DDPH_OK;
    const int64_t *all = records;
    int64_t *view = NULL;
    int base = 0; /* the record that stands for the ranks that agree */
    if (fp_joined_step(records)) {
        view = malloc((size_t)size * FP_FIELDS * sizeof *records);
        if (!view) {
            const char *msg = "the end-of-step agreement: out of memory";
            ddph__mpi_fail_job(m, DDPH_ERR_NOMEM, msg);
            return ddph__fail(err, DDPH_ERR_NOMEM, "%s", msg);
        }
        base = fp_join_view(records, size, view);
        all = view;
    }
    if (!view)
        base = ddph__majority_record(all, size, FP_FIELDS, FP_COMPARED);
    const int64_t *want = all + (size_t)base * FP_FIELDS;
    int odd = -1;
    for (int r = 0; r < size && odd < 0; r++)
        if (memcmp(all + (size_t)r * FP_FIELDS, want, bytes) != 0)
            odd = r;
    if (odd < 0) {
        free(view);
        return DDPH_OK;
    }
    char same[192] = "", first[400], other[400];
    size_t used = 0;
    for (int r = 0; r < size; r++) {
        const int64_t *rec = records + (size_t)r * FP_FIELDS;
        int joined = fp_joined_step(rec) &&
                     (rec[9] & FP_ROLE_MASK) == DDPH__STEP_JOINED;
        if (memcmp(all + (size_t)r * FP_FIELDS, want, bytes) == 0 &&
            used + 24 < sizeof same)
            used += (size_t)snprintf(same + used, sizeof same - used,
                                     "%s%d%s", used ? ", " : "", r,
                                     joined ? " (joined)" : "");
    }
    /* In words, each rank's record as it sent it. */
    const int64_t *theirs = all + (size_t)odd * FP_FIELDS;
    fp_describe(m, records + (size_t)base * FP_FIELDS, first, sizeof first);
    fp_describe(m, records + (size_t)odd * FP_FIELDS, other, sizeof other);
    char detail[160] = "";
    if (counts && want[1] == theirs[1] && want[FP_COUNTS] != theirs[FP_COUNTS])
        fp_counts_detail(records, size, me, counts, detail, sizeof detail);
    char msg[DDPH__NOTICE_LEN];
    snprintf(msg, sizeof msg,
             "the ranks' %s differ (group of %d ranks): rank %d called %s "
             "where rank%s %s called %s (%s%s)",
             want[7] == FP_TRAINER_CALL ? "trainer calls" : "collectives",
             size, odd, other, strchr(same, ',') ? "s" : "", same, first,
             fp_hint(want, theirs), detail);
    free(view);
    ddph_status st = ddph__fail(err, DDPH_ERR_MISMATCH, "%s", msg);
    ddph__mpi_fail_job(m, st, msg);
    return st;
}

/* The pending exchange has completed: compared, and forgotten. */
static ddph_status fp_finish(ddph_err *err)
{
    ddph_status st = fp_compare(pending_fp.m, pending_fp.block + FP_FIELDS,
                                pending_fp.size, pending_fp.rank,
                                pending_fp.counts, err);
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

/* Starts the allgather of one record on g's twin communicator into a new
 * block (this rank's record, then every rank's, then a copy of counts
 * where not NULL), freed by the caller once *req completed. */
static ddph_status fp_exchange(ddph_mpi *m, ddph_mpi_group *g,
                               const int64_t *record, const size_t *counts,
                               MPI_Request *req, int64_t **out, ddph_err *err)
{
    size_t records = ((size_t)g->size + 1) * FP_FIELDS;
    int64_t *block = malloc((records + (counts ? (size_t)g->size : 0)) *
                            sizeof *block);
    if (!block)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    memcpy(block, record, FP_FIELDS * sizeof *block);
    for (int r = 0; counts && r < g->size; r++)
        block[records + (size_t)r] = (int64_t)counts[r];
    int rc = MPI_Iallgather(block, FP_FIELDS, MPI_INT64_T, block + FP_FIELDS,
                            FP_FIELDS, MPI_INT64_T, g->fingerprints, req);
    if (rc != MPI_SUCCESS) {
        free(block);
        return ddph__mpi_failed(m, err, rc, "MPI_Iallgather");
    }
    *out = block;
    return DDPH_OK;
}

/* Starts the exchange of one record on g's twin communicator; it becomes
 * this thread's pending exchange. */
static ddph_status fp_start(ddph_mpi *m, ddph_mpi_group *g,
                            const char *what, const int64_t *record,
                            const size_t *counts, ddph_err *err)
{
    /* The previous collective's exchange first: a mismatch there is the
     * one to report. */
    ddph_status st = ddph__mpi_fingerprint_settle(m, err);
    if (st != DDPH_OK)
        return st;
    st = ddph__mpi_collective_fault(m, err);
    if (st != DDPH_OK)
        return st;
    for (int i = 0; i < FP_COMPARED; i++)
        g->digest = ddph__mix64(g->digest, (uint64_t)record[i]);
    int64_t *block;
    st = fp_exchange(m, g, record, counts, &pending_fp.req, &block, err);
    if (st != DDPH_OK)
        return st;
    pending_fp.m = m;
    pending_fp.block = block;
    pending_fp.counts =
        counts ? block + ((size_t)g->size + 1) * FP_FIELDS : NULL;
    pending_fp.size = g->size;
    pending_fp.rank = g->rank;
    pending_fp.what = what;
    return DDPH_OK;
}

static int64_t fp_kind(const char *what)
{
    for (size_t k = 0; k < sizeof fp_kinds / sizeof *fp_kinds; k++)
        if (strcmp(fp_kinds[k], what) == 0)
            return (int64_t)k;
    return -1;
}

static int fp_checked(const ddph_mpi *m, const ddph_mpi_group *g)
{
    return m->check_collectives && g->fingerprints != MPI_COMM_NULL &&
           g->size >= 2;
}

ddph_status ddph__mpi_fingerprint(ddph_mpi *m, ddph_mpi_group *g,
                                  const char *what, ddph_dtype dtype,
                                  size_t count, const size_t *counts, int op,
                                  int root, int64_t model, int64_t iteration,
                                  int64_t bucket, int64_t offset,
                                  ddph_err *err)
{
    if (!fp_checked(m, g))
        return DDPH_OK;
    uint64_t counts_digest = 0;
    for (int r = 0; counts && r < g->size; r++)
        counts_digest = ddph__mix64(counts_digest, counts[r]);
    const int64_t record[FP_FIELDS] = {
        g->sequence++, fp_kind(what), (int64_t)dtype, (int64_t)count, op,
        root,          iteration,     bucket,         model, offset,
        (int64_t)counts_digest, counts ? (int64_t)counts[g->rank] : 0};
    return fp_start(m, g, what, record, counts, err);
}

ddph_status ddph__mpi_trainer_call(ddph_mpi *m, const char *what,
                                   ddph_dtype dtype, size_t count, int op,
                                   int root, ddph_err *err)
{
    ddph_mpi_group *g = &m->trainer;
    if (!fp_checked(m, g))
        return DDPH_OK;
    const int64_t record[FP_FIELDS] = {
        g->sequence++, fp_kind(what), (int64_t)dtype,  (int64_t)count, op,
        root,          -1,            FP_TRAINER_CALL, -1,             -1,
        0,             0};
    /* Compared before the call's own collective: calls that differ never
     * meet in MPI, where they could hang or fail with MPI's words. */
    ddph_status st = fp_start(m, g, what, record, NULL, err);
    return st == DDPH_OK ? ddph__mpi_fingerprint_settle(m, err) : st;
}

ddph_status ddph__mpi_step_agree(ddph_mpi *m, ddph_mpi_group *const *groups,
                                 int n, const ddph_step_summary *s,
                                 ddph_err *err)
{
    ddph_status st = ddph__mpi_fingerprint_settle(m, err);
    if (st != DDPH_OK)
        return st;
    /* Every lane's exchange starts before any is waited for: a rank whose
     * lane is still waiting in a collective that this rank skipped finds
     * this record in place of the collective's fingerprint at once. */
    /* Without join every rank's passes are compared whole; under join
     * the last field carries the rank's part and its passes, which
     * fp_join_view compares (never negative). */
    int plain = s->join_role == DDPH__STEP_PLAIN;
    int64_t passes_bits = s->passes_digest & INT64_MAX & ~FP_ROLE_MASK;
    int64_t join_field = plain ? -1 : passes_bits | s->join_role;
    MPI_Request reqs[DDPH__MAX_LANES];
    int64_t *blocks[DDPH__MAX_LANES] = {0};
    int started = 0;
    for (int i = 0; i < n && i < DDPH__MAX_LANES && st == DDPH_OK; i++) {
        ddph_mpi_group *g = groups[i];
        if (!fp_checked(m, g))
            continue;
        const int64_t record[FP_FIELDS] = {
            g->sequence++, FP_KIND_STEP_END, s->models,    s->passes,
            plain ? s->digest ^ s->passes_digest : s->digest,
            s->trainer_calls, s->iteration, FP_STEP_END,   s->first_model,
            join_field,    (int64_t)g->digest, 0};
        st = fp_exchange(m, g, record, NULL, &reqs[started], &blocks[started],
                         err);
        if (st == DDPH_OK)
            started++;
    }
    if (started && st == DDPH_OK)
        st = ddph__mpi_wait_timed_all(m, started, reqs, ddph__now(),
                                      "the end-of-step agreement", err);
    if (st != DDPH_OK && started)
        return st; /* blocks abandoned: a late peer may still write */
    for (int i = 0, k = 0; i < n && k < started && st == DDPH_OK; i++) {
        if (!fp_checked(m, groups[i]))
            continue;
        st = fp_compare(m, blocks[k] + FP_FIELDS, groups[i]->size,
                        groups[i]->rank, NULL, err);
        k++;
    }
    for (int k = 0; k < started; k++)
        free(blocks[k]);
    return st;
}
