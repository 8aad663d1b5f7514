/* plugin_util.h: helpers for hook authors, header-only (a plugin links
 * nothing of ddphook's).  The shipped hooks use them too.
 *
 *   ddph_util_dtype_size    bytes of one element of a dtype
 *   ddph_util_need_minor2   refuse a host older than ABI minor 2, saying so
 *   ddph_util_f32_load      an f32 view of any floating bucket
 *   ddph_util_f32_store     and the result written back in its dtype
 *   ddph_util_layout_bucket bucket i of on_layout's layout, on any host
 *   ddph_util_check_bucket  on_bucket's bucket is one on_layout announced
 *   ddph_util_save_errors   per-bucket error buffers (device memory) into
 *   ddph_util_load_errors   the hook's saved state, and back, refusing
 *                           another model's state
 *   ddph_util_stats_put     the `stats` entry point's contract
 *   ddph_util_alloc_zero    device memory from `alloc`, zeroed (on_layout)
 *
 * docs/plugin-guide.md shows them in use. */
#ifndef DDPHOOK_PLUGIN_UTIL_H
#define DDPHOOK_PLUGIN_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <ddphook/plugin.h>

/* Bytes of one element of dtype (0 for a value outside the enum). */
static inline size_t ddph_util_dtype_size(ddph_dtype dtype)
{
    switch (dtype) {
    case DDPH_F64:
    case DDPH_I64:
        return 8;
    case DDPH_F32:
    case DDPH_I32:
        return 4;
    case DDPH_F16:
    case DDPH_BF16:
        return 2;
    case DDPH_U8:
    case DDPH_I8:
        return 1;
    case DDPH_DTYPE_COUNT:
        break;
    }
    return 0;
}

/* The services of ABI minor 2 these hooks use: a host without them is
 * told so at create. */
static inline ddph_status ddph_util_need_minor2(const ddph_services *s,
                                           const char *hook)
{
    if (DDPH_HAS_MEMBER(s, ddph_services, dequantize_int8))
        return DDPH_OK;
    s->set_error(s, "%s needs a host with plugin ABI minor 2 (this host: "
                    "%u)", hook, s->abi_minor);
    return DDPH_ERR_UNSUPPORTED;
}

/* The f32 data of bucket b: b->buffer itself, or `work` (numel floats)
 * after a cast from it. */
static inline ddph_status ddph_util_f32_load(const ddph_services *s,
                                    const ddph_bucket *b, float *work,
                                    float **out)
{
    if (b->dtype == DDPH_F32) {
        *out = b->buffer;
        return DDPH_OK;
    }
    *out = work;
    return s->cast(s, b->buffer, b->dtype, work, DDPH_F32, b->numel, 1.0);
}

/* Writes the f32 result back into the bucket when it is not f32. */
static inline ddph_status ddph_util_f32_store(const ddph_services *s,
                                     const ddph_bucket *b, const float *data)
{
    if (b->dtype == DDPH_F32)
        return DDPH_OK;
    return s->cast(s, data, DDPH_F32, b->buffer, b->dtype, b->numel, 1.0);
}

/* Bucket i (0 <= i < nbuckets) of on_layout's layout: through bucket_list
 * where the host has it (ABI 1.5), else buckets[] stepped by its elements'
 * own struct_size (a 1.2-1.4 host gives its own size), so that a plugin
 * built against any minor reads the right bucket from any host. */
static inline const ddph_bucket *ddph_util_layout_bucket(const ddph_layout *l,
                                                         int i)
{
    if (DDPH_HAS_MEMBER(l, ddph_layout, bucket_list) && l->bucket_list)
        return l->bucket_list[i];
    return (const ddph_bucket *)(const void *)((const char *)l->buckets +
                                               (size_t)i *
                                                   l->buckets[0].struct_size);
}

