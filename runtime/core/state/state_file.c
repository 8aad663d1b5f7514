/* state_file.c: see state_file.h. */
#include "build-config.h"

#include "core/state/state_file.h"
#include "core/state/state_format.h"

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

static char *rank_path(const char *path, int rank, const char *suffix)
{
    size_t n = strlen(path) + strlen(suffix) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.rank%d%s", path, rank, suffix);
    return p;
}

ddph_status ddph__state_agree(ddph_ctx *ctx, ddph_status st, ddph_err *err)
{
    ddph_err local = *err;
    return ddph__ctl_agree(ctx->control, st, st != DDPH_OK ? local.msg : NULL,
                           err);
}

/* Saving or loading hook state while buckets are in flight races with the
 * communication thread; inside an accumulation window it would resume
 * with a different sync schedule. */
ddph_status ddph__state_between_steps(const ddph_ctx *ctx, const char *what,
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
    const char *given; /* PATH as the trainer gave it, for messages */
    char *lock_path; /* PATH.rank<R>.lock: held by a save */
    int lock_fd;
} rank_set;

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
    set->given = path;
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
        unsigned char head[DDPH__STATE_HEADER_BYTES];
        ssize_t n = 0;
        if (fstat(sl->fd, &sb) != 0 ||
            (uint64_t)sb.st_size > ddph__state_largest(ctx))
            st = ddph__fail(&e, DDPH_ERR_IO,
                            "%s: %lld bytes is more than %zu, the most %s "
                            "(refused before reading)",
                            sl->path, (long long)sb.st_size,
                            ddph__state_largest(ctx), DDPH__STATE_LIMIT_WHY);
        else
            n = pread(sl->fd, head, sizeof head, 0);
        ddph_state_buf b = {.data = head, .len = n > 0 ? (size_t)n : 0};
        if (st == DDPH_OK)
            st = ddph__state_parse_header(ctx, &(ddph_state_source){.name = sl->path},
                                          &b, &sl->generation, &sl->id, &e);
        if (st == DDPH_OK)
            st = ddph__state_check_sum(sl->fd, sl->path, (uint64_t)sb.st_size, &e);
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
                   ddph__fail(&e, DDPH_ERR_IO,
                              "%s: %s: nothing was saved at %s "
                              "(ddph_state_save(ctx, PATH) writes "
                              "PATH.rank<R>: give the load the same PATH)",
                              set->s[0].path, strerror(ENOENT), set->given),
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
    st = ddph__state_agree(ctx, local, err);
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
    ddph_status st = ddph__state_between_steps(ctx, what, err);
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

/* A NULL path on one rank: refused in the first agreement of a save or a
 * load, which the peers enter too, so that they hear of it at once rather
 * than at timeout_s. */
static ddph_status null_path(ddph_ctx *ctx, const char *what, ddph_err *err)
{
    ddph__fail(err, DDPH_ERR_INVALID, "%s on rank %d: path is NULL", what,
               ddph__rank(ctx));
    return ddph__state_agree(ctx, DDPH_ERR_INVALID, err);
}

ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    if (!path)
        return null_path(ctx, "state_save", err);
    rank_set set;
    ddph_status st = begin(ctx, "state_save", path, 1, &set, err);
    /* A file others could have replaced is refused before anything is
     * written; other bad files are replaced. */
    if (st == DDPH_OK && set.st == DDPH_ERR_INSECURE)
        st = ddph__fail(err, set.st, "%s", set.err.msg);
    st = ddph__state_agree(ctx, st, err);
    int chosen = -1;
    int64_t newest = -1;
    if (st == DDPH_OK)
        st = newest_common(ctx, &set, &chosen, &newest, err);
    if (st == DDPH_OK)
        warn_skipped(ctx, &set, "state_save",
                     "this save removes or replaces it");
    if (st == DDPH_OK)
        st = ddph__state_agree(ctx, tidy(&set, chosen, err), err);
    /* The generation orders the saves of this path; the id, random and
     * the same on every rank, tells two saves of one generation apart. */
    uint64_t id = 0;
    if (st == DDPH_OK) {
        if (ddph__rank(ctx) == 0 &&
            getrandom(&id, sizeof id, 0) != sizeof id)
            id = (uint64_t)ddph__now() * 1000003u ^ (uint64_t)getpid();
        id %= DDPH__STATE_ID_LIMIT;
        st = ddph__ctl_bcast_bytes(ctx->control, &id, sizeof id, 0, err);
    }
    ddph_state_buf b = {0};
    if (st == DDPH_OK) {
        ddph_status local = ddph__state_encode(
            ctx, "state_save", (uint64_t)(newest < 0 ? 1 : newest + 1), id,
            &b, err);
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
        st = ddph__state_agree(ctx, local, err);
    }
    set_close(&set);
    return st;
}

