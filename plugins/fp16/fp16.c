/* fp16: PyTorch's fp16_compress_hook.  The bucket travels as IEEE binary16:
 * half the bytes of f32.  See compress_hook.h and docs/hooks.md. */
#include "../common/compress_hook.h"

static ddph_status fp16_on_bucket(void *state, const ddph_bucket *b,
                                  const ddph_services *s)
{
    return compress_bucket(state, b, s, DDPH_F16);
}

static const ddph_plugin_api_v1 fp16_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "fp16",
    .version = "1.0.0",
    .description = "cast to fp16, divide by world size, sum in fp16, cast "
                   "back (PyTorch fp16_compress_hook)",
    .create = compress_create,
    .destroy = compress_destroy,
    .on_bucket = fp16_on_bucket,
    /* Host buckets come cast (and divided) already: no f32 copy of the
     * gradients, no pass of its own over them. */
    .flags = DDPH_PLUGIN_BUCKETS_F16 | DDPH_PLUGIN_DIVIDES_FIRST,
    /* f16 keeps 11 significant bits: a sum of a few ranks' rounded values
     * stays well within 2e-3 of the largest average. */
    .tolerance = 2e-3,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &fp16_plugin;
}
