/* torch_fingerprint.c: the torch backend's check of the hooks'
 * collectives ([runtime] check_collectives): each one's fingerprint is
 * exchanged and compared on its group BEFORE gloo sees it, and each
 * step's end is a record of the same size on every lane.
 *
 * Why before, when the MPI backend compares while the collective runs:
 * gloo pairs the ranks' collectives by their order alone, and a rank
 * that receives more or fewer bytes than it posted aborts the process
 * (the tcp pair's preamble check: SIGABRT, no error to report).  Only
 * collectives whose fingerprints every rank has seen equal reach gloo;
 * a rank with an extra or a missing collective meets its peers' end of
 * step, a record of the same size, and every rank reads the difference. */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/torch/torch_internal.h"
#include "support/util.h"

/* A record's fields.  A collective: its kind and number on the group,
 * dtype, count, op, root, model, iteration, bucket, byte offset in the
 * bucket, counts digest (an allgatherv's).  An end of step: the summary
 * the lanes compare (step_fields). */
enum {
    R_KIND = 0, /* the collective's (fp_kinds), or R_STEP_END */
    R_NUMBER = 1,
    R_DTYPE = 2,
    R_COUNT = 3,
    R_OP = 4,
    R_ROOT = 5,
    R_MODEL = 6,
    R_ITERATION = 7,
    R_BUCKET = 8,
    R_OFFSET = 9,
    R_COUNTS = 10,
    R_STEP_END = -1,  /* (R_KIND) */
    R_TRAINER = -3    /* (R_BUCKET) a trainer call's */
};
_Static_assert((int)R_COUNTS < (int)TORCH_RECORD_FIELDS, "a record holds its fields");
/* An end of step's fields after R_KIND, in torch_control.c's order (its
 * summary) and step_fields'. */
enum {
    R_STEP_MODELS = 1,
    R_STEP_HOOKS,
    R_STEP_TRAINER_CALLS,
    R_STEP_ITERATION,
    R_STEP_FIRST_MODEL,
    R_STEP_PASSES,
    R_STEP_COLLECTIVES,
    R_STEP_DIGEST
};
_Static_assert((int)R_STEP_DIGEST == (int)TORCH_STEP_FIELDS,
               "an end of step's fields are its summary's");

static const char *const fp_kinds[] = {
    "allreduce",  "allgather", "broadcast",   "reduce_scatter", "allgatherv",
    "alltoall",   "iallreduce", "iallgather", "iallgatherv",    "ialltoall",
    "ddph_barrier", "ddph_allreduce_f64", "ddph_average_f64", "ddph_broadcast",
    "split",
};

static int64_t fp_kind(const char *what)
{
    for (size_t k = 0; k < sizeof fp_kinds / sizeof *fp_kinds; k++)
        if (strcmp(fp_kinds[k], what) == 0)
            return (int64_t)k;
    return (int64_t)(sizeof fp_kinds / sizeof *fp_kinds); /* "?" */
}

/* The end of step's fields, after R_KIND (torch_control.c fills them). */
static const char *const step_fields[TORCH_STEP_FIELDS] = {
    "models stepped", "hooks (digest)", "trainer calls",
    "first model's iteration", "first model", "backward passes",
    "number of hook collectives on this lane so far",
    /* (one literal over two lines: clang's -Wstring-concatenation) */
    ("hook collectives' fingerprints (digest; a rank issued a different "
     "or reordered collective)")};
_Static_assert(1 + (int)TORCH_STEP_FIELDS <= (int)TORCH_RECORD_FIELDS,
               "an end of step fits a record");

static const char *op_name(int64_t op)
{
    return op == DDPH_SUM ? ", sum" : op == DDPH_MAX ? ", max"
           : op == DDPH_MIN ? ", min" : "";
}

/* What a rank did, in words: "called allreduce(f32, 4096, sum) as its
 * hook collective #3 on this group (iteration 2, bucket 1, from its byte
 * 0)", or "reached the end of its step after ...". */
