/* replicas.c: see replicas.h. */
#include "build-config.h"

#include "core/ranks/replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>


/* Parameters that take part: memory given, in host memory. */
static int takes_part(const ddph_param *p)
{
    return p->data && p->device == DDPH_CPU;
}

int ddph__replicas_count(const ddph_model *m)
{
    int n = 0;
    for (int i = 0; i < m->nparams; i++)
        n += takes_part(&m->params[i]);
    return n;
}

ddph_status ddph__replicas_broadcast(ddph_model *m, int root, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    /* The same parameters on every rank, or the broadcasts below would
     * pair up wrongly: a digest of which ones take part. */
    int64_t parts = 0, mix[2];
    for (int i = 0; i < m->nparams; i++)
        if (takes_part(&m->params[i]))
            parts += ddph__digest_term((size_t)i);
    mix[0] = parts;
    mix[1] = -parts;
    /* (Through a copy: an abandoned collective must not write into this
     * frame later.) */
    ddph_status st = ddph__ctl_allreduce_i64(ctx->control, mix, 2, DDPH_MAX,
                                             err);
    if (st != DDPH_OK)
        return st;
    if (mix[0] != -mix[1])
        return ddph__fail(err, DDPH_ERR_MISMATCH,
                          "model '%s': the ranks gave parameter memory "
                          "(ddph_model_set_param_data) for different "
                          "parameters; give the same ones on every rank",
                          m->name);
    for (int i = 0; i < m->nparams && st == DDPH_OK; i++) {
        ddph_param *p = &m->params[i];
        if (takes_part(p))
            st = ctx->host.ops->broadcast(
                ctx->host.self, ctx->job.ops->trainer_group(ctx->job.state),
                p->data, p->numel * ddph__dtype_size(p->dtype), DDPH_U8, root,
                err);
    }
    if (st != DDPH_OK)
        ddph__err_prefix(err, "model '%s': broadcasting rank %d's parameters",
                         m->name, root);
    return st;
}

/* crc32 of n bytes, in pieces zlib's uInt can hold. */
static uint32_t checksum(const unsigned char *data, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, data, piece);
        data += piece;
        n -= piece;
    }
    return (uint32_t)c;
}

ddph_status ddph__replicas_check(ddph_model *m, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    int world = ddph__size(ctx), n = m->nparams;
    int32_t *mine = calloc((size_t)n + 1, sizeof *mine);
    int32_t *all = calloc(((size_t)n + 1) * (size_t)world, sizeof *all);
    ddph_status st = mine && all ? DDPH_OK
                                 : ddph__fail(err, DDPH_ERR_NOMEM,
                                              "out of memory");
    for (int i = 0; i < n && st == DDPH_OK; i++) {
        const ddph_param *p = &m->params[i];
        size_t bytes = p->numel * ddph__dtype_size(p->dtype);
        if (takes_part(p))
            mine[i] = (int32_t)checksum(p->data, bytes);
    }
    if (st == DDPH_OK &&
        (st = ctx->host.ops->allgather(
             ctx->host.self, ctx->job.ops->trainer_group(ctx->job.state), mine,
             all, (size_t)n + 1, DDPH_I32, err)) != DDPH_OK) {
        /* abandoned: a late peer may still write into them */
        ddph__err_prefix(err, "model '%s': replica check", m->name);
        return st;
    }
    for (int i = 0; i < n && st == DDPH_OK; i++) {
        char ranks[256] = "";
        size_t used = 0;
        int differ = 0;
        for (int r = 1; r < world; r++)
            if (all[(size_t)r * ((size_t)n + 1) + (size_t)i] != all[i]) {
                if (used + 16 < sizeof ranks)
                    used += (size_t)snprintf(ranks + used, sizeof ranks - used,
                                             "%s%d", differ ? ", " : "", r);
                differ++;
            }
        if (differ)
            st = ddph__fail(err, DDPH_ERR_MISMATCH,
                            "model '%s': the replicas differ after %llu "
                            "synchronised steps: parameter %d ('%s') on rank%s "
                            "%s is not rank 0's (crc32 of its values; "
                            "[runtime] check_replicas_every)",
                            m->name, (unsigned long long)m->iteration, i,
                            m->params[i].name, differ == 1 ? "" : "s", ranks);
    }
    free(mine);
    free(all);
    return st;
}
