/* layout_1_4.c: a hook built against release 0.5.1's headers (plugin ABI
 * 1.4, tests/abi_1_4/), never against this tree's.  on_layout indexes
 * layout->buckets with 1.4's sizeof(ddph_bucket), as any hook built then
 * does; on_bucket then checks that every bucket the host hands it is the
 * one the layout announced at its index (count, elements, tensors, their
 * names and shapes), and averages it.  Any mismatch fails the step with a
 * message naming the bucket; destroy logs what it checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#if DDPH_PLUGIN_ABI_MINOR != 4
#error "layout_1_4.c must be built against tests/abi_1_4's headers"
#endif

typedef struct announced {
    int index, count;
    size_t numel, ntensors;
    const char *first_name;
    int64_t first_dim0;
} announced;

typedef struct layout_state {
    int nbuckets;
    announced *buckets;
    long checked;
} layout_state;

static ddph_status l14_create(const ddph_services *s, const ddph_options *o,
                              void **state)
{
    (void)s;
    (void)o;
    *state = calloc(1, sizeof(layout_state));
    return *state ? DDPH_OK : DDPH_ERR_NOMEM;
}

static void l14_destroy(const ddph_services *s, void *state)
{
    layout_state *t = state;
    if (!t)
        return;
    s->log(s, DDPH_LOG_WARN,
           "layout_1_4: %d buckets read from on_layout with ABI 1.4's "
           "stride of %zu bytes; %ld on_bucket calls matched them",
           t->nbuckets, sizeof(ddph_bucket), t->checked);
    free(t->buckets);
    free(t);
}

static ddph_status l14_on_layout(void *state, const ddph_layout *layout,
                                 const ddph_services *s)
{
    layout_state *t = state;
    int n = layout->nbuckets;
    t->buckets = calloc((size_t)(n > 0 ? n : 1), sizeof *t->buckets);
    if (!t->buckets)
        return DDPH_ERR_NOMEM;
    t->nbuckets = n;
    for (int i = 0; i < n; i++) {
        const ddph_bucket *b = &layout->buckets[i]; /* 1.4's stride */
        if (b->index != i || b->count != n || b->ntensors == 0) {
            s->set_error(s, "layout_1_4: layout->buckets[%d] reads as "
                            "index %d of %d with %zu tensors",
                         i, b->index, b->count, b->ntensors);
            return DDPH_ERR_STATE;
        }
        t->buckets[i] = (announced){b->index, b->count, b->numel,
                                    b->ntensors, b->tensors[0].name,
                                    b->tensors[0].shape[0]};
    }
    return DDPH_OK;
}

static ddph_status l14_on_bucket(void *state, const ddph_bucket *b,
                                 const ddph_services *s)
{
    layout_state *t = state;
    const announced *a =
        b->index >= 0 && b->index < t->nbuckets ? &t->buckets[b->index] : NULL;
    if (!a || a->count != b->count || a->numel != b->numel ||
        a->ntensors != b->ntensors ||
        strcmp(a->first_name, b->tensors[0].name) != 0 ||
        a->first_dim0 != b->tensors[0].shape[0]) {
        s->set_error(s, "layout_1_4: bucket %d of %d (%zu elements, %zu "
                        "tensors, first '%s') is not the bucket the layout "
                        "announced at that index",
                     b->index, b->count, b->numel, b->ntensors,
                     b->tensors[0].name);
        return DDPH_ERR_STATE;
    }
    t->checked++;
    ddph_status st = s->divide(s, b->buffer, b->dtype, b->numel,
                               (double)s->world_size);
    return st != DDPH_OK ? st
                         : s->allreduce(s, s->world, b->buffer, b->numel,
                                        b->dtype, DDPH_SUM);
}

static const ddph_plugin_api_v1 api = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "layout_1_4",
    .version = "1.4",
    .description = "built against ABI 1.4's headers: checks the layout's "
                   "buckets against on_bucket's",
    .create = l14_create,
    .destroy = l14_destroy,
    .on_bucket = l14_on_bucket,
    .on_layout = l14_on_layout,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    return host_minor >= 2 ? &api : NULL;
}
