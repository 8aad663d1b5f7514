/* state_file.c: see state_file.h. */
#include "build-config.h"

#include "core/state_file.h"

#include "support/safe_file.h"

#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define STATE_MAGIC "DDPHSTAT"
#define STATE_VERSION 2u
/* A state file larger than this is not one (the payloads are error
 * feedback and small matrices: far below it). */
#define STATE_MAX_BYTES ((size_t)1 << 36)

typedef struct buffer {
    unsigned char *data;
    size_t len, cap, pos;
} buffer;

static ddph_status buf_write(void *sink, const void *data, size_t n)
{
    buffer *b = sink;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d)
            return DDPH_ERR_NOMEM;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    return DDPH_OK;
}

static ddph_status buf_read(void *source, void *data, size_t n)
{
    buffer *b = source;
    if (b->len - b->pos < n)
        return DDPH_ERR_IO;
    memcpy(data, b->data + b->pos, n);
    b->pos += n;
    return DDPH_OK;
}

static ddph_status put_u32(buffer *b, uint32_t v)
{
    unsigned char x[4] = {v & 255, (v >> 8) & 255, (v >> 16) & 255, v >> 24};
    return buf_write(b, x, 4);
}

static ddph_status put_u64(buffer *b, uint64_t v)
{
    ddph_status st = put_u32(b, (uint32_t)v);
    return st ? st : put_u32(b, (uint32_t)(v >> 32));
}

static ddph_status put_str(buffer *b, const char *s)
{
    size_t n = strlen(s);
    ddph_status st = put_u32(b, (uint32_t)n);
    return st ? st : buf_write(b, s, n);
}

static int get_u32(buffer *b, uint32_t *v)
{
    unsigned char x[4];
    if (buf_read(b, x, 4))
        return 0;
    *v = x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 |
         (uint32_t)x[3] << 24;
    return 1;
}

static int get_u64(buffer *b, uint64_t *v)
{
    uint32_t lo, hi;
    if (!get_u32(b, &lo) || !get_u32(b, &hi))
        return 0;
    *v = lo | (uint64_t)hi << 32;
    return 1;
}

/* Reads a string and compares it with want. */
static int get_str_eq(buffer *b, const char *want)
{
    uint32_t n;
    if (!get_u32(b, &n) || b->len - b->pos < n)
        return 0;
    int eq = strlen(want) == n && memcmp(b->data + b->pos, want, n) == 0;
    b->pos += n;
    return eq;
}

static char *rank_path(const char *path, int rank)
{
    size_t n = strlen(path) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.rank%d", path, rank);
    return p;
}

/* Every rank's share of one save or load succeeded, or every rank fails
 * with the first failing rank's message. */
static ddph_status agree(ddph_ctx *ctx, ddph_status st, ddph_err *err)
{
    ddph_err local = *err;
    return ddph__mpi_agree(&ctx->mpi, st, st != DDPH_OK ? local.msg : NULL,
                           err);
}

/* Saving or loading hook state while buckets are in flight races with the
 * communication thread; inside an accumulation window it would resume
 * with a different sync schedule. */
static ddph_status check_between_steps(ddph_ctx *ctx, const char *what,
                                       ddph_err *err)
{
    if (ctx->in_step)
        return ddph__fail(err, DDPH_ERR_STATE,
                          "%s between ddph_step_begin and ddph_step_end "
                          "(call it between steps)",
                          what);
    for (int i = 0; i < ctx->nmodels; i++) {
        ddph_model *m = ctx->models[i];
        if (!m->finalized)
            return ddph__fail(err, DDPH_ERR_STATE,
                              "%s: model '%s' is not finalized", what,
                              m->name);
        if (m->window > 0)
            return ddph__fail(err, DDPH_ERR_STATE,
                              "%s inside an accumulation window of model "
                              "'%s' (%d backward pass%s not synchronised): "
                              "call it after a synchronising step",
                              what, m->name, m->window,
                              m->window == 1 ? "" : "es");
    }
    return DDPH_OK;
}

