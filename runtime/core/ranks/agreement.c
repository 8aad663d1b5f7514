/* agreement.c: the check at finalize that every rank built the same
 * model.  Each rank writes a canonical description (job settings that must
 * match, parameters, bucket layout, hook and options); a crc32 of it is
 * compared first (cheap); on a difference rank 0's text is broadcast, each
 * rank finds its first differing line, and the lowest such rank tells every
 * rank what differs.  The number and order of collectives is the same on
 * every rank whatever happens, so a mismatch can never hang.  What follows
 * a tab on a line names a thing for the message and is not compared (a
 * plugin file's path). */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/context.h"

static char *describe(const ddph_ctx *ctx, const ddph_model *m,
                      ddph_status local_status, const ddph_err *local_err,
                      size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    const ddph_config *c = &ctx->cfg;
    fprintf(f, "model %s\n", m->name);
    if (local_status != DDPH_OK) {
        /* Its own message reaches every rank through the diff. */
        fprintf(f, "finalize failed: %s\n", local_err->msg);
    }
    fprintf(f, "backend %s\n", ctx->comm.ops->name);
    fprintf(f, "bucket_cap_mb %.17g\n", c->bucket_cap_mb);
    fprintf(f, "first_bucket_cap_mb %.17g\n", c->first_bucket_cap_mb);
    fprintf(f, "gradient_as_bucket_view %d\n", c->gradient_as_bucket_view);
    fprintf(f, "shared_buckets %d\n", c->shared_buckets);
    fprintf(f, "check_finite %d\n", c->check_finite);
    /* Each of these decides whether a rank takes part in a collective. */
    fprintf(f, "check_collectives %d\n", c->check_collectives);
    fprintf(f, "broadcast_parameters %d\n", c->broadcast_parameters);
    fprintf(f, "check_replicas_every %d\n", c->check_replicas_every);
    fprintf(f, "join %d divide_by_initial_world_size %d\n", c->join,
            c->divide_by_initial_world_size);
    fprintf(f, "lanes %d\n", m->nlanes);
    fprintf(f, "accumulate steps %d sync_each_batch %d\n", m->accumulate_steps,
            c->sync_each_batch);
    fprintf(f, "parameters %d\n", m->nparams);
    for (int i = 0; i < m->nparams; i++) {
        const ddph_param *p = &m->params[i];
        fprintf(f, "param %d %s %s %s shape", i, p->name,
                ddph__dtype_name(p->dtype), ddph__device_name(p->device));
        for (int d = 0; d < p->ndim; d++)
            fprintf(f, "%s%lld", d ? "x" : " ", (long long)p->shape[d]);
        fputc('\n', f);
    }
    if (local_status == DDPH_OK) {
        fprintf(f, "buckets %d\n", m->nbuckets);
        for (int b = 0; b < m->nbuckets; b++) {
            fprintf(f, "bucket %d:", b);
            for (int j = 0; j < m->buckets[b].nparams; j++)
                fprintf(f, " %d", m->buckets[b].params[j]);
            fputc('\n', f);
        }
        ddph__hook_describe(m->hook, f);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The compared part of the line at s, of length full: up to a tab. */
static size_t compared_len(const char *s, size_t full)
{
    const char *tab = memchr(s, '\t', full);
    return tab ? (size_t)(tab - s) : full;
}

/* The text without its uncompared parts: what the ranks' digests cover. */
static uLong compared_crc(const char *text, size_t len)
{
    uLong crc = crc32_z(0L, Z_NULL, 0);
    while (len > 0) {
        const char *nl = memchr(text, '\n', len);
        size_t full = nl ? (size_t)(nl - text) + 1 : len;
        crc = crc32_z(crc, (const Bytef *)text, compared_len(text, full));
        crc = crc32_z(crc, (const Bytef *)"\n", 1);
        text += full;
        len -= full;
    }
    return crc;
}

/* First line where a and b differ: copies both versions into out. */
static int first_difference(const char *a, const char *b, int rank,
                            char *out, size_t len)
{
    int line = 1;
    for (;;) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a);
        size_t lb = eb ? (size_t)(eb - b) : strlen(b);
        size_t ca = compared_len(a, la), cb = compared_len(b, lb);
        if (ca != cb || memcmp(a, b, ca) != 0) {
            snprintf(out, len,
                     "ranks disagree on the configuration: rank 0 has "
                     "'%.*s' where rank %d has '%.*s'",
                     (int)(la < 300 ? la : 300), la ? a : "(nothing)", rank,
                     (int)(lb < 300 ? lb : 300), lb ? b : "(nothing)");
            return 1;
        }
        if (!ea || !eb)
            break;
        a = ea + 1;
        b = eb + 1;
        line++;
    }
    return 0;
}

ddph_status ddph__agree(ddph_ctx *ctx, ddph_model *m, ddph_status local_status,
                        const ddph_err *local_err, ddph_err *err)
{
    int rank = ddph__rank(ctx), size = ddph__size(ctx);
    size_t len = 0;
    char *mine = describe(ctx, m, local_status, local_err, &len);
    if (!mine)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    int64_t crc[2];
    crc[0] = (int64_t)compared_crc(mine, len);
    crc[1] = -crc[0];
    ddph_status st = ddph__ctl_allreduce_i64(ctx->control, crc, 2, DDPH_MAX,
                                              err);
    if (st != DDPH_OK || crc[0] == -crc[1]) { /* max == min: all equal */
        free(mine);
        if (st != DDPH_OK)
            ddph__err_prefix(err, "model '%s': cross-rank check at finalize",
                             m->name);
        return st;
    }
    /* They differ: rank 0's text goes to everyone. */
    int64_t len0 = (int64_t)len;
    st = ddph__ctl_bcast_bytes(ctx->control, &len0, sizeof len0, 0,
                                   err);
    char *theirs = st == DDPH_OK ? malloc((size_t)len0 + 1) : NULL;
    if (st == DDPH_OK && !theirs)
        st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    if (st == DDPH_OK) {
        if (rank == 0)
            memcpy(theirs, mine, len);
        st = ddph__ctl_bcast_bytes(ctx->control, theirs,
                                       (size_t)len0, 0, err);
        theirs[len0] = '\0';
    }
    char diff[1024] = "";
    int64_t first_rank = size;
    if (st == DDPH_OK && first_difference(theirs, mine, rank, diff,
                                          sizeof diff))
        first_rank = rank;
    if (st == DDPH_OK)
        st = ddph__ctl_allreduce_i64(ctx->control, &first_rank, 1,
                                          DDPH_MIN, err);
    if (st == DDPH_OK && first_rank < size)
        st = ddph__ctl_bcast_bytes(ctx->control, diff, sizeof diff,
                                       (int)first_rank, err);
    free(theirs);
    free(mine);
    if (st != DDPH_OK) {
        ddph__err_prefix(err, "model '%s': cross-rank check at finalize",
                         m->name);
        return st;
    }
    return ddph__fail(err, DDPH_ERR_MISMATCH, "model '%s': %s", m->name, diff);
}
