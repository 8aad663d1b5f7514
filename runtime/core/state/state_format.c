/* state_format.c: the bytes of a state file (state_format.h). */
#include "build-config.h"

#include "core/state/state_format.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define STATE_MAGIC "DDPHSTAT"
#define STATE_VERSION 3u
/* Magic, version, world size, rank, generation, save id. */
/* Save ids are random below this, so that -id fits an int64. */
/* A state file larger than this is not one (the payloads are error
 * feedback and small matrices: far below it). */
#define STATE_MAX_BYTES ((size_t)1 << 36)

ddph_status ddph__state_buf_write(void *sink, const void *data, size_t n)
{
    ddph_state_buf *b = sink;
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

ddph_status ddph__state_buf_read(void *source, void *data, size_t n)
{
    ddph_state_buf *b = source;
    if (b->len - b->pos < n)
        return DDPH_ERR_IO;
    memcpy(data, b->data + b->pos, n);
    b->pos += n;
    return DDPH_OK;
}

static ddph_status put_u32(ddph_state_buf *b, uint32_t v)
{
    unsigned char x[4] = {v & 255, (v >> 8) & 255, (v >> 16) & 255, v >> 24};
    return ddph__state_buf_write(b, x, 4);
}

static ddph_status put_u64(ddph_state_buf *b, uint64_t v)
{
    ddph_status st = put_u32(b, (uint32_t)v);
    return st ? st : put_u32(b, (uint32_t)(v >> 32));
}

static ddph_status put_str(ddph_state_buf *b, const char *s)
{
    size_t n = strlen(s);
    ddph_status st = put_u32(b, (uint32_t)n);
    return st ? st : ddph__state_buf_write(b, s, n);
}

int ddph__state_get_u32(ddph_state_buf *b, uint32_t *v)
{
    unsigned char x[4];
    if (ddph__state_buf_read(b, x, 4))
        return 0;
    *v = x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 |
         (uint32_t)x[3] << 24;
    return 1;
}

int ddph__state_get_u64(ddph_state_buf *b, uint64_t *v)
{
    uint32_t lo, hi;
    if (!ddph__state_get_u32(b, &lo) || !ddph__state_get_u32(b, &hi))
        return 0;
    *v = lo | (uint64_t)hi << 32;
    return 1;
}

/* Reads a string and compares it with want. */
int ddph__state_get_str_eq(ddph_state_buf *b, const char *want)
{
    uint32_t n;
    if (!ddph__state_get_u32(b, &n) || b->len - b->pos < n)
        return 0;
    int eq = strlen(want) == n && memcmp(b->data + b->pos, want, n) == 0;
    b->pos += n;
    return eq;
}

ddph_status ddph__state_encode(ddph_ctx *ctx, const char *what,
                               uint64_t generation, uint64_t id,
                               ddph_state_buf *b, ddph_err *err)
{
    ddph_status st = ddph__state_buf_write(b, STATE_MAGIC, 8);
    if (!st)
        st = put_u32(b, STATE_VERSION);
    if (!st)
        st = put_u32(b, (uint32_t)ddph__size(ctx));
    if (!st)
        st = put_u32(b, (uint32_t)ddph__rank(ctx));
    if (!st)
        st = put_u64(b, generation);
    if (!st)
        st = put_u64(b, id);
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
         * would resume without it: refuse rather than save a state that
         * continues differently. */
        if (!st && !api->save && (api->flags & DDPH_PLUGIN_ERROR_FEEDBACK))
            st = ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                            "%s: hook '%s' on model '%s' declares "
                            "error feedback (DDPH_PLUGIN_ERROR_FEEDBACK) but "
                            "has no save/load: its error memory cannot be "
                            "saved, and a job resumed from this save would "
                            "continue differently; nothing was saved",
                            what, api->name, m->name);
        ddph_state_buf payload = {0};
        if (!st && api->save) {
            m->hook->message[0] = '\0';
            st = ddph__hook_status(m->hook, "save",
                                   api->save(m->hook->state,
                                             &m->hook->services, ddph__state_buf_write,
                                             &payload));
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
            st = ddph__state_buf_write(b, payload.data, payload.len);
        free(payload.data);
    }
    /* The checksum covers every byte before it, header included. */
    if (!st)
        st = put_u32(b, (uint32_t)crc32_z(0L, b->data, b->len));
    if (st == DDPH_ERR_NOMEM)
        return ddph__fail(err, st, "%s: out of memory", what);
    return st;
}