static ddph_status encode(ddph_ctx *ctx, uint64_t generation, buffer *b,
                          ddph_err *err)
{
    ddph_status st = buf_write(b, STATE_MAGIC, 8);
    if (!st)
        st = put_u32(b, STATE_VERSION);
    if (!st)
        st = put_u32(b, (uint32_t)ctx->mpi.world.size);
    if (!st)
        st = put_u32(b, (uint32_t)ctx->mpi.world.rank);
    if (!st)
        st = put_u64(b, generation);
    if (!st)
        st = put_u32(b, (uint32_t)ctx->nmodels);
    for (int i = 0; i < ctx->nmodels && st == DDPH_OK; i++) {
        ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        st = put_str(b, m->name);
        if (!st)
            st = put_str(b, api->name);
        if (!st)
            st = put_str(b, api->version);
        if (!st)
            st = put_u64(b, m->iteration);
        /* The layout the state was made for (PowerSGD's is per bucket). */
        if (!st)
            st = put_u32(b, (uint32_t)m->nbuckets);
        for (int k = 0; k < m->nbuckets && st == DDPH_OK; k++)
            st = put_u64(b, m->buckets[k].numel);
        /* A hook that keeps what it did not send but cannot save it
         * would resume without it: refuse rather than write a file that
         * continues differently. */
        if (!st && !api->save && (api->flags & DDPH_PLUGIN_ERROR_FEEDBACK))
            st = ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                            "state_save: hook '%s' on model '%s' declares "
                            "error feedback (DDPH_PLUGIN_ERROR_FEEDBACK) but "
                            "has no save/load: its error memory cannot be "
                            "saved, and a job resumed from this file would "
                            "continue differently; nothing was written",
                            api->name, m->name);
        buffer payload = {0};
        if (!st && api->save) {
            m->hook->message[0] = '\0';
            st = api->save(m->hook->state, &m->hook->services, buf_write,
                           &payload);
            if (st)
                st = ddph__fail(err, st,
                                "hook '%s' save failed on model '%s': %s",
                                api->name, m->name,
                                m->hook->message[0] ? m->hook->message
                                                    : ddph_strerror(st));
        }
        if (!st)
            st = put_u64(b, payload.len);
        if (!st && payload.len)
            st = buf_write(b, payload.data, payload.len);
        free(payload.data);
    }
    /* The checksum covers every byte before it, header included. */
    if (!st)
        st = put_u32(b, (uint32_t)crc32(0L, b->data, (uInt)b->len));
    if (st == DDPH_ERR_NOMEM)
        return ddph__fail(err, st, "state_save: out of memory");
    return st;
}

ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    err->msg[0] = '\0';
    ddph_status st = check_between_steps(ctx, "state_save", err);
    /* One generation for every rank's file of this save: a load refuses a
     * set of files from different saves. */
    uint64_t generation = 0;
    if (ctx->mpi.world.rank == 0 &&
        getrandom(&generation, sizeof generation, 0) != sizeof generation)
        generation = (uint64_t)ddph__now() * 1000003u ^ (uint64_t)getpid();
    ddph_err berr;
    ddph_status bst = ddph__mpi_bcast_bytes(&ctx->mpi, &generation,
                                            sizeof generation, 0, &berr);
    if (bst != DDPH_OK)
        return ddph__fail(err, bst, "%s", berr.msg);
    buffer b = {0};
    if (st == DDPH_OK)
        st = encode(ctx, generation, &b, err);
    char *final = rank_path(path, ctx->mpi.world.rank);
    if (st == DDPH_OK && !final)
        st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    if (st == DDPH_OK)
        st = ddph__file_write_atomic(final, b.data, b.len, "state file", err);
    free(final);
    free(b.data);
    return agree(ctx, st, err);
}

/* The largest file this job's layout allows: the header, each model's
 * names and bucket list, and a payload of at most STATE_BYTES_PER_ELEMENT
 * per gradient element plus STATE_BYTES_PER_BUCKET per bucket and
 * STATE_BYTES_PER_MODEL.  A larger file is refused before it is read. */
#define STATE_BYTES_PER_ELEMENT 64u  /* 16 four-byte values */
#define STATE_BYTES_PER_BUCKET 65536u
#define STATE_BYTES_PER_MODEL ((size_t)1 << 20)
static size_t largest_state_file(const ddph_ctx *ctx)
{
    size_t total = 64;
    for (int i = 0; i < ctx->nmodels; i++) {
        const ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        total += 64 + strlen(m->name) + strlen(api->name) +
                 strlen(api->version) + STATE_BYTES_PER_MODEL;
        for (int k = 0; k < m->nbuckets; k++)
            total += 8 + STATE_BYTES_PER_BUCKET +
                     STATE_BYTES_PER_ELEMENT * m->buckets[k].numel;
    }
    return total < STATE_MAX_BYTES ? total : STATE_MAX_BYTES;
}

