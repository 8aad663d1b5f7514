/* state_file.c: see state_file.h. */
#include "build-config.h"

#include "core/state_file.h"

#include "support/safe_open.h"
#include "support/safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define STATE_MAGIC "DDPHSTAT"
#define STATE_VERSION 3u
/* Magic, version, world size, rank, generation, save id. */
#define STATE_HEADER_BYTES 36u
/* Save ids are random below this, so that -id fits an int64. */
#define STATE_ID_LIMIT ((uint64_t)1 << 62)
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

static char *rank_path(const char *path, int rank, const char *suffix)
{
    size_t n = strlen(path) + strlen(suffix) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.rank%d%s", path, rank, suffix);
    return p;
}

/* Every rank's share of one save or load succeeded, or every rank fails
 * with the first failing rank's message. */
static ddph_status agree(ddph_ctx *ctx, ddph_status st, ddph_err *err)
{
    ddph_err local = *err;
    return ddph__ctl_agree(ctx->control, st, st != DDPH_OK ? local.msg : NULL,
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

static ddph_status encode(ddph_ctx *ctx, uint64_t generation, uint64_t id,
                          buffer *b, ddph_err *err)
{
    ddph_status st = buf_write(b, STATE_MAGIC, 8);
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
            st = ddph__hook_status(m->hook, "save",
                                   api->save(m->hook->state,
                                             &m->hook->services, buf_write,
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
            st = buf_write(b, payload.data, payload.len);
        free(payload.data);
    }
    /* The checksum covers every byte before it, header included. */
    if (!st)
        st = put_u32(b, (uint32_t)crc32_z(0L, b->data, b->len));
    if (st == DDPH_ERR_NOMEM)
        return ddph__fail(err, st, "state_save: out of memory");
    return st;
}

/* The largest file this job's layout allows: the header, each model's
 * names and bucket list, and a payload of at most STATE_BYTES_PER_ELEMENT
 * per gradient element plus STATE_BYTES_PER_BUCKET per bucket and
 * STATE_BYTES_PER_MODEL.  A larger file is refused before it is read. */
#define STATE_BYTES_PER_ELEMENT 64u  /* 16 four-byte values */
#define STATE_BYTES_PER_BUCKET 65536u
#define STATE_BYTES_PER_MODEL ((size_t)1 << 20)
#define STATE_LIMIT_WHY "a state file of this job's models can hold"
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

/* ---- the files of one rank ----------------------------------------------
 * PATH.rank<R> holds the last committed save, PATH.rank<R>.next a save
 * that is written but perhaps not committed on every rank.  A save writes
 * .next on every rank (synced, folder too), agrees that every rank did,
 * and only then renames .next over PATH.rank<R>: at every moment each rank
 * holds the newest save that every rank completed, in one of its two
 * files.  A load takes the newest generation that every rank holds. */
enum { SLOT_FINAL, SLOT_NEXT, NSLOTS };

typedef struct slot {
    char *path;
    int fd; /* -1: absent or refused */
    uint64_t generation, id;
} slot;

typedef struct rank_set {
    slot s[NSLOTS];
    ddph_status st; /* the first reason a present file was refused */
    ddph_err err;
    int absent; /* neither file is there (st says so) */
    char *lock_path; /* PATH.rank<R>.lock: held by a save */
    int lock_fd;
} rank_set;

/* Checks the header (the first STATE_HEADER_BYTES of b) against this job. */
static ddph_status parse_header(const ddph_ctx *ctx, const char *file,
                                buffer *b, uint64_t *generation, uint64_t *id,
                                ddph_err *err)
{
    uint32_t version = 0, world = 0, rank = 0;
    if (b->len < 8 + 4 || memcmp(b->data, STATE_MAGIC, 8) != 0 ||
        (b->pos = 8, !get_u32(b, &version)) || version != STATE_VERSION)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s is not a ddphook state file of format version "
                          "%u",
                          file, STATE_VERSION);
    if (!get_u32(b, &world) || !get_u32(b, &rank) ||
        !get_u64(b, generation) || !get_u64(b, id))
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
    if (world != (uint32_t)ddph__size(ctx) ||
        rank != (uint32_t)ddph__rank(ctx))
        return ddph__fail(err, DDPH_ERR_MISMATCH,
                          "%s was saved by rank %u of %u ranks; this is rank "
                          "%d of %d",
                          file, rank, world, ddph__rank(ctx),
                          ddph__size(ctx));
    if (*generation > INT64_MAX || *id >= STATE_ID_LIMIT)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: generation or save id out of range (corrupt "
                          "or forged file)",
                          file);
    return DDPH_OK;
}

/* A file whose checksum does not match is damaged: it is skipped like
 * any refused file, so that a torn or corrupted newer save never hides an
 * intact older one.  Read in pieces: a state file may be large. */
static ddph_status check_sum(int fd, const char *file, uint64_t size,
                             ddph_err *err)
{
    if (size < STATE_HEADER_BYTES + 8)
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
    buffer b = {.data = tail, .len = 4};
    uint32_t stored = 0;
    get_u32(&b, &stored);
    if (stored != (uint32_t)crc)
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: checksum mismatch (corrupt or altered file)",
                          file);
    return DDPH_OK;
}

/* The owner and mode checks of plugins, for state files: a save applies
 * them to the folder before writing, a load to the file it opens. */
static ddph_trust state_trust(const ddph_ctx *ctx)
{
    return (ddph_trust){.kind = "state file",
                        .escape = "allow_insecure_state",
                        .check = !ctx->cfg.allow_insecure_state,
                        .final_link = 0};
}

static void set_refuse(rank_set *set, ddph_status st, const ddph_err *e)
{
    if (set->st == DDPH_OK) {
        set->st = st;
        set->err = *e;
    }
}

/* This rank's file names, nothing opened. */
static ddph_status set_init(const ddph_ctx *ctx, const char *path,
                            rank_set *set)
{
    static const char *const suffix[NSLOTS] = {"", ".next"};
    memset(set, 0, sizeof *set);
    set->lock_fd = -1;
    for (int i = 0; i < NSLOTS; i++) {
        set->s[i].fd = -1;
        if (!(set->s[i].path = rank_path(path, ddph__rank(ctx),
                                         suffix[i])))
            return DDPH_ERR_NOMEM;
    }
    set->lock_path = rank_path(path, ddph__rank(ctx), ".lock");
    return set->lock_path ? DDPH_OK : DDPH_ERR_NOMEM;
}

/* Opens this rank's two files, if present, with the owner and mode checks
 * of plugins (unless allow_insecure_state), reads their headers and
 * verifies their checksums.  A refused or damaged file is closed and its
 * reason kept in set->st. */
static void scan(ddph_ctx *ctx, rank_set *set)
{
    const ddph_trust trust = state_trust(ctx);
    int present = 0;
    for (int i = 0; i < NSLOTS; i++) {
        slot *sl = &set->s[i];
        struct stat sb;
        if (lstat(sl->path, &sb) != 0 && errno == ENOENT)
            continue;
        present = 1;
        ddph_err e;
        ddph_status st = ddph__safe_open_as(&trust, sl->path, &sl->fd, &e);
        if (st != DDPH_OK) {
            set_refuse(set, st == DDPH_ERR_INSECURE ? st : DDPH_ERR_IO, &e);
            continue;
        }
        unsigned char head[STATE_HEADER_BYTES];
        ssize_t n = 0;
        if (fstat(sl->fd, &sb) != 0 ||
            (uint64_t)sb.st_size > largest_state_file(ctx))
            st = ddph__fail(&e, DDPH_ERR_IO,
                            "%s: %lld bytes is more than %zu, the most %s "
                            "(refused before reading)",
                            sl->path, (long long)sb.st_size,
                            largest_state_file(ctx), STATE_LIMIT_WHY);
        else
            n = pread(sl->fd, head, sizeof head, 0);
        buffer b = {.data = head, .len = n > 0 ? (size_t)n : 0};
        if (st == DDPH_OK)
            st = parse_header(ctx, sl->path, &b, &sl->generation, &sl->id,
                              &e);
        if (st == DDPH_OK)
            st = check_sum(sl->fd, sl->path, (uint64_t)sb.st_size, &e);
        if (st != DDPH_OK) {
            set_refuse(set, st, &e);
            close(sl->fd);
            sl->fd = -1;
        }
    }
    if (!present) {
        ddph_err e;
        set->absent = 1;
        set_refuse(set,
                   ddph__fail(&e, DDPH_ERR_IO, "%s: %s", set->s[0].path,
                              strerror(ENOENT)),
                   &e);
    }
}

static void set_close(rank_set *set)
{
    for (int i = 0; i < NSLOTS; i++) {
        if (set->s[i].fd >= 0)
            close(set->s[i].fd);
        free(set->s[i].path);
    }
    ddph__file_unlock(set->lock_path, set->lock_fd);
    free(set->lock_path);
}

/* A file of this rank that was skipped (damaged, from another job, or
 * refused) while the ranks go on with another generation: said on this
 * rank, which the log line names. */
static void warn_skipped(ddph_ctx *ctx, const rank_set *set,
                         const char *what, const char *instead)
{
    if (set->st != DDPH_OK && !set->absent)
        ddph__log(&ctx->log, DDPH_LOG_WARN, "%s: a file is skipped: %s; %s",
                  what, set->err.msg, instead);
}

/* Collective: the newest generation that every rank holds (the same save
 * id everywhere), *chosen its slot here or -1; *newest the newest
 * generation any rank holds, -1 if none. */
static ddph_status newest_common(ddph_ctx *ctx, const rank_set *set,
                                 int *chosen, int64_t *newest, ddph_err *err)
{
    *chosen = -1;
    *newest = -1;
    int64_t bound = INT64_MAX;
    for (int round = 0;; round++) {
        int64_t top = -1;
        for (int i = 0; i < NSLOTS; i++) {
            int64_t g = (int64_t)set->s[i].generation;
            if (set->s[i].fd >= 0 && g < bound && g > top)
                top = g;
        }
        ddph_status st = ddph__ctl_allreduce_i64(ctx->control, &top, 1,
                                                 DDPH_MAX, err);
        if (st != DDPH_OK)
            return st;
        if (round == 0)
            *newest = top;
        if (top < 0)
            return DDPH_OK;
        int have = -1;
        for (int i = NSLOTS - 1; i >= 0; i--)
            if (set->s[i].fd >= 0 && (int64_t)set->s[i].generation == top)
                have = i;
        /* Missing anywhere, or two different saves of one generation. */
        int64_t id = have < 0 ? -1 : (int64_t)set->s[have].id;
        int64_t v[3] = {have < 0, id, have < 0 ? INT64_MIN : -id};
        st = ddph__ctl_allreduce_i64(ctx->control, v, 3, DDPH_MAX, err);
        if (st != DDPH_OK)
            return st;
        if (v[0] == 0 && v[1] == -v[2]) {
            *chosen = have;
            return DDPH_OK;
        }
        bound = top;
    }
}

/* Temporaries a killed save left: NAME.XXXXXX and NAME.next.XXXXXX
 * (mkstemp's six letters) beside this rank's file NAME. */
static void remove_temporaries(const char *final)
{
    char *dir_copy = ddph__strdup(final), *base_copy = ddph__strdup(final);
    DIR *dir = dir_copy ? opendir(dirname(dir_copy)) : NULL;
    const char *base = base_copy ? basename(base_copy) : "";
    size_t n = strlen(base);
    struct dirent *de;
    while (dir && base_copy && (de = readdir(dir)) != NULL) {
        const char *rest = de->d_name + n;
        if (strncmp(de->d_name, base, n) != 0 || *rest != '.')
            continue;
        rest += strncmp(rest, ".next.", 6) == 0 ? 6 : 1;
        size_t k = 0;
        while (k < 6 && ((rest[k] >= 'a' && rest[k] <= 'z') ||
                         (rest[k] >= 'A' && rest[k] <= 'Z') ||
                         (rest[k] >= '0' && rest[k] <= '9')))
            k++;
        if (k == 6 && rest[6] == '\0' && strcmp(rest, "next") != 0)
            unlinkat(dirfd(dir), de->d_name, 0);
    }
    if (dir)
        closedir(dir);
    free(dir_copy);
    free(base_copy);
}

/* Before a save: the newest complete generation goes to PATH.rank<R> (a
 * save interrupted while it was being committed leaves it in .next on
 * some ranks), an incomplete one and the temporaries are removed. */
static ddph_status tidy(rank_set *set, int chosen, ddph_err *err)
{
    slot *final = &set->s[SLOT_FINAL], *next = &set->s[SLOT_NEXT];
    int changed = 0;
    if (chosen == SLOT_NEXT) {
        if (rename(next->path, final->path) != 0)
            return ddph__fail(err, DDPH_ERR_IO,
                              "state_save: cannot complete the commit of "
                              "%s: %s",
                              next->path, strerror(errno));
        changed = 1;
    } else if (next->fd >= 0 || access(next->path, F_OK) == 0) {
        unlink(next->path);
        changed = 1;
    }
    remove_temporaries(final->path);
    return changed ? ddph__dir_sync(final->path, "state file", err) : DDPH_OK;
}

/* The agreement between the two phases: every rank wrote its .next file.
 * When it shows that a rank failed, no rank commits, and every rank
 * removes its .next: the last save stays the checkpoint.  When the
 * agreement itself breaks (a rank died during it), the ranks that
 * completed it may be committing, so .next stays: a load then takes
 * whichever of the two saves every rank holds, and the next save tidies. */
static ddph_status wrote_everywhere(ddph_ctx *ctx, ddph_status local,
                                    const char *next, ddph_err *err)
{
    int64_t first = local == DDPH_OK ? ddph__size(ctx)
                                     : ddph__rank(ctx);
    ddph_err e;
    ddph_status st = ddph__ctl_allreduce_i64(ctx->control, &first, 1, DDPH_MIN,
                                             &e);
    if (st != DDPH_OK)
        return ddph__fail(err, st, "%s", e.msg);
    if (first == ddph__size(ctx))
        return DDPH_OK;
    unlink(next);
    /* Every rank is here: the failing rank's message to all. */
    st = agree(ctx, local, err);
    return st != DDPH_OK ? st
                         : ddph__fail(err, DDPH_ERR_IO, "state_save failed");
}

/* What a save and a load start with, on this rank: the call is allowed
 * now, and this rank's files are scanned.  A save first checks the folder
 * with the load's own rule (what it writes must be loadable) and takes the
 * path's lock (one job at a time), both before anything is written. */
static ddph_status begin(ddph_ctx *ctx, const char *what, const char *path,
                         int saving, rank_set *set, ddph_err *err)
{
    err->msg[0] = '\0';
    ddph_status st = check_between_steps(ctx, what, err);
    if (set_init(ctx, path, set) != DDPH_OK)
        return st ? st
                  : ddph__fail(err, DDPH_ERR_NOMEM, "%s: out of memory",
                               what);
    if (st == DDPH_OK && saving) {
        const ddph_trust trust = state_trust(ctx);
        st = ddph__safe_folder_as(&trust, set->s[SLOT_FINAL].path, err);
        if (st == DDPH_OK)
            st = ddph__file_lock(set->lock_path, path, &set->lock_fd, err);
        if (st != DDPH_OK)
            ddph__err_prefix(err, "state_save (nothing was written)");
    }
    if (st == DDPH_OK)
        scan(ctx, set);
    return st;
}

ddph_status ddph__state_check(const ddph_ctx *ctx, const char *path,
                              ddph_err *err)
{
    char *file = rank_path(path, ddph__rank(ctx), "");
    if (!file)
        return ddph__fail(err, DDPH_ERR_NOMEM, "state_check: out of memory");
    const ddph_trust trust = state_trust(ctx);
    ddph_status st = ddph__safe_folder_as(&trust, file, err);
    free(file);
    if (st != DDPH_OK)
        ddph__err_prefix(err, "state_check");
    return st;
}

ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    rank_set set;
    ddph_status st = begin(ctx, "state_save", path, 1, &set, err);
    /* A file others could have replaced is refused before anything is
     * written; other bad files are replaced. */
    if (st == DDPH_OK && set.st == DDPH_ERR_INSECURE)
        st = ddph__fail(err, set.st, "%s", set.err.msg);
    st = agree(ctx, st, err);
    int chosen = -1;
    int64_t newest = -1;
    if (st == DDPH_OK)
        st = newest_common(ctx, &set, &chosen, &newest, err);
    if (st == DDPH_OK)
        warn_skipped(ctx, &set, "state_save",
                     "this save removes or replaces it");
    if (st == DDPH_OK)
        st = agree(ctx, tidy(&set, chosen, err), err);
    /* The generation orders the saves of this path; the id, random and
     * the same on every rank, tells two saves of one generation apart. */
    uint64_t id = 0;
    if (st == DDPH_OK) {
        if (ddph__rank(ctx) == 0 &&
            getrandom(&id, sizeof id, 0) != sizeof id)
            id = (uint64_t)ddph__now() * 1000003u ^ (uint64_t)getpid();
        id %= STATE_ID_LIMIT;
        st = ddph__ctl_bcast_bytes(ctx->control, &id, sizeof id, 0, err);
    }
    buffer b = {0};
    if (st == DDPH_OK) {
        ddph_status local = encode(ctx, (uint64_t)(newest < 0 ? 1 : newest + 1),
                                   id, &b, err);
        if (local == DDPH_OK)
            local = ddph__file_write_atomic(set.s[SLOT_NEXT].path, b.data,
                                            b.len, "state file", err);
        st = wrote_everywhere(ctx, local, set.s[SLOT_NEXT].path, err);
    }
    free(b.data);
    /* The commit: every rank holds the new generation, so a crash from
     * here on leaves it complete (in .next or in place) on every rank. */
    if (st == DDPH_OK) {
        ddph_status local = DDPH_OK;
        if (rename(set.s[SLOT_NEXT].path, set.s[SLOT_FINAL].path) != 0)
            local = ddph__fail(err, DDPH_ERR_IO,
                               "state_save: cannot rename %s into place: %s",
                               set.s[SLOT_NEXT].path, strerror(errno));
        else
            local = ddph__dir_sync(set.s[SLOT_FINAL].path, "state file", err);
        st = agree(ctx, local, err);
    }
    set_close(&set);
    return st;
}