ddph_status ddph__state_load(ddph_ctx *ctx, const char *path, ddph_err *err)
{
    if (!path)
        return null_path(ctx, "state_load", err);
    rank_set set;
    ddph_status st = ddph__state_agree(ctx, begin(ctx, "state_load", path, 0, &set, err),
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
        st = ddph__state_agree(ctx, set.st, err);
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
    ddph_state_buf b = {0};
    if (st == DDPH_OK) {
        ddph_status local = ddph__fd_read_regular(
            sl->fd, sl->path, ddph__state_largest(ctx), DDPH__STATE_LIMIT_WHY,
            &b.data, &b.len, err);
        if (local == DDPH_OK)
            local = ddph__state_validate(ctx,
                                         &(ddph_state_source){.name = sl->path},
                                         sl->generation, sl->id, &b, err);
        st = ddph__state_agree(ctx, local, err);
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
    st = ddph__state_apply(ctx, file, st, &b, err);
    free(b.data);
    set_close(&set);
    return st;
}

/* ---- loading what was read ---------------------------------------------- */

ddph_status ddph__state_apply(ddph_ctx *ctx, const char *file, ddph_status st,
                              ddph_state_buf *b, ddph_err *err)
{
    if (st != DDPH_OK)
        return st; /* agreed: every rank returns here, with its message */
    /* All or nothing on every rank: each hook's state as it is now is
     * kept (its own save) until every rank has loaded every model; if any
     * rank failed, every rank puts its kept states back. */
    ddph_state_buf *kept = calloc((size_t)ctx->nmodels + 1, sizeof *kept);
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
        ddph__state_get_str_eq(b, m->name);
        ddph__state_get_str_eq(b, api->name);
        ddph__state_get_str_eq(b, api->version);
        ddph__state_get_u64(b, &iteration);
        ddph__state_get_u32(b, &nbuckets);
        for (uint32_t k = 0; k < nbuckets; k++)
            ddph__state_get_u64(b, &numel);
        ddph__state_get_u64(b, &len);
        ddph_state_buf payload = {.data = b->data + b->pos, .len = (size_t)len};
        b->pos += (size_t)len;
        if (api->load) {
            m->hook->message[0] = '\0';
            st = ddph__hook_status(m->hook, "save",
                                   api->save(m->hook->state,
                                             &m->hook->services, ddph__state_buf_write,
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
                                             &m->hook->services, ddph__state_buf_read,
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
    st = ddph__state_agree(ctx, st, err);
    for (int i = 0; st != DDPH_OK && kept_iteration && i < ctx->nmodels; i++)
        ctx->models[i]->iteration = kept_iteration[i];
    for (int i = 0; st != DDPH_OK && i < touched; i++) {
        ddph_model *m = ctx->models[i];
        const ddph_plugin_api_v1 *api = &m->hook->plugin->api;
        if (!api->load)
            continue;
        kept[i].pos = 0;
        m->hook->message[0] = '\0';
        if (api->load(m->hook->state, &m->hook->services, ddph__state_buf_read,
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
    return st;
}