/* Checks that on_bucket's bucket is the one on_layout announced. */
static inline ddph_status ddph_util_check_bucket(const ddph_services *s,
                                            const char *hook, int nbuckets,
                                            const size_t *numel,
                                            const ddph_bucket *b)
{
    if (b->index >= 0 && b->index < nbuckets && numel[b->index] == b->numel)
        return DDPH_OK;
    s->set_error(s, "%s: bucket %d (%zu elements) is not in the layout "
                    "the host gave at on_layout (%d buckets)",
                 hook, b->index, b->numel, nbuckets);
    return DDPH_ERR_STATE;
}

/* Saves the error buffers of a hook's buckets (device memory): the bucket
 * count, then per bucket its element count and its floats. */
static inline ddph_status ddph_util_save_errors(const ddph_services *s,
                                           ddph_write_fn write, void *sink,
                                           int nbuckets, float *const *errors,
                                           const size_t *numel)
{
    int32_t nb = nbuckets;
    ddph_status st = write(sink, &nb, sizeof nb);
    for (int i = 0; i < nbuckets && st == DDPH_OK; i++) {
        uint64_t count = numel[i];
        float *host = malloc(numel[i] ? numel[i] * sizeof *host : 1);
        if (!host)
            return DDPH_ERR_NOMEM;
        st = s->copy(s, host, errors[i], numel[i] * sizeof *host,
                     DDPH_COPY_TO_HOST);
        if (st == DDPH_OK)
            st = write(sink, &count, sizeof count);
        if (st == DDPH_OK)
            st = write(sink, host, numel[i] * sizeof *host);
        free(host);
    }
    return st;
}

/* Reads what ddph_util_save_errors wrote; another model's state (a different
 * bucket count or size) is refused. */
static inline ddph_status ddph_util_load_errors(const ddph_services *s,
                                           ddph_read_fn read, void *source,
                                           int nbuckets, float *const *errors,
                                           const size_t *numel,
                                           const char *hook)
{
    int32_t nb = 0;
    ddph_status st = read(source, &nb, sizeof nb);
    if (st == DDPH_OK && nb != nbuckets) {
        s->set_error(s, "%s: the saved state has %d buckets, this model %d",
                     hook, (int)nb, nbuckets);
        return DDPH_ERR_STATE;
    }
    for (int i = 0; i < nbuckets && st == DDPH_OK; i++) {
        uint64_t count = 0;
        if ((st = read(source, &count, sizeof count)) != DDPH_OK)
            break;
        if (count != numel[i]) {
            s->set_error(s, "%s: saved bucket %d has %llu elements, this "
                            "one %zu",
                         hook, i, (unsigned long long)count, numel[i]);
            return DDPH_ERR_STATE;
        }
        float *host = malloc(numel[i] ? numel[i] * sizeof *host : 1);
        if (!host)
            return DDPH_ERR_NOMEM;
        st = read(source, host, numel[i] * sizeof *host);
        if (st == DDPH_OK)
            st = s->copy(s, errors[i], host, numel[i] * sizeof *host,
                         DDPH_COPY_FROM_HOST);
        free(host);
    }
    return st;
}

/* `bytes` of the services' device memory, zeroed (1 byte for 0, so that
 * the pointer can be freed like any other); *ok is set to 0 on failure
 * and left alone otherwise, so that on_layout can allocate a bucket's
 * buffers in a row and test once. */
static inline void *ddph_util_alloc_zero(const ddph_services *s, size_t bytes,
                                         int *ok)
{
    void *p = s->alloc(s, bytes ? bytes : 1);
    if (!p || s->zero(s, p, bytes) != DDPH_OK)
        *ok = 0;
    return p;
}

/* The `stats` entry point's contract: up to `max` of the hook's `n`
 * figures go to `out`; the return value is how many it has. */
static inline size_t ddph_util_stats_put(const ddph_stat *all, size_t n,
                                         ddph_stat *out, size_t max)
{
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n;
}

#endif