/* The largest file this job's layout allows: the header, each model's
 * names and bucket list, and a payload of at most STATE_BYTES_PER_ELEMENT
 * per gradient element plus STATE_BYTES_PER_BUCKET per bucket and
 * STATE_BYTES_PER_MODEL.  A larger file is refused before it is read. */
#define STATE_BYTES_PER_ELEMENT 64u  /* 16 four-byte values */
#define STATE_BYTES_PER_BUCKET 65536u
#define STATE_BYTES_PER_MODEL ((size_t)1 << 20)
size_t ddph__state_largest(const ddph_ctx *ctx)
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

/* What a damaged one is: "(corrupt or altered file)", "... bytes)". */
static const char *damaged_noun(const ddph_state_source *src)
{
    return src->in_memory ? "bytes" : "file";
}

/* The header's fields, read with no job to compare them with. */
typedef enum { HEADER_READ, HEADER_NOT_STATE, HEADER_TRUNCATED } header_read;
static header_read read_header(ddph_state_buf *b, uint32_t *world,
                               uint32_t *rank, uint64_t *generation,
                               uint64_t *id)
{
    uint32_t version = 0;
    if (b->len < 8 + 4 || memcmp(b->data, STATE_MAGIC, 8) != 0 ||
        (b->pos = 8, !ddph__state_get_u32(b, &version)) ||
        version != STATE_VERSION)
        return HEADER_NOT_STATE;
    if (!ddph__state_get_u32(b, world) || !ddph__state_get_u32(b, rank) ||
        !ddph__state_get_u64(b, generation) || !ddph__state_get_u64(b, id))
        return HEADER_TRUNCATED;
    return HEADER_READ;
}

/* Checks the header (the first DDPH__STATE_HEADER_BYTES of b) against this job. */
ddph_status ddph__state_parse_header(const ddph_ctx *ctx,
                                     const ddph_state_source *src,
                                     ddph_state_buf *b, uint64_t *generation,
                                     uint64_t *id, ddph_err *err)
{
    const char *file = src->name;
    uint32_t world = 0, rank = 0;
    header_read r = read_header(b, &world, &rank, generation, id);
    if (r == HEADER_NOT_STATE)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s is not a ddphook state %sof format version %u",
                          file, src->in_memory ? "" : "file ",
                          STATE_VERSION);
    if (r == HEADER_TRUNCATED)
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
    if (world != (uint32_t)ddph__size(ctx) ||
        rank != (uint32_t)ddph__rank(ctx))
        return ddph__fail(err, DDPH_ERR_MISMATCH,
                          "%s was saved by rank %u of %u ranks; this is rank "
                          "%d of %d",
                          file, rank, world, ddph__rank(ctx),
                          ddph__size(ctx));
    if (*generation > INT64_MAX || *id >= DDPH__STATE_ID_LIMIT)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: generation or save id out of range (corrupt "
                          "or forged %s)",
                          file, damaged_noun(src));
    return DDPH_OK;
}

ddph_status ddph__state_intact_id(const void *data, size_t len, uint64_t *id)
{
    ddph_state_buf b = {.data = (unsigned char *)data, .len = len};
    uint32_t world, rank, crc = 0;
    uint64_t generation;
    if (len < DDPH__STATE_HEADER_BYTES + 8 ||
        read_header(&b, &world, &rank, &generation, id) != HEADER_READ ||
        *id >= DDPH__STATE_ID_LIMIT)
        return DDPH_ERR_IO;
    b.pos = len - 4;
    ddph__state_get_u32(&b, &crc);
    return crc == (uint32_t)crc32_z(0L, b.data, len - 4) ? DDPH_OK
                                                          : DDPH_ERR_IO;
}

/* A file whose checksum does not match is damaged: it is skipped like
 * any refused file, so that a torn or corrupted newer save never hides an
 * intact older one.  Read in pieces: a state file may be large. */
