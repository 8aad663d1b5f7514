/* state_memory.c: a rank's hook state as bytes in memory, in the format
 * of its state file (state_format.c), for trainers that keep it in their
 * own checkpoints (the PyTorch bridge's state_dict). */
#include "build-config.h"

#include "core/state/state_memory.h"
#include "core/state/state_file.h"
#include "core/state/state_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What names the bytes in messages, as a file's path does. */
static void memory_label(const ddph_ctx *ctx, char *out, size_t n)
{
    snprintf(out, n, "the hook state given to rank %d", ddph__rank(ctx));
}

ddph_status ddph__state_save_memory(ddph_ctx *ctx, void **data, size_t *len,
                                    ddph_err *err)
{
    *data = NULL;
    *len = 0;
    err->msg[0] = '\0';
    ddph_status st = ddph__state_between_steps(ctx, "state_save_to_memory",
                                               err);
    /* Generation 0 and save id 0: the bytes are one rank's, taken alone;
     * no other rank's save is matched against them. */
    ddph_state_buf b = {0};
    if (st == DDPH_OK)
        st = ddph__state_encode(ctx, 0, 0, &b, err);
    if (st != DDPH_OK) {
        free(b.data);
        return st;
    }
    *data = b.data;
    *len = b.len;
    return DDPH_OK;
}

ddph_status ddph__state_load_memory(ddph_ctx *ctx, const void *data,
                                    size_t len, ddph_err *err)
{
    char label[64];
    memory_label(ctx, label, sizeof label);
    err->msg[0] = '\0';
    ddph_status st = ddph__state_between_steps(ctx, "state_load_from_memory",
                                               err);
    ddph_state_buf b = {0};
    if (st == DDPH_OK && len > ddph__state_largest(ctx))
        st = ddph__fail(err, DDPH_ERR_IO,
                        "%s: %zu bytes is more than %zu, the most %s",
                        label, len, ddph__state_largest(ctx),
                        DDPH__STATE_LIMIT_WHY);
    /* A copy: the hooks read from b, and b's length is trimmed while it is
     * validated; the caller's bytes stay as they were. */
    if (st == DDPH_OK && !(b.data = malloc(len ? len : 1)))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "%s: out of memory", label);
    uint64_t generation = 0, id = 0;
    if (st == DDPH_OK) {
        if (len)
            memcpy(b.data, data, len);
        b.len = len;
        st = ddph__state_parse_header(ctx, label, &b, &generation, &id, err);
    }
    if (st == DDPH_OK) {
        b.pos = 0;
        st = ddph__state_validate(ctx, label, generation, id, &b, err);
    }
    st = ddph__state_agree(ctx, st, err);
    st = ddph__state_apply(ctx, label, st, &b, err);
    free(b.data);
    return st;
}