/* Checks everything in this rank's file against this job, without
 * touching any hook (so nothing is half loaded if another rank's file is
 * bad).  Leaves b->pos at the first model and *generation set. */
static ddph_status validate(ddph_ctx *ctx, const char *file, buffer *b,
                            uint64_t *generation, ddph_err *err)
{
    uint32_t version = 0, world = 0, rank = 0, nmodels = 0, crc = 0;
    if (b->len < 8 + 4 || memcmp(b->data, STATE_MAGIC, 8) != 0 ||
        (b->pos = 8, !get_u32(b, &version)) || version != STATE_VERSION)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s is not a ddphook state file of format version "
                          "%u",
                          file, STATE_VERSION);
    buffer tail = {.data = b->data, .len = b->len, .pos = b->len - 4};
    get_u32(&tail, &crc);
    if (b->len < 36 || crc != (uint32_t)crc32(0L, b->data, (uInt)(b->len - 4)))
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: checksum mismatch (corrupt or altered file)",
                          file);
    b->len -= 4; /* the models end exactly at the checksum */
    if (!get_u32(b, &world) || !get_u32(b, &rank) || !get_u64(b, generation) ||
        !get_u32(b, &nmodels))
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
    if (world != (uint32_t)ctx->mpi.world.size || rank != (uint32_t)ctx->mpi.world.rank)
        return ddph__fail(err, DDPH_ERR_MISMATCH,
                          "%s was saved by rank %u of %u ranks; this is rank "
                          "%d of %d",
                          file, rank, world, ctx->mpi.world.rank,
                          ctx->mpi.world.size);
    if (nmodels != (uint32_t)ctx->nmodels)
        return ddph__fail(err, DDPH_ERR_MISMATCH,
                          "%s holds %u models; this job has %d", file, nmodels,
                          ctx->nmodels);
    size_t first = b->pos;
    for (int i = 0; i < ctx->nmodels; i++) {
        ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        uint64_t iteration, len, numel;
        uint32_t nbuckets;
        if (!get_str_eq(b, m->name) || !get_str_eq(b, api->name) ||
            !get_str_eq(b, api->version))
            return ddph__fail(err, DDPH_ERR_MISMATCH,
                              "%s: model %d is not '%s' with hook '%s' %s",
                              file, i, m->name, api->name, api->version);
        if (!get_u64(b, &iteration) || !get_u32(b, &nbuckets))
            return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
        if (nbuckets != (uint32_t)m->nbuckets)
            return ddph__fail(err, DDPH_ERR_MISMATCH,
                              "%s: model '%s' was saved with %u buckets; this "
                              "job has %d (bucket_cap_mb or the parameters "
                              "differ)",
                              file, m->name, nbuckets, m->nbuckets);
        for (int k = 0; k < m->nbuckets; k++) {
            if (!get_u64(b, &numel))
                return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
            if (numel != m->buckets[k].numel)
                return ddph__fail(err, DDPH_ERR_MISMATCH,
                                  "%s: model '%s' bucket %d held %llu "
                                  "elements when saved; here it holds %zu",
                                  file, m->name, k,
                                  (unsigned long long)numel,
                                  m->buckets[k].numel);
        }
        /* len is the file's word: compare without adding to it. */
        if (!get_u64(b, &len) || len > b->len - b->pos)
            return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
        if (len && !api->load)
            return ddph__fail(err, DDPH_ERR_MISMATCH,
                              "%s: model '%s' has saved state but hook '%s' "
                              "cannot load state",
                              file, m->name, api->name);
        b->pos += (size_t)len;
    }
    if (b->pos != b->len)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: %zu unexpected bytes after the last model",
                          file, b->len - b->pos);
    b->pos = first;
    return DDPH_OK;
}

