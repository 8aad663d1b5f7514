/* buckets.c: see buckets.h. */
#include "build-config.h"

#include "core/buckets.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct open_bucket {
    ddph_dtype dtype;
    ddph_device device;
    size_t size;
    size_t limit_pos; /* index into limits */
    int *members;
    int nmembers;
    int min_index;
} open_bucket;

typedef struct closed_bucket {
    int *members;
    int nmembers;
    int min_index;
    size_t limit;
} closed_bucket;

static int by_min_index(const void *a, const void *b)
{
    const closed_bucket *x = a, *y = b;
    return (x->min_index > y->min_index) - (x->min_index < y->min_index);
}

size_t ddph__mib_to_bytes(double mib)
{
    return (size_t)llround(mib * 1048576.0);
}

/* bucket_cap_mb = auto.  A step over a link that is slower than the
 * backward pass takes about forward + (the backward before bucket 0 is
 * ready) + every bucket's transfer; over a faster one, forward + backward
 * + the last bucket's transfer.  Both shrink with smaller buckets, while
 * every bucket costs a launch, a fingerprint and a latency: eight buckets
 * keep the first and the last an eighth of the model, and the floor keeps
 * a bucket's transfer well above a link's latency.  The caps depend on the
 * model alone, so every rank computes the same ones without a message.
 * GPT example on 2 simulated hosts at 100 Mbit/s: 0.345-0.349 s a step
 * against 0.388-0.394 with PyTorch's caps (docs/performance.md, "Overlap
 * with the backward pass"). */
#define AUTO_BUCKETS 8
#define AUTO_MIN_BYTES ((size_t)256 << 10)
#define AUTO_MAX_BYTES ((size_t)25 << 20)
#define AUTO_FIRST_MAX_BYTES ((size_t)1 << 20)

void ddph__bucket_limits(double first_mb, double cap_mb, size_t total_bytes,
                         size_t limits[2])
{
    size_t cap = total_bytes / AUTO_BUCKETS;
    cap = cap < AUTO_MIN_BYTES ? AUTO_MIN_BYTES
          : cap > AUTO_MAX_BYTES ? AUTO_MAX_BYTES : cap;
    if (cap_mb != DDPH_CAP_AUTO)
        cap = ddph__mib_to_bytes(cap_mb);
    size_t first = cap < AUTO_FIRST_MAX_BYTES ? cap : AUTO_FIRST_MAX_BYTES;
    if (first_mb != DDPH_CAP_AUTO)
        first = ddph__mib_to_bytes(first_mb);
    limits[0] = first;
    limits[1] = cap;
}

ddph_status ddph__assign_buckets(const ddph_bucket_tensor *tensors, size_t n,
                                 const size_t *limits, size_t nlimits,
                                 int sort_by_min_index, ddph_bucket_plan *out,
                                 ddph_err *err)
{
    if (nlimits == 0)
        return ddph__fail(err, DDPH_ERR_INVALID, "no bucket size limits");
    ddph_status st = DDPH_ERR_NOMEM;
    size_t cap = n ? n : 1;
    /* At most one open bucket per (dtype, device) key and n buckets. */
    open_bucket *open = calloc(cap, sizeof *open);
    closed_bucket *closed = calloc(cap, sizeof *closed);
    size_t nopen = 0, nclosed = 0;
    memset(out, 0, sizeof *out);
    if (!open || !closed)
        goto out;

    for (size_t i = 0; i < n; i++) {
        const ddph_bucket_tensor *t = &tensors[i];
        open_bucket *ob = NULL;
        for (size_t k = 0; k < nopen; k++)
            if (open[k].dtype == t->dtype && open[k].device == t->device)
                ob = &open[k];
        if (!ob) {
            ob = &open[nopen++];
            ob->dtype = t->dtype;
            ob->device = t->device;
        }
        if (!ob->members && !(ob->members = malloc(cap * sizeof(int))))
            goto out;
        if (ob->nmembers == 0 || t->index < ob->min_index)
            ob->min_index = t->index;
        ob->members[ob->nmembers++] = t->index;
        ob->size += t->bytes;
        size_t limit = limits[ob->limit_pos];
        if (ob->size >= limit) {
            closed[nclosed++] = (closed_bucket){ob->members, ob->nmembers,
                                                ob->min_index, limit};
            ob->members = NULL;
            ob->nmembers = 0;
            ob->size = 0;
            if (ob->limit_pos + 1 < nlimits)
                ob->limit_pos++;
        }
    }
    for (size_t k = 0; k < nopen; k++) {
        if (open[k].nmembers)
            closed[nclosed++] = (closed_bucket){
                open[k].members, open[k].nmembers, open[k].min_index,
                limits[open[k].limit_pos]};
        else
            free(open[k].members);
        open[k].members = NULL;
    }
    if (sort_by_min_index)
        qsort(closed, nclosed, sizeof *closed, by_min_index);

    out->start = malloc((nclosed + 1) * sizeof *out->start);
    out->indices = malloc(cap * sizeof *out->indices);
    out->limits = malloc((nclosed ? nclosed : 1) * sizeof *out->limits);
    if (!out->start || !out->indices || !out->limits) {
        ddph__bucket_plan_free(out);
        goto out;
    }
    out->nbuckets = (int)nclosed;
    int pos = 0;
    for (size_t b = 0; b < nclosed; b++) {
        out->start[b] = pos;
        memcpy(out->indices + pos, closed[b].members,
               (size_t)closed[b].nmembers * sizeof(int));
        pos += closed[b].nmembers;
        out->limits[b] = closed[b].limit;
    }
    out->start[nclosed] = pos;
    st = DDPH_OK;
out:
    if (open)
        for (size_t k = 0; k < nopen; k++)
            free(open[k].members);
    if (closed)
        for (size_t b = 0; b < nclosed; b++)
            free(closed[b].members);
    free(open);
    free(closed);
    if (st != DDPH_OK)
        return ddph__fail(err, st, "out of memory assigning buckets");
    return st;
}

void ddph__bucket_plan_free(ddph_bucket_plan *plan)
{
    free(plan->start);
    free(plan->indices);
    free(plan->limits);
    memset(plan, 0, sizeof *plan);
}