static void describe(const int64_t *r, char *out, size_t cap)
{
    if (r[R_KIND] == R_STEP_END) {
        snprintf(out, cap, "reached the end of its step after %lld hook "
                 "collective%s "
                 "on this group", (long long)r[R_STEP_COLLECTIVES],
                 r[R_STEP_COLLECTIVES] == 1 ? "" : "s");
        return;
    }
    size_t nk = sizeof fp_kinds / sizeof *fp_kinds;
    const char *kind = (size_t)r[R_KIND] < nk ? fp_kinds[r[R_KIND]] : "?";
    const char *dtype = r[R_DTYPE] >= 0 && r[R_DTYPE] < DDPH_DTYPE_COUNT
                            ? ddph__dtype_name((ddph_dtype)r[R_DTYPE])
                            : "?";
    char extra[48] = "", where[160];
    if (r[R_ROOT] >= 0)
        snprintf(extra, sizeof extra, ", root %lld", (long long)r[R_ROOT]);
    else if (r[R_COUNTS])
        snprintf(extra, sizeof extra, ", counts digest %llx",
                 (unsigned long long)r[R_COUNTS]);
    if (r[R_BUCKET] == R_TRAINER) {
        snprintf(out, cap, "called %s(%s, %lld%s%s) as its trainer call #%lld",
                 kind, dtype, (long long)r[R_COUNT], op_name(r[R_OP]), extra,
                 (long long)r[R_NUMBER] + 1);
        return;
    }
    if (r[R_ITERATION] < 0 && r[R_BUCKET] < 0) { /* no hook's (a split) */
        snprintf(out, cap, "called %s(%s, %lld) as its collective #%lld on "
                 "this group", kind, dtype, (long long)r[R_COUNT],
                 (long long)r[R_NUMBER] + 1);
        return;
    }
    if (r[R_BUCKET] >= 0)
        snprintf(where, sizeof where, "iteration %lld, bucket %lld%s",
                 (long long)r[R_ITERATION], (long long)r[R_BUCKET],
                 r[R_OFFSET] >= 0 ? ", from its byte " : "");
    else
        snprintf(where, sizeof where, "step %lld, after the optimizer",
                 (long long)r[R_ITERATION]);
    char offset[24] = "";
    if (r[R_BUCKET] >= 0 && r[R_OFFSET] >= 0)
        snprintf(offset, sizeof offset, "%lld", (long long)r[R_OFFSET]);
    snprintf(out, cap, "called %s(%s, %lld%s%s) as its hook collective "
             "#%lld on this group (%s%s)", kind, dtype, (long long)r[R_COUNT],
             op_name(r[R_OP]), extra, (long long)r[R_NUMBER] + 1, where,
             offset);
}

/* Why two collectives' records differ, in words a user can act on. */
static const char *hint(const int64_t *a, const int64_t *b)
{
    if (a[R_BUCKET] == R_TRAINER)
        return "a trainer call (barrier, allreduce_f64, average_f64, "
               "broadcast) differs in kind, size, operation or root";
    if ((a[R_KIND] == R_STEP_END) != (b[R_KIND] == R_STEP_END))
        return "a hook issued an extra or a missing collective on some rank";
    if (a[R_MODEL] != b[R_MODEL] || a[R_ITERATION] != b[R_ITERATION])
        return "the ranks reduce different models or iterations here";
    if (a[R_BUCKET] != b[R_BUCKET])
        return "the ranks reduce different buckets here: a hook issued an "
               "extra or a missing collective on some rank";
    if (a[R_KIND] == b[R_KIND] && a[R_DTYPE] == b[R_DTYPE] &&
        a[R_COUNT] == b[R_COUNT] && a[R_OFFSET] != b[R_OFFSET])
        return "the ranks reduce different parts of the bucket here "
               "(collectives in another order)";
    if (a[R_KIND] == b[R_KIND] && a[R_COUNT] == b[R_COUNT] &&
        a[R_COUNTS] != b[R_COUNTS])
        return "the ranks passed different allgatherv counts";
    return "a hook issued a different collective on some rank: its kind, "
           "dtype, count, operation or root differ";
}

/* The records differ: the job fails on every rank (each read the same
 * records, and writes the same message), naming the odd rank. */
static ddph_status differ(torch_state *s, const torch_group *g,
                          const int64_t *all, ddph_err *err)
{
    int size = g->head.size, odd = -1;
    int base = ddph__majority_record(all, size, TORCH_RECORD_FIELDS,
                                     TORCH_RECORD_FIELDS);
    size_t bytes = TORCH_RECORD_FIELDS * sizeof *all;
    const int64_t *want = all + (size_t)base * TORCH_RECORD_FIELDS;
    char same[192] = "";
    size_t used = 0;
    for (int r = 0; r < size; r++) {
        int equal = memcmp(all + (size_t)r * TORCH_RECORD_FIELDS, want,
                           bytes) == 0;
        if (!equal && odd < 0)
            odd = r;
        if (equal && used + 24 < sizeof same)
            used += (size_t)snprintf(same + used, sizeof same - used, "%s%d",
                                     used ? ", " : "", r);
    }
    const int64_t *theirs = all + (size_t)odd * TORCH_RECORD_FIELDS;
    char msg[DDPH__ERR_LEN];
    if (want[R_KIND] == R_STEP_END && theirs[R_KIND] == R_STEP_END) {
        /* The first field that differs (the digest, last, if no other) */
        int f = R_STEP_MODELS;
        while (f < R_STEP_DIGEST && want[f] == theirs[f])
            f++;
        snprintf(msg, sizeof msg,
                 "the ranks' steps differ: rank %d's %s is %lld, rank %d's "
                 "%lld",
                 odd, step_fields[f - R_STEP_MODELS], (long long)theirs[f],
                 base, (long long)want[f]);
    } else {
        char first[320], other[320];
        describe(want, first, sizeof first);
        describe(theirs, other, sizeof other);
        snprintf(msg, sizeof msg,
                 "the ranks' %s differ (group of %d ranks): rank %d "
                 "%s where rank%s %s %s (%s; compared before gloo ran it)",
                 want[R_BUCKET] == R_TRAINER ? "trainer calls" : "collectives",
                 size, odd, other, strchr(same, ',') ? "s" : "", same, first,
                 hint(want, theirs));
    }
    tpg_fail(s->job, DDPH_ERR_MISMATCH, msg);
    return ddph__fail(err, DDPH_ERR_MISMATCH, "%s", msg);
}

