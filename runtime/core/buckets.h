/* buckets.h: which gradients travel together.  This is PyTorch's
 * compute_bucket_assignment_by_size (docs/pytorch-semantics.md §4):
 * tensors are grouped by (dtype, device) and walked in the order given; a
 * bucket closes as soon as its size reaches the current limit (so it may
 * overshoot), and each (dtype, device) group then moves to the next
 * limit, staying on the last one.  Leftover open buckets are appended in order of their group's
 * first appearance.  Optionally the buckets are sorted by their smallest
 * tensor index (what PyTorch does when no order is imposed). */
#ifndef DDPH_BUCKETS_H
#define DDPH_BUCKETS_H

#include <stddef.h>

#include "support/config.h" /* DDPH_CAP_AUTO */
#include "support/util.h"

typedef struct ddph_bucket_tensor {
    int index;      /* caller's tensor index */
    size_t bytes;   /* numel * element size */
    ddph_dtype dtype;
    ddph_device device;
} ddph_bucket_tensor;

/* Compressed rows: bucket b holds indices[start[b] .. start[b+1]-1]. */
typedef struct ddph_bucket_plan {
    int nbuckets;
    int *start;        /* nbuckets + 1 */
    int *indices;      /* caller's tensor indices, in bucket order */
    size_t *limits;    /* the size limit each bucket was filled against */
} ddph_bucket_plan;

/* tensors[] in walk order; limits[] in bytes (nlimits >= 1). */
ddph_status ddph__assign_buckets(const ddph_bucket_tensor *tensors, size_t n,
                                 const size_t *limits, size_t nlimits,
                                 int sort_by_min_index, ddph_bucket_plan *out,
                                 ddph_err *err);
void ddph__bucket_plan_free(ddph_bucket_plan *plan);

/* MiB (a real number, as PyTorch's bucket_cap_mb) to bytes, rounded. */
size_t ddph__mib_to_bytes(double mib);

/* The limits {bucket 0, the others} in bytes for a model of total_bytes
 * of gradients: first_mb and cap_mb as [runtime] gives them, either of
 * them DDPH_CAP_AUTO (support/config.h).  auto: the others at total/8,
 * between 256 KiB and 25 MiB (PyTorch's default), bucket 0 at that or
 * 1 MiB (PyTorch's), the smaller; the reasons are in buckets.c. */
void ddph__bucket_limits(double first_mb, double cap_mb, size_t total_bytes,
                         size_t limits[2]);

#endif