/* Checks everything in this rank's file against this job and the chosen
 * slot's header, without touching any hook (so nothing is half loaded if
 * another rank's file is bad).  Leaves b->pos at the first model. */
static ddph_status validate(ddph_ctx *ctx, const slot *sl, buffer *b,
                            ddph_err *err)
{
    const char *file = sl->path;
    uint32_t nmodels = 0, crc = 0;
    uint64_t generation = 0, id = 0;
    if (b->len < STATE_HEADER_BYTES + 8)
        return ddph__fail(err, DDPH_ERR_IO, "%s is truncated", file);
    buffer tail = {.data = b->data, .len = b->len, .pos = b->len - 4};
    get_u32(&tail, &crc);
    /* crc32_z: the whole file, whatever its size (crc32 takes a uInt). */
    if (crc != (uint32_t)crc32_z(0L, b->data, b->len - 4))
        return ddph__fail(err, DDPH_ERR_IO,
                          "%s: checksum mismatch (corrupt or altered file)",
                          file);
    b->len -= 4; /* the models end exactly at the checksum */
    ddph_status st = parse_header(ctx, file, b, &generation, &id, err);
    if (st != DDPH_OK)
        return st;
    if (generation != sl->generation || id != sl->id)
        return ddph__fail(err, DDPH_ERR_IO, "%s changed while it was read",
                          file);
    if (!get_u32(b, &nmodels))
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
                              "differ; state saved by ddphook 0.6.0 or "
                              "earlier with the default caps needs "
                              "bucket_cap_mb = 25 and first_bucket_cap_mb "
                              "= 1)",
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
    rank_set set;
    ddph_status st = agree(ctx, begin(ctx, "state_load", path, 0, &set, err),
                           err);
    int chosen = -1;
    int64_t newest = -1;
    if (st == DDPH_OK)
        st = newest_common(ctx, &set, &chosen, &newest, err);
    /* No generation on every rank: a refused file is the reason if there
     * is one (the lowest rank's), else the files come from different
     * saves. */
    if (st == DDPH_OK && chosen < 0) {
        if (set.st != DDPH_OK)
            *err = set.err;
        st = agree(ctx, set.st, err);
        if (st == DDPH_OK)
            st = ddph__fail(err, DDPH_ERR_MISMATCH,
                            "%s.rank*: no save is complete on every rank: "
                            "the ranks' files come from different saves (a "
                            "save failed or was interrupted on some rank "
                            "before any had completed); refusing to mix "
                            "them",
                            path);
    }
    const slot *sl = chosen >= 0 ? &set.s[chosen] : NULL;
    const char *file = sl ? sl->path : path;
    buffer b = {0};
    if (st == DDPH_OK) {
        ddph_status local = ddph__fd_read_regular(
            sl->fd, sl->path, largest_state_file(ctx), STATE_LIMIT_WHY,
            &b.data, &b.len, err);
        if (local == DDPH_OK)
            local = validate(ctx, sl, &b, err);
        st = agree(ctx, local, err);
    }
    if (st == DDPH_OK) {
        char instead[64];
        snprintf(instead, sizeof instead, "loading generation %llu",
                 (unsigned long long)sl->generation);
        warn_skipped(ctx, &set, "state_load", instead);
    }
    if (st == DDPH_OK && ddph__rank(ctx) == 0) {
        if (newest > (int64_t)sl->generation)
            ddph__log(&ctx->log, DDPH_LOG_WARN,
                      "state_load: %s.rank*: generation %lld is not "
                      "complete on every rank (a save was interrupted); "
                      "loading generation %llu, the newest complete one",
                      path, (long long)newest,
                      (unsigned long long)sl->generation);
        else
            ddph__log(&ctx->log, DDPH_LOG_INFO,
                      "state_load: %s.rank*: loading generation %llu", path,
                      (unsigned long long)sl->generation);
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
            st = ddph__hook_status(m->hook, "save",
                                   api->save(m->hook->state,
                                             &m->hook->services, buf_write,
                                             &kept[i]));
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
            st = ddph__hook_status(m->hook, "load",
                                   api->load(m->hook->state,
                                             &m->hook->services, buf_read,
                                             &payload));
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
    set_close(&set);
    return st;
}
