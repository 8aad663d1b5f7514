/* allreduce: the default hook, PyTorch's allreduce_hook.
 *
 * Divides the bucket by the world size first (as _allreduce_fut does, to
 * keep fp16 from overflowing), then sums it across ranks in place; where
 * the host copies gradients into buckets it does the division on the way
 * in (DDPH_PLUGIN_DIVIDES_FIRST).  The
 * result equals DDP with no hook.  Stateless, no options, so it lets the
 * host run several buckets at once ([runtime] lanes). */
#include <ddphook/plugin.h>

static ddph_status allreduce_create(const ddph_services *s,
                                    const ddph_options *opts, void **state)
{
    (void)s;
    (void)opts;
    *state = NULL;
    return DDPH_OK;
}

static void allreduce_destroy(const ddph_services *s, void *state)
{
    (void)s;
    (void)state;
}

static ddph_status allreduce_on_bucket(void *state, const ddph_bucket *b,
                                       const ddph_services *s)
{
    (void)state;
    double world = (double)s->group_size(s->world);
    /* Divided while the host copied the gradients in (the flag below). */
    int divided = DDPH_HAS_MEMBER(b, ddph_bucket, divided_by) &&
                  b->divided_by == world;
    ddph_status st = divided ? DDPH_OK
                             : s->divide(s, b->buffer, b->dtype, b->numel,
                                         world);
    if (st != DDPH_OK)
        return st;
    return s->allreduce(s, s->world, b->buffer, b->numel, b->dtype, DDPH_SUM);
}

static const ddph_plugin_api_v1 allreduce_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "allreduce",
    .version = "1.0.0",
    .description = "average across ranks: divide by world size, then sum "
                   "(PyTorch allreduce_hook)",
    .options = NULL,
    .create = allreduce_create,
    .destroy = allreduce_destroy,
    .on_bucket = allreduce_on_bucket,
    /* Stateless: buckets may run at once on several lanes; the host may
     * divide as it copies the gradients in. */
    .flags = DDPH_PLUGIN_CONCURRENT_BUCKETS | DDPH_PLUGIN_DIVIDES_FIRST,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &allreduce_plugin;
}