ddph_status ddph__torch_exchange(torch_state *s, torch_group *g,
                                 const int64_t *mine, const char *what,
                                 ddph_err *err)
{
    int size = g->head.size;
    int64_t *all = calloc((size_t)size * TORCH_RECORD_FIELDS, sizeof *all);
    if (!all)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    tpg_args a = {.kind = TPG_ALLGATHER, .send = mine, .buf = all,
                  .count = TORCH_RECORD_FIELDS, .dtype = DDPH_I64};
    ddph_status st = ddph__torch_run_on(s, g->checks, &a, what, err);
    if (st != DDPH_OK)
        return st; /* all abandoned: gloo may still write it */
    size_t bytes = TORCH_RECORD_FIELDS * sizeof *all;
    for (int r = 1; r < size && st == DDPH_OK; r++)
        if (memcmp(all + (size_t)r * TORCH_RECORD_FIELDS, all, bytes) != 0)
            st = differ(s, g, all, err);
    free(all);
    return st;
}

/* Folds a record into g's digest of its collectives, which the ranks
 * compare at the step's end (R_STEP_DIGEST). */
static void fold_record(torch_group *g, const int64_t *record)
{
    for (int i = 0; i < TORCH_RECORD_FIELDS; i++)
        g->digest = ddph__mix64(g->digest, (uint64_t)record[i]);
}

/* A record's fields that every call has (the others: -1); numbered on g. */
static void call_record(int64_t *record, torch_group *g, const char *what,
                        ddph_dtype dtype, size_t count, int op, int root)
{
    for (int i = 0; i < TORCH_RECORD_FIELDS; i++)
        record[i] = -1;
    record[R_KIND] = fp_kind(what);
    record[R_NUMBER] = g->collectives++;
    record[R_DTYPE] = dtype;
    record[R_COUNT] = (int64_t)count;
    record[R_OP] = op;
    record[R_ROOT] = root;
    record[R_COUNTS] = 0;
}

ddph_status ddph__torch_fingerprint(void *self, struct ddph_group *group,
                                    const char *what, ddph_dtype dtype,
                                    size_t count, const size_t *counts,
                                    int op, int root, int64_t model,
                                    int64_t iteration, int64_t bucket,
                                    int64_t offset, ddph_err *err)
{
    torch_state *s = self;
    torch_group *g = G(group);
    if (!s->check_collectives || g->head.size < 2)
        return DDPH_OK;
    uint64_t counts_digest = 0;
    for (int r = 0; counts && r < g->head.size; r++)
        counts_digest = ddph__mix64(counts_digest, counts[r]);
    int64_t record[TORCH_RECORD_FIELDS];
    call_record(record, g, what, dtype, count, op, root);
    record[R_MODEL] = model;
    record[R_ITERATION] = iteration;
    record[R_BUCKET] = bucket;
    record[R_OFFSET] = offset;
    record[R_COUNTS] = (int64_t)counts_digest;
    fold_record(g, record);
    return ddph__torch_exchange(s, g, record, "the collective's fingerprint",
                                err);
}

ddph_status ddph__torch_trainer_call(void *self, const char *what,
                                     ddph_dtype dtype, size_t count, int op,
                                     int root, ddph_err *err)
{
    torch_state *s = self;
    torch_group *g = &s->trainer;
    if (!s->check_collectives || g->head.size < 2)
        return DDPH_OK;
    int64_t record[TORCH_RECORD_FIELDS];
    call_record(record, g, what, dtype, count, op, root);
    record[R_BUCKET] = R_TRAINER;
    return ddph__torch_exchange(s, g, record, "the trainer call's fingerprint",
                                err);
}

ddph_status ddph__torch_split_call(torch_state *s, torch_group *parent,
                                   ddph_err *err)
{
    if (!s->check_collectives || parent->head.size < 2)
        return DDPH_OK;
    int64_t record[TORCH_RECORD_FIELDS];
    call_record(record, parent, "split", DDPH_I64, 2, -1, -1);
    fold_record(parent, record);
    return ddph__torch_exchange(s, parent, record, "the split's fingerprint",
                                err);
}
