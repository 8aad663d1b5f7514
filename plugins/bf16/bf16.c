/* bf16: PyTorch's bf16_compress_hook.  The bucket travels as bfloat16 (f32's
 * exponent range, 8 bits of mantissa): half the bytes of f32, no overflow
 * where f32 has none.  See compress_hook.h and docs/hooks.md. */
#include "../common/compress_hook.h"

static ddph_status bf16_on_bucket(void *state, const ddph_bucket *b,
                                  const ddph_services *s)
{
    return compress_bucket(state, b, s, DDPH_BF16);
}

static const ddph_plugin_api_v1 bf16_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "bf16",
    .version = "1.0.0",
    .description = "cast to bf16, divide by world size, sum in bf16, cast "
                   "back (PyTorch bf16_compress_hook)",
    .create = compress_create,
    .destroy = compress_destroy,
    .on_bucket = bf16_on_bucket,
    /* Host buckets come cast (and divided) already: no f32 copy of the
     * gradients, no pass of its own over them. */
    .flags = DDPH_PLUGIN_BUCKETS_BF16 | DDPH_PLUGIN_DIVIDES_FIRST,
    /* bf16 keeps 8 significant bits (2^-8 = 3.9e-3 a value). */
    .tolerance = 2e-2,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &bf16_plugin;
}