ddph_status ddph__state_check_sum(int fd, const char *file, uint64_t size,
                             ddph_err *err)
{
    if (size < DDPH__STATE_HEADER_BYTES + 8)
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
    enum { PIECE = 1 << 20 };
    unsigned char *piece = malloc(PIECE), tail[4];
    if (!piece)
        return ddph__fail(err, DDPH_ERR_NOMEM, "%s: out of memory", file);
    uLong crc = crc32_z(0L, Z_NULL, 0);
    uint64_t body = size - 4, done = 0;
    int failed = 0; /* errno of a failed read */
    while (done < body) {
        size_t want = body - done < PIECE ? (size_t)(body - done) : PIECE;
        ssize_t r = pread(fd, piece, want, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            failed = r < 0 ? errno : 0;
            break;
        }
        crc = crc32_z(crc, piece, (size_t)r);
        done += (uint64_t)r;
    }
    free(piece);
    if (done < body || pread(fd, tail, 4, (off_t)body) != 4)
        return ddph__fail(err, DDPH_ERR_IO, "%s: %s", file,
                          failed ? strerror(failed) : "changed while read");
    ddph_state_buf b = {.data = tail, .len = 4};
    uint32_t stored = 0;
    ddph__state_get_u32(&b, &stored);
    if (stored != (uint32_t)crc)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: checksum mismatch (corrupt or altered file)",
                          file);
    return DDPH_OK;
}

/* A saved string for a message: cut to fit, "?" where b ends first. */
static void saved_str(ddph_state_buf *b, char *out, size_t cap)
{
    uint32_t n = 0;
    if (!ddph__state_get_u32(b, &n) || b->len - b->pos < n) {
        snprintf(out, cap, "?");
        b->pos = b->len;
        return;
    }
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1),
             (const char *)b->data + b->pos);
    b->pos += n;
}

/* The owner and mode checks of plugins, for state files: a save applies
 * them to the folder before writing, a load to the file it opens. */
/* Checks everything in this rank's file against this job and the chosen
 * slot's header, without touching any hook (so nothing is half loaded if
 * another rank's file is bad).  Leaves b->pos at the first model. */
ddph_status ddph__state_validate(ddph_ctx *ctx, const ddph_state_source *src,
                                 uint64_t want_generation, uint64_t want_id,
                                 ddph_state_buf *b, ddph_err *err)
{
    const char *file = src->name;
    uint32_t nmodels = 0, crc = 0;
    uint64_t generation = 0, id = 0;
    if (b->len < DDPH__STATE_HEADER_BYTES + 8)
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
    ddph_state_buf tail = {.data = b->data, .len = b->len, .pos = b->len - 4};
    ddph__state_get_u32(&tail, &crc);
    /* crc32_z: the whole file, whatever its size (crc32 takes a uInt). */
    if (crc != (uint32_t)crc32_z(0L, b->data, b->len - 4))
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: checksum mismatch (corrupt or altered %s)",
                          file, damaged_noun(src));
    b->len -= 4; /* the models end exactly at the checksum */
    ddph_status st = ddph__state_parse_header(ctx, src, b, &generation, &id, err);
    if (st != DDPH_OK)
        return st;
    if (generation != want_generation || id != want_id)
        return ddph__fail(err, DDPH_ERR_IO, "%s changed while it was read",
                          file);
    if (!ddph__state_get_u32(b, &nmodels))
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
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
        size_t at = b->pos;
        if (!ddph__state_get_str_eq(b, m->name) || !ddph__state_get_str_eq(b, api->name) ||
            !ddph__state_get_str_eq(b, api->version)) {
            char name[64], hook[64], version[32];
            b->pos = at;
            saved_str(b, name, sizeof name);
            saved_str(b, hook, sizeof hook);
            saved_str(b, version, sizeof version);
            return ddph__fail(err, DDPH_ERR_MISMATCH,
                              "%s: model %d holds the state of model '%s' "
                              "with hook '%s' %s; this job's is '%s' with "
                              "hook '%s' %s",
                              file, i, name, hook, version, m->name,
                              api->name, api->version);
        }
        if (!ddph__state_get_u64(b, &iteration) || !ddph__state_get_u32(b, &nbuckets))
            return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
        if (nbuckets != (uint32_t)m->nbuckets)
            return ddph__fail(err, DDPH_ERR_MISMATCH,
                              "%s: model '%s' was saved with %u buckets; this "
                              "job has %d (bucket_cap_mb or the parameters "
                              "differ; state saved by ddphook 0.6.0 or "
                              "earlier with the default caps needs "
                              "bucket_cap_mb = 25 and first_bucket_cap_mb "
                              "= 1)",
                              file, m->name, nbuckets, m->nbuckets);
        for (int k = 0; k < m->nbuckets; k++) {
            if (!ddph__state_get_u64(b, &numel))
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
        if (!ddph__state_get_u64(b, &len) || len > b->len - b->pos)
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

