/* plan_hooks.c: see plan_hooks.h.  Each function follows its plugin's
 * on_bucket in the steady state (PowerSGD compressing, error feedback
 * on). */
#include "build-config.h"

#include "plan_hooks.h"

#include <math.h>
#include <string.h>

static void add(plan_hook_cost *h, plan_model *m, plan_coll kind, double bytes,
                double sent)
{
    plan_cost c = plan_collective(m, kind, bytes);
    h->comm_s += c.seconds;
    h->link_bytes += c.link_bytes;
    h->sent_bytes += sent;
}

/* Per tensor: P = M Q (rows x r), Q = M^T P (cols x r), for the tensors
 * where (rows + cols) r rate < rows cols; the others are summed as they
 * are.  Three sums a bucket: the uncompressed tensors, P, Q. */
static void powersgd(plan_hook_cost *h, plan_model *m,
                     const plan_hook_options *o, const plan_bucket *b)
{
    double flat = 0, p = 0, q = 0;
    for (int t = 0; t < b->ntensors; t++) {
        size_t n = b->rows[t] ? b->rows[t] : 1;
        size_t cols = b->numels[t] / n;
        size_t r = (size_t)o->psgd_rank;
        r = r < n ? r : n;
        r = r < cols ? r : cols;
        if ((double)((n + cols) * r) * o->psgd_min_rate < (double)(n * cols)) {
            p += (double)(n * r);
            q += (double)(cols * r);
        } else {
            flat += (double)b->numels[t];
        }
    }
    add(h, m, PLAN_ALLREDUCE, flat * 4, flat * 4);
    add(h, m, PLAN_ALLREDUCE, p * 4, p * 4);
    add(h, m, PLAN_ALLREDUCE, q * 4, q * 4);
}

/* The bucket zero-padded to side x side: two sums of side x r. */
static void batched_powersgd(plan_hook_cost *h, plan_model *m,
                             const plan_hook_options *o, const plan_bucket *b)
{
    size_t side = (size_t)ceil(sqrt((double)b->numel));
    while (side * side < b->numel)
        side++;
    while (side > 0 && (side - 1) * (side - 1) >= b->numel)
        side--;
    size_t r = (size_t)o->psgd_rank < side ? (size_t)o->psgd_rank : side;
    double bytes = (double)(side * r) * 4;
    add(h, m, PLAN_ALLREDUCE, bytes, bytes);
    add(h, m, PLAN_ALLREDUCE, bytes, bytes);
}

int plan_hook_known(const char *name)
{
    static const char *const known[] = {"allreduce", "fp16", "bf16",
                                        "powersgd", "batched_powersgd",
                                        "topk", "int8"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i]) == 0)
            return 1;
    return 0;
}

plan_hook_cost plan_hook_bucket(plan_model *m, const char *hook,
                                const plan_hook_options *o,
                                const plan_bucket *b, double scatter_s)
{
    plan_hook_cost h = {0, 0, 0, 0};
    const plan_cluster *c = plan_model_cluster(m);
    double n = (double)c->hosts * c->per_host, numel = (double)b->numel;
    if (strcmp(hook, "allreduce") == 0) {
        /* The bucket itself: on one host, summed in shared memory. */
        add(&h, m, PLAN_SHARED_ALLREDUCE, numel * 4, numel * 4);
    } else if (strcmp(hook, "fp16") == 0 || strcmp(hook, "bf16") == 0) {
        /* The runtime keeps the bucket in the half type for them. */
        add(&h, m, c->hosts == 1 ? PLAN_SHARED_ALLREDUCE : PLAN_ALLREDUCE_HALF,
            numel * 2, numel * 2);
    } else if (strcmp(hook, "powersgd") == 0) {
        powersgd(&h, m, o, b);
    } else if (strcmp(hook, "batched_powersgd") == 0) {
        batched_powersgd(&h, m, o, b);
    } else if (strcmp(hook, "topk") == 0) {
        /* Values (f32) and indices (i32) gathered at once, then every
         * rank's selection scattered into the bucket. */
        double k = ceil(o->topk_ratio * numel);
        k = k < 1 ? 1 : k;
        add(&h, m, PLAN_ALLGATHER, 8 * k, 8 * k);
        h.extra_s = (n - 1) * k * scatter_s;
    } else if (strcmp(hook, "int8") == 0) {
        /* The scale (a MAX of one int), an all-to-all of int8 chunks,
         * then an allgather of the averaged chunks and their scales. */
        double chunk = ceil(numel / n);
        add(&h, m, PLAN_ALLREDUCE_USER, 4, 4);
        add(&h, m, PLAN_ALLTOALL, chunk, chunk * (n - 1));
        add(&h, m, PLAN_ALLGATHER, chunk + 4, chunk + 4);
    }
    return h;
}
