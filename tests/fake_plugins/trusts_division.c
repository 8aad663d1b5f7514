/* trusts_division.c: allreduce declaring DDPH_PLUGIN_DIVIDES_FIRST that
 * never divides itself, trusting the host to have divided every bucket.
 * Right where the host copies gradients in (it divides on the way,
 * b->divided_by = W); W times the average where it does not: buckets as
 * views, GPU buckets.  For ddphook-plugin-test's "f32 buckets as a view"
 * rows (tests/sdk.sh). */
#include <ddphook/plugin.h>

static ddph_status trusting_create(const ddph_services *s,
                                   const ddph_options *opts, void **state)
{
    (void)s;
    (void)opts;
    *state = NULL;
    return DDPH_OK;
}

static void trusting_destroy(const ddph_services *s, void *state)
{
    (void)s;
    (void)state;
}

static ddph_status trusting_on_bucket(void *state, const ddph_bucket *b,
                                      const ddph_services *s)
{
    (void)state; /* the bug: b->divided_by is never looked at */
    return s->allreduce(s, s->world, b->buffer, b->numel, b->dtype, DDPH_SUM);
}

static const ddph_plugin_api_v1 trusting_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "trusts_division",
    .version = "1.0.0",
    .description = "allreduce that leaves the division to the host, always",
    .create = trusting_create,
    .destroy = trusting_destroy,
    .on_bucket = trusting_on_bucket,
    .flags = DDPH_PLUGIN_DIVIDES_FIRST,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &trusting_plugin;
}
