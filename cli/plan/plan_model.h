/* plan_model.h: the cost model of `ddphook plan` (docs/plan.md).
 *
 * A cluster of `hosts` hosts with `per_host` ranks each, ranks numbered
 * host by host (as mpiexec -hosts A:R,B:R places them).  Every host has
 * one full-duplex link to a switch (bandwidth and latency per direction)
 * and its ranks talk to each other through shared memory (bandwidth and
 * latency per pair of ranks).  A collective is the sequence of exchange
 * steps MPICH 4.0's algorithm makes at that size (or the runtime's own
 * ring for half-precision sums); a step costs the latency plus the bytes
 * the busiest link carries in it over its bandwidth, or the intra-host
 * copy when that is longer, plus the reduction arithmetic the step makes.
 * No loop runs over pairs of ranks: a step's link load takes O(ranks)
 * once per distance, kept in the model. */
#ifndef DDPH_CLI_PLAN_MODEL_H
#define DDPH_CLI_PLAN_MODEL_H

#include <stddef.h>

typedef struct plan_cluster {
    int hosts, per_host;
    double link_bw;    /* payload bytes/s per direction of a host's link */
    double link_lat;   /* seconds a message takes to start across a link */
    double intra_bw;   /* bytes/s between two ranks of a host */
    double intra_lat;  /* seconds */
    double add_f32;    /* seconds per byte of an f32 sum (a += b) */
    double add_half;   /* the same for f16/bf16 */
    int nccl;          /* sums and gathers are NCCL's (GPU buckets), not
                          MPICH's */
} plan_cluster;

/* The collectives the shipped hooks issue. */
typedef enum plan_coll {
    PLAN_ALLREDUCE,      /* f32 (or another MPI type), MPI_SUM: MPICH */
    PLAN_ALLREDUCE_HALF, /* f16/bf16 sum: runtime ring, or MPICH's */
    PLAN_ALLREDUCE_USER, /* a small value with a reduction MPI runs
                            (MAX of one int): MPICH */
    PLAN_ALLGATHER,      /* bytes = what each rank contributes */
    PLAN_ALLTOALL,       /* bytes = what each rank sends each peer */
    PLAN_BROADCAST,
    PLAN_SHARED_ALLREDUCE, /* one host: the shared-memory bucket sum */
} plan_coll;

typedef struct plan_cost {
    double seconds;
    double link_bytes;     /* per direction of the busiest host link */
    const char *algorithm; /* MPICH's or the runtime's name for it */
} plan_cost;

/* One model per cluster: it keeps the link load of each step shape. */
typedef struct plan_model plan_model;

plan_model *plan_model_new(const plan_cluster *c);
void plan_model_free(plan_model *m);
const plan_cluster *plan_model_cluster(const plan_model *m);

/* One collective of `bytes` (see plan_coll) on every rank of the world. */
plan_cost plan_collective(plan_model *m, plan_coll kind, double bytes);

/* Parses a name of plan_coll as --collective takes it (allreduce,
 * allreduce-f16, allgather, alltoall, broadcast); 0 for an unknown one. */
int plan_coll_parse(const char *name, plan_coll *out);

#endif
