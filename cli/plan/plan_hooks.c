/* plan_hooks.c: see plan_hooks.h. */
#include "build-config.h"

#include "plan_hooks.h"

static void add(plan_hook_cost *h, plan_model *m, plan_coll kind,
                double bytes)
{
    plan_cost c = plan_collective(m, kind, bytes);
    h->comm_s += c.seconds;
    h->link_bytes += c.link_bytes;
}

/* A sum of the bucket itself is made in shared memory on one host (the
 * runtime does it for f32 and the half types); half sums go round the
 * runtime's ring; other reductions are MPICH's. */
static plan_coll allreduce_kind(const plan_cluster *c, const plan_rec_call *k)
{
    if (k->sum && k->whole_bucket && c->hosts == 1)
        return PLAN_SHARED_ALLREDUCE;
    if (!k->sum)
        return PLAN_ALLREDUCE_USER;
    return k->half ? PLAN_ALLREDUCE_HALF : PLAN_ALLREDUCE;
}

plan_hook_cost plan_hook_bucket(plan_model *m, const plan_rec_bucket *b,
                                double scatter_s)
{
    plan_hook_cost h = {0, 0, b->sent_bytes, 0};
    const plan_cluster *c = plan_model_cluster(m);
    double peers = (double)c->hosts * c->per_host - 1;
    for (int i = 0; i < b->ncalls; i++) {
        const plan_rec_call *k = &b->calls[i];
        double bytes = (double)k->count * (double)k->elem_bytes;
        switch (k->kind) {
        case PLAN_REC_ALLREDUCE:
            add(&h, m, allreduce_kind(c, k), bytes);
            break;
        case PLAN_REC_ALLGATHER:
        case PLAN_REC_ALLGATHERV:
            add(&h, m, PLAN_ALLGATHER, bytes);
            h.extra_s += peers * bytes / 8 * scatter_s;
            break;
        case PLAN_REC_ALLTOALL:
            add(&h, m, PLAN_ALLTOALL, bytes);
            break;
        case PLAN_REC_BROADCAST:
            add(&h, m, PLAN_BROADCAST, bytes);
            break;
        case PLAN_REC_REDUCE_SCATTER: {
            /* The first half of a reduce-scatter + allgather sum of the
             * whole vector. */
            plan_hook_cost whole = {0, 0, 0, 0};
            add(&whole, m, PLAN_ALLREDUCE, bytes * (peers + 1));
            h.comm_s += whole.comm_s / 2;
            h.link_bytes += whole.link_bytes / 2;
            break;
        }
        }
    }
    return h;
}
