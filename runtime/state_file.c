/* state_file.c: see state_file.h. */
#include "build-config.h"

#include "state_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define STATE_MAGIC "DDPHSTAT"
#define STATE_VERSION 1u

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

ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    buffer b = {0};
    ddph_status st = buf_write(&b, STATE_MAGIC, 8);
    if (!st)
        st = put_u32(&b, STATE_VERSION);
    if (!st)
        st = put_u32(&b, (uint32_t)ctx->nmodels);
    for (int i = 0; i < ctx->nmodels && st == DDPH_OK; i++) {
        ddph_model *m = ctx->models[i];
        if (!m->finalized) {
            st = ddph__fail(err, DDPH_ERR_STATE,
                            "state_save: model '%s' is not finalized", m->name);
            break;
        }
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        st = put_str(&b, m->name);
        if (!st)
            st = put_str(&b, api->name);
        if (!st)
            st = put_str(&b, api->version);
        if (!st)
            st = put_u64(&b, m->iteration);
        buffer payload = {0};
        if (!st && api->save) {
            m->hook->message[0] = '\0';
            st = api->save(m->hook->state, &m->hook->services, buf_write,
                           &payload);
            if (st)
                st = ddph__fail(err, st, "hook '%s' save failed on model '%s': %s",
                                api->name, m->name,
                                m->hook->message[0] ? m->hook->message
                                                    : ddph_strerror(st));
        }
        if (!st)
            st = put_u64(&b, payload.len);
        if (!st && payload.len)
            st = buf_write(&b, payload.data, payload.len);
        if (!st)
            st = put_u32(&b, (uint32_t)crc32(0L, payload.data,
                                             (uInt)payload.len));
        free(payload.data);
    }
    char *final = rank_path(path, ctx->mpi.world.rank);
    char *tmp = final ? malloc(strlen(final) + 8) : NULL;
    if (st == DDPH_OK && (!final || !tmp))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    if (st == DDPH_OK) {
        sprintf(tmp, "%s.tmp", final);
        FILE *f = fopen(tmp, "wb");
        if (!f)
            st = ddph__fail(err, DDPH_ERR_IO, "%s: %s", tmp, strerror(errno));
        else {
            int bad = fwrite(b.data, 1, b.len, f) != b.len;
            bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
            bad |= fclose(f) != 0;
            if (bad || rename(tmp, final) != 0) {
                st = ddph__fail(err, DDPH_ERR_IO, "%s: cannot write: %s",
                                final, strerror(errno));
                unlink(tmp);
            }
        }
    } else if (st != DDPH_OK && st != DDPH_ERR_NOMEM && !err->msg[0]) {
        ddph__fail(err, st, "state_save: %s", ddph_strerror(st));
    }
    free(tmp);
    free(final);
    free(b.data);
    return st;
}

ddph_status ddph__state_load(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    char *file = rank_path(path, ctx->mpi.world.rank);
    if (!file)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    buffer b = {0};
    FILE *f = fopen(file, "rb");
    ddph_status st = DDPH_OK;
    if (!f)
        st = ddph__fail(err, DDPH_ERR_IO, "%s: %s", file, strerror(errno));
    while (st == DDPH_OK) {
        unsigned char chunk[65536];
        size_t n = fread(chunk, 1, sizeof chunk, f);
        if (n && buf_write(&b, chunk, n) != DDPH_OK)
            st = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        if (n < sizeof chunk)
            break;
    }
    if (f)
        fclose(f);
    uint32_t version = 0, nmodels = 0;
    if (st == DDPH_OK &&
        (b.len < 8 || memcmp(b.data, STATE_MAGIC, 8) != 0 ||
         (b.pos = 8, !get_u32(&b, &version)) || version != STATE_VERSION ||
         !get_u32(&b, &nmodels)))
        st = ddph__fail(err, DDPH_ERR_IO,
                        "%s is not a ddphook state file of format version %u",
                        file, STATE_VERSION);
    if (st == DDPH_OK && nmodels != (uint32_t)ctx->nmodels)
        st = ddph__fail(err, DDPH_ERR_MISMATCH,
                        "%s holds %u models; this job has %d", file, nmodels,
                        ctx->nmodels);
    for (int i = 0; i < ctx->nmodels && st == DDPH_OK; i++) {
        ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        uint64_t iteration, len;
        uint32_t crc;
        if (!get_str_eq(&b, m->name) || !get_str_eq(&b, api->name) ||
            !get_str_eq(&b, api->version)) {
            st = ddph__fail(err, DDPH_ERR_MISMATCH,
                            "%s: model %d is not '%s' with hook '%s' %s", file,
                            i, m->name, api->name, api->version);
            break;
        }
        if (!get_u64(&b, &iteration) || !get_u64(&b, &len) ||
            b.len - b.pos < len + 4) {
            st = ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
            break;
        }
        buffer payload = {.data = b.data + b.pos, .len = (size_t)len};
        b.pos += (size_t)len;
        get_u32(&b, &crc);
        if (crc != (uint32_t)crc32(0L, payload.data, (uInt)payload.len)) {
            st = ddph__fail(err, DDPH_ERR_IO,
                            "%s: checksum mismatch in model '%s' (corrupt "
                            "file)",
                            file, m->name);
            break;
        }
        if (len && !api->load) {
            st = ddph__fail(err, DDPH_ERR_MISMATCH,
                            "%s: model '%s' has saved state but hook '%s' "
                            "cannot load state",
                            file, m->name, api->name);
            break;
        }
        if (api->load) {
            m->hook->message[0] = '\0';
            st = api->load(m->hook->state, &m->hook->services, buf_read,
                           &payload);
            if (st != DDPH_OK) {
                st = ddph__fail(err, st,
                                "%s: hook '%s' load failed on model '%s': %s",
                                file, api->name, m->name,
                                m->hook->message[0] ? m->hook->message
                                                    : ddph_strerror(st));
                break;
            }
        }
        m->iteration = iteration;
    }
    free(b.data);
    free(file);
    return st;
}