ddph_status ddph__state_load(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    err->msg[0] = '\0';
    ddph_status st = check_between_steps(ctx, "state_load", err);
    char *file = rank_path(path, ctx->mpi.world.rank);
    if (st == DDPH_OK && !file)
        st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    buffer b = {0};
    uint64_t generation = 0;
    if (st == DDPH_OK)
        st = ddph__file_read_regular(file, largest_state_file(ctx),
                                     "a state file of this job's models "
                                     "can hold",
                                     &b.data, &b.len, err);
    if (st == DDPH_OK)
        st = validate(ctx, file, &b, &generation, err);
    st = agree(ctx, st, err);
    /* Every rank's file must come from the same save. */
    if (st == DDPH_OK) {
        int64_t g[2] = {(int64_t)(generation >> 1), -(int64_t)(generation >> 1)};
        st = ddph__mpi_allreduce_i64(&ctx->mpi, g, 2, DDPH_MAX, err);
        if (st == DDPH_OK && g[0] != -g[1])
            st = ddph__fail(err, DDPH_ERR_MISMATCH,
                            "%s.rank*: the ranks' files come from different "
                            "saves (a save failed or was interrupted on some "
                            "rank); refusing to mix them",
                            path);
    }
    /* All or nothing on every rank: each hook's state as it is now is
     * kept (its own save) until every rank has loaded every model; if any
     * rank failed, every rank puts its kept states back. */
    buffer *kept = calloc((size_t)ctx->nmodels + 1, sizeof *kept);
    uint64_t *kept_iteration = calloc((size_t)ctx->nmodels + 1,
                                      sizeof *kept_iteration);
    if (st == DDPH_OK && (!kept || !kept_iteration))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "state_load: out of memory");
    int touched = 0; /* models whose hooks load() was called */
    for (int i = 0; kept_iteration && i < ctx->nmodels; i++)
        kept_iteration[i] = ctx->models[i]->iteration;
    for (int i = 0; i < ctx->nmodels && st == DDPH_OK; i++) {
        ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        uint64_t iteration = 0, len = 0, numel;
        uint32_t nbuckets = 0;
        get_str_eq(&b, m->name);
        get_str_eq(&b, api->name);
        get_str_eq(&b, api->version);
        get_u64(&b, &iteration);
        get_u32(&b, &nbuckets);
        for (uint32_t k = 0; k < nbuckets; k++)
            get_u64(&b, &numel);
        get_u64(&b, &len);
        buffer payload = {.data = b.data + b.pos, .len = (size_t)len};
        b.pos += (size_t)len;
        if (api->load) {
            m->hook->message[0] = '\0';
            st = api->save(m->hook->state, &m->hook->services, buf_write,
                           &kept[i]);
            if (st != DDPH_OK) {
                st = ddph__fail(err, st,
                                "state_load: hook '%s' could not keep model "
                                "'%s''s current state (nothing was loaded): "
                                "%s",
                                api->name, m->name,
                                m->hook->message[0] ? m->hook->message
                                                    : ddph_strerror(st));
                break;
            }
            touched = i + 1;
            m->hook->message[0] = '\0';
            st = api->load(m->hook->state, &m->hook->services, buf_read,
                           &payload);
            if (st != DDPH_OK)
                st = ddph__fail(err, st,
                                "%s: hook '%s' load failed on model '%s': %s",
                                file, api->name, m->name,
                                m->hook->message[0] ? m->hook->message
                                                    : ddph_strerror(st));
            /* What save wrote, load reads: bytes left over mean the
             * counts inside the payload do not describe it. */
            else if (payload.pos != payload.len)
                st = ddph__fail(err, DDPH_ERR_IO,
                                "%s: hook '%s' read %zu of the %zu bytes of "
                                "model '%s''s saved state (corrupt or forged "
                                "counts)",
                                file, api->name, payload.pos, payload.len,
                                m->name);
        }
        if (st == DDPH_OK)
            m->iteration = iteration;
    }
    st = agree(ctx, st, err);
    for (int i = 0; st != DDPH_OK && kept_iteration && i < ctx->nmodels; i++)
        ctx->models[i]->iteration = kept_iteration[i];
    for (int i = 0; st != DDPH_OK && i < touched; i++) {
        ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        if (!api->load)
            continue;
        kept[i].pos = 0;
        m->hook->message[0] = '\0';
        if (api->load(m->hook->state, &m->hook->services, buf_read,
                      &kept[i]) != DDPH_OK)
            ddph__err_prefix(err,
                             "model '%s': hook '%s' could not put its state "
                             "back after the failed load (%s); do not "
                             "continue this job",
                             m->name, api->name,
                             m->hook->message[0] ? m->hook->message : "?");
    }
    for (int i = 0; kept && i < ctx->nmodels; i++)
        free(kept[i].data);
    free(kept);
    free(kept_iteration);
    free(b.data);
    free(file);
    return st;
}
