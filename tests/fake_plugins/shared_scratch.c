/* shared_scratch.c: allreduce through one scratch buffer of the instance,
 * declaring DDPH_PLUGIN_CONCURRENT_BUCKETS all the same: two buckets
 * running at once on different lanes overwrite each other's gradients
 * in it.  Right one bucket at a time (no lanes).  For ddphook-plugin-
 * test's "f32 buckets on 3 lanes" rows (tests/sdk.sh). */
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

typedef struct scratch {
    float *buf;
    size_t cap;
} scratch;

static ddph_status scratch_create(const ddph_services *s,
                                  const ddph_options *opts, void **state)
{
    (void)s;
    (void)opts;
    *state = calloc(1, sizeof(scratch));
    return *state ? DDPH_OK : DDPH_ERR_NOMEM;
}

static void scratch_destroy(const ddph_services *s, void *state)
{
    (void)s;
    scratch *t = state;
    free(t->buf);
    free(t);
}

/* Sized for the largest bucket before any step: on_bucket only uses it. */
static ddph_status scratch_layout(void *state, const ddph_layout *layout,
                                  const ddph_services *s)
{
    (void)s;
    scratch *t = state;
    for (int i = 0; i < layout->nbuckets; i++) {
        size_t n = ddph_util_layout_bucket(layout, i)->numel;
        if (n > t->cap) {
            free(t->buf);
            t->cap = 0;
            if (!(t->buf = malloc(n * sizeof(float))))
                return DDPH_ERR_NOMEM;
            t->cap = n;
        }
    }
    return DDPH_OK;
}

static ddph_status scratch_on_bucket(void *state, const ddph_bucket *b,
                                     const ddph_services *s)
{
    scratch *t = state;
    /* f32, or f16 and bf16 under the wrappers: at most 4 bytes each. */
    size_t bytes = b->numel * (b->dtype == DDPH_F32 ? 4 : 2);
    if (b->dtype == DDPH_F64 || b->numel > t->cap)
        return DDPH_ERR_UNSUPPORTED;
    /* The bug: one buffer for every lane's bucket. */
    memcpy(t->buf, b->buffer, bytes);
    ddph_status st = s->divide(s, t->buf, b->dtype, b->numel,
                               (double)s->world_size);
    if (st == DDPH_OK)
        st = s->allreduce(s, s->world, t->buf, b->numel, b->dtype, DDPH_SUM);
    if (st == DDPH_OK)
        memcpy(b->buffer, t->buf, bytes);
    return st;
}

static const ddph_plugin_api_v1 scratch_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "shared_scratch",
    .version = "1.0.0",
    .description = "allreduce through one shared scratch buffer, declared "
                   "safe for concurrent buckets",
    .create = scratch_create,
    .destroy = scratch_destroy,
    .on_bucket = scratch_on_bucket,
    .on_layout = scratch_layout,
    .flags = DDPH_PLUGIN_CONCURRENT_BUCKETS,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &scratch_plugin;
}
