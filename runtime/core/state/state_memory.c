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
    snprintf(out, n, "the hook state in memory given to rank %d",
             ddph__rank(ctx));
}

ddph_status ddph__state_save_memory(ddph_ctx *ctx, void **data, size_t *len,
                                    ddph_err *err)
{
    *data = NULL;
    *len = 0;
    err->msg[0] = '\0';
    ddph_status st = ddph__state_between_steps(ctx, "state_save_to_memory",
                                               err);
    /* Generation 0, and an id of this job, this rank's call count and
     * the models' steps: the same on every rank for one call at one step
     * on each, which a load compares (the ranks' parts of one checkpoint
     * must come from one save). */
    ddph_state_buf b = {0};
    if (st == DDPH_OK) {
        uint64_t id = ddph__mix64(ctx->job_token, ++ctx->memory_saves);
        for (int i = 0; i < ctx->nmodels; i++)
            id = ddph__mix64(id, ctx->models[i]->iteration);
        st = ddph__state_encode(ctx, "state_save_to_memory", 0,
                                id % DDPH__STATE_ID_LIMIT, &b, err);
    }
    if (st != DDPH_OK) {
        free(b.data);
        return st;
    }
    *data = b.data;
    *len = b.len;
    return DDPH_OK;
}

/* Every rank's part is of one save: of one job, and of the same call of
 * ddph_state_save_to_memory on every rank (a part another job left, or
 * taken at another step, would resume the ranks from different points,
 * with every part valid on its own). */
static ddph_status one_save(ddph_ctx *ctx, uint64_t id, ddph_err *err)
{
    int64_t v[2] = {(int64_t)id, -(int64_t)id};
    ddph_status st = ddph__ctl_allreduce_i64(ctx->control, v, 2, DDPH_MAX,
                                             err);
    if (st == DDPH_OK && v[0] != -v[1])
        st = ddph__fail(err, DDPH_ERR_MISMATCH,
                        "state_load_from_memory: the ranks' parts come from "
                        "different saves (another job's, or another call "
                        "of state_save_to_memory on some rank: every "
                        "rank's part must be taken by the same call on "
                        "every rank); refusing to mix them");
    return st;
}

ddph_status ddph__state_load_memory(ddph_ctx *ctx, const void *data,
                                    size_t len, ddph_err *err)
{
    char label[64];
    memory_label(ctx, label, sizeof label);
    const ddph_state_source src = {.name = label, .in_memory = 1};
    err->msg[0] = '\0';
    ddph_status st = ddph__state_between_steps(ctx, "state_load_from_memory",
                                               err);
    if (st == DDPH_OK && !data && len)
        st = ddph__fail(err, DDPH_ERR_INVALID,
                        "state_load_from_memory on rank %d: data is NULL "
                        "with len %zu (NULL goes only with len 0)",
                        ddph__rank(ctx), len);
    ddph_state_buf b = {0};
    if (st == DDPH_OK && len > ddph__state_largest(ctx))
        st = ddph__fail(err, DDPH_ERR_IO,
                        "%s: %zu bytes is more than %zu, the most the "
                        "hook state of this job's models can take",
                        label, len, ddph__state_largest(ctx));
    /* A copy: the hooks read from b, and b's length is trimmed while it is
     * validated; the caller's bytes stay as they were. */
    if (st == DDPH_OK && !(b.data = malloc(len ? len : 1)))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "%s: out of memory", label);
    uint64_t generation = 0, id = 0;
    if (st == DDPH_OK) {
        if (len)
            memcpy(b.data, data, len);
        b.len = len;
        st = ddph__state_parse_header(ctx, &src, &b, &generation, &id, err);
    }
    if (st == DDPH_OK) {
        b.pos = 0;
        st = ddph__state_validate(ctx, &src, generation, id, &b, err);
    }
    st = ddph__state_agree(ctx, st, err);
    if (st == DDPH_OK)
        st = one_save(ctx, id, err);
    st = ddph__state_apply(ctx, label, st, &b, err);
    free(b.data);
    return st;
}

/* A trainer's check that gathered parts belong together (the Python
 * bridge's state_dict), with no job: the layout stays state_format.c's. */
ddph_status ddph_state_save_id(const void *data, size_t len, uint64_t *id)
{
    if (!data || !id)
        return DDPH_ERR_INVALID;
    ddph_status st = ddph__state_intact_id(data, len, id);
    if (st != DDPH_OK)
        *id = 0;
    return st;
}
