/* compress_hook.h: the body shared by the fp16 and bf16 compression hooks
 * (PyTorch's fp16_compress_hook / bf16_compress_hook, docs/pytorch-semantics.md
 * §1): cast the bucket to the half type, divide by the world size in that
 * type, sum across ranks in that type (half the bytes on the wire), cast the
 * result back into the bucket.  Each plugin includes this once and defines
 * its table; the state is one scratch buffer reused across buckets (hooks of
 * one instance run one at a time). */
#ifndef DDPH_PLUGINS_COMPRESS_HOOK_H
#define DDPH_PLUGINS_COMPRESS_HOOK_H

#include <stdlib.h>

#include <ddphook/plugin.h>

typedef struct compress_state {
    void *scratch;
    size_t capacity; /* bytes */
} compress_state;

static ddph_status compress_create(const ddph_services *s,
                                   const ddph_options *opts, void **state)
{
    (void)opts;
    compress_state *st = calloc(1, sizeof *st);
    if (!st) {
        s->set_error(s, "out of memory");
        return DDPH_ERR_NOMEM;
    }
    *state = st;
    return DDPH_OK;
}

static void compress_destroy(const ddph_services *s, void *state)
{
    compress_state *st = state;
    if (!st)
        return;
    s->free(s, st->scratch);
    free(st);
}

static ddph_status compress_bucket(compress_state *st, const ddph_bucket *b,
                                   const ddph_services *s, ddph_dtype half)
{
    double world = (double)s->group_size(s->world);
    /* Already half: a host bucket kept in it (DDPH_PLUGIN_BUCKETS_F16/BF16)
     * or a wrapper's copy. */
    if (b->dtype == half) {
        /* The host may have divided it too (DDPH_PLUGIN_DIVIDES_FIRST). */
        int divided = DDPH_HAS_MEMBER(b, ddph_bucket, divided_by) &&
                      b->divided_by == world;
        ddph_status r =
            divided ? DDPH_OK : s->divide(s, b->buffer, half, b->numel, world);
        return r ? r : s->allreduce(s, s->world, b->buffer, b->numel, half,
                                    DDPH_SUM);
    }
    size_t bytes = b->numel * 2;
    if (bytes > st->capacity) {
        s->free(s, st->scratch);
        st->scratch = s->alloc(s, bytes);
        st->capacity = st->scratch ? bytes : 0;
        if (!st->scratch) {
            s->set_error(s, "out of memory for a %zu-byte scratch buffer",
                         bytes);
            return DDPH_ERR_NOMEM;
        }
    }
    /* Cast first, then divide in half precision: PyTorch's order.  Large
     * gradients overflow to Inf before the division (see docs/hooks.md). */
    ddph_status r = s->cast(s, b->buffer, b->dtype, st->scratch, half, b->numel,
                            1.0);
    if (!r)
        r = s->divide(s, st->scratch, half, b->numel, world);
    if (!r)
        r = s->allreduce(s, s->world, st->scratch, b->numel, half, DDPH_SUM);
    if (!r)
        r = s->cast(s, st->scratch, half, b->buffer, b->dtype, b->numel, 1.0);
    return r;
}

#endif
