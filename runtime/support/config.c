/* config.c: see config.h.  inih parses the file through a reader of our
 * own, which gives each handler call its line number (Debian's inih is
 * built without INI_HANDLER_LINENO) and refuses NUL bytes and lines longer
 * than inih's buffer (199 bytes) instead of letting inih cut them.  A long
 * value is written the way inih allows, over indented continuation lines
 * (inih hands each to the handler under the key before it), which the
 * handler joins. */
#include "build-config.h"

#include <errno.h>
#include <float.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "support/config.h"
#include "support/config_keys.h"


#ifndef DDPH_PLUGIN_DIR
#define DDPH_PLUGIN_DIR "/usr/local/lib/ddphook/plugins"
#endif

/* inih keeps section names to 49 characters. */
#define INIH_MAX_SECTION 50
/* Errors reported from one file before the parse gives up listing them. */
#define MAX_ERRORS 8


static const char *const model_keys[] = {"hook", "wrapper",
                                         "accumulate_steps"};

static int parse_wrapper(const char *s, ddph_wrapper *out)
{
    for (int w = DDPH_WRAP_NONE; w <= DDPH_WRAP_BF16; w++) {
        if (strcmp(s, ddph__wrapper_name((ddph_wrapper)w)) == 0) {
            *out = (ddph_wrapper)w;
            return 1;
        }
    }
    return 0;
}

/* ---- parse state -------------------------------------------------------- */

typedef struct seen_key {
    char *section, *key;
    int line;
} seen_key;

typedef struct parse_state {
    FILE *file;
    const char *path;
    char *dir; /* folder of the file, for relative paths */
    int line;
    int section_line; /* line of the last [section] header */
    char section[INIH_MAX_SECTION]; /* its name, as inih keeps it */
    int section_broken; /* that header lacked its ']': its keys are not
                           reported again as belonging elsewhere */
    int indented;     /* the line read starts with a space or a tab */
    /* The key of the last handler call, its value so far (continuation
     * lines are appended), its line, and whether it still waits to be set
     * (a key is set once, when a line that cannot continue it is read:
     * setting it again at each continuation line made a long value cost
     * its length squared). */
    char last_section[INIH_MAX_SECTION];
    char *last_key, *joined;
    size_t joined_len, joined_cap;
    int key_line;
    int pending;
    ddph_config *cfg;
    ddph_err *err;
    ddph_status status;
    int nerrors;
    ddph_config_error_fn each_error; /* NULL: errors go into err */
    void *each_user;
    void *seen; /* tsearch tree of seen_key: sections and keys */
} parse_state;

/* Records an error at the current line.  The parse goes on, so that one
 * run names every mistake of the file (up to MAX_ERRORS), one a line. */
__attribute__((format(printf, 2, 3))) static int fail_at(parse_state *ps,
                                                         const char *fmt, ...)
{
    char msg[DDPH__ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->each_error) {
        char line[DDPH__ERR_LEN + 64];
        snprintf(line, sizeof line, "%s:%d: %s", ps->path, ps->line, msg);
        ps->each_error(ps->each_user, ps->line, line);
        ps->nerrors++;
        if (ps->status == DDPH_OK)
            ps->status = DDPH_ERR_CONFIG;
        return 0;
    }
    if (ps->nerrors++ == 0) {
        ps->status = ddph__fail(ps->err, DDPH_ERR_CONFIG, "%s:%d: %s",
                                ps->path, ps->line, msg);
        return 0;
    }
    size_t used = strlen(ps->err->msg);
    if (ps->nerrors <= MAX_ERRORS)
        snprintf(ps->err->msg + used, sizeof ps->err->msg - used,
                 "\n%s:%d: %s", ps->path, ps->line, msg);
    else if (ps->nerrors == MAX_ERRORS + 1)
        snprintf(ps->err->msg + used, sizeof ps->err->msg - used,
                 "\n%s: more errors follow; fix these first", ps->path);
    return 0;
}

static void check_section_line(parse_state *ps, const char *line);
static void set_pending_key(parse_state *ps);

/* A line that is neither blank, a comment nor indented ends the value
 * of the key before it. */
static int ends_value(const char *line)
{
    if (*line == ' ' || *line == '\t')
        return 0;
    size_t n = strspn(line, "\r\n");
    return line[n] != '\0' && line[n] != ';' && line[n] != '#';
}

/* A UTF-8 byte-order mark (editors on Windows write one) is no part of
 * the first line: taken off here, so that neither these checks nor inih
 * see it. */
static int drop_bom(char *str, int n)
{
    static const char bom[3] = {'\xEF', '\xBB', '\xBF'};
    if (n < 3 || memcmp(str, bom, 3) != 0)
        return n;
    memmove(str, str + 3, (size_t)(n - 3));
    return n - 3;
}

/* inih's reader: one line per call into inih's buffer of `num` bytes,
 * counted and checked.  A longer line is an error (inih would cut it and
 * take the rest for a line of its own); the rest of it is skipped. */
static char *counting_reader(char *str, int num, void *stream)
{
    parse_state *ps = stream;
    int n = 0, c = EOF, too_long = 0;
    /* getc_unlocked: a lock per character was most of a long file's
     * parse (the stream is this parse's own). */
    while ((c = getc_unlocked(ps->file)) != EOF) {
        if (c == '\0') {
            set_pending_key(ps);
            ps->line++;
            fail_at(ps, "NUL byte in the line (is this a text file?)");
            return NULL;
        }
        if (c != '\n' && n >= num - 2) { /* room for '\n' and NUL */
            too_long = 1;
            continue;
        }
        if (!too_long)
            str[n++] = (char)c;
        if (c == '\n')
            break;
    }
    int bom_again = 0;
    if (ps->line == 0 && !too_long) {
        n = drop_bom(str, n);
        bom_again = drop_bom(str, n) != n; /* inih would take it off */
    }
    if (n == 0 && !too_long) {
        set_pending_key(ps);
        return NULL;
    }
    if (too_long || ends_value(str))
        set_pending_key(ps);
    ps->line++;
    if (too_long) {
        fail_at(ps, "line longer than %d characters: write a long value over "
                    "several lines, each continuing the one before it "
                    "indented (docs/config.md)",
                num - 2);
        snprintf(str, (size_t)num, "\n");
        return str;
    }
    str[n] = '\0';
    if (bom_again)
        fail_at(ps, "a second UTF-8 byte-order mark at the start of the "
                    "file: remove it");
    /* inih takes a carriage return alone for a character of the line, so
     * "[runtime]\rkey = 1" would lose the key without a word. */
    const char *cr = strchr(str, '\r');
    if (cr && cr[1] != '\n' && cr[1] != '\0')
        fail_at(ps, "a carriage return inside the line (old Mac line ends?): "
                    "save the file with LF or CRLF line ends");
    ps->indented = str[0] == ' ' || str[0] == '\t';
    check_section_line(ps, str);
    /* Said here, so that every such line is listed (inih returns only
     * the first line it could not parse). */
    if (ends_value(str) && str[0] != '[' && !str[strcspn(str, "=:")])
        fail_at(ps, "syntax error: expected '[section]' or 'key = value'");
    return str;
}

static int compare_seen(const void *a, const void *b)
{
    const seen_key *x = a, *y = b;
    int c = strcmp(x->section, y->section);
    return c ? c : strcmp(x->key, y->key);
}

/* Every (section, key) set so far, in a tree: a file of many keys parses
 * in n log n, not n^2. */
static int check_duplicate(parse_state *ps, const char *section,
                           const char *key)
{
    seen_key probe = {(char *)section, (char *)key, 0};
    seen_key **found = tfind(&probe, &ps->seen, compare_seen);
    if (found)
        return fail_at(ps, "duplicate key '%s' in [%s] (first set on line %d)",
                       key, section, (*found)->line);
    seen_key *s = malloc(sizeof *s);
    if (!s)
        return fail_at(ps, "out of memory");
    s->section = ddph__strdup(section);
    s->key = ddph__strdup(key);
    s->line = ps->line;
    if (!s->section || !s->key || !tsearch(s, &ps->seen, compare_seen)) {
        free(s->section);
        free(s->key);
        free(s);
        return fail_at(ps, "out of memory");
    }
    return 1;
}

static void free_seen(void *node)
{
    seen_key *s = node;
    free(s->section);
    free(s->key);
    free(s);
}

/* A line that opens a section must close it: a missing ']' is said here,
 * on its own line (inih would take the next key as outside any section).
 * A section may appear more than once: its keys merge, and a key set
 * twice is still an error (check_duplicate). */
/* The inline comments of inih's build: all it reads after a ']' is
 * nothing, so only a comment may stand there. */
static int inline_comment(char c)
{
#if HAVE_DECL_INI_ALLOW_INLINE_COMMENTS && HAVE_DECL_INI_INLINE_COMMENT_PREFIXES
    return ini_allow_inline_comments && c && ini_inline_comment_prefixes &&
           strchr(ini_inline_comment_prefixes, c);
#elif INI_ALLOW_INLINE_COMMENTS
    return c && strchr(INI_INLINE_COMMENT_PREFIXES, c);
#else
    return 0;
#endif
}

/* inih drops whatever follows a section header's ']': a key written there
 * would be lost without a word. */
static void check_after_header(parse_state *ps, const char *rest)
{
    rest += strspn(rest, " \t");
    int len = (int)strcspn(rest, "\r\n");
    if (len == 0 || inline_comment(*rest))
        return;
    fail_at(ps, "text after ']' on the section line: put '%.*s' on a line "
                "of its own",
            len, rest);
}

static void check_section_line(parse_state *ps, const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    if (*line != '[')
        return;
    ps->section_line = ps->line;
    size_t n = strcspn(line + 1, "]");
    ps->section_broken = !line[1 + n];
    if (ps->section_broken) {
        fail_at(ps, "section header '%.*s' has no closing ']'",
                (int)strcspn(line, "\r\n"), line);
        return;
    }
    if (n >= sizeof ps->section)
        n = sizeof ps->section - 1;
    memcpy(ps->section, line + 1, n);
    ps->section[n] = '\0';
    check_after_header(ps, line + 1 + strcspn(line + 1, "]") + 1);
}

/* A path relative to the INI's folder, as a user reading the file means. */
static char *resolve_path(const parse_state *ps, const char *value)
{
    if (value[0] == '/' || !ps->dir)
        return ddph__strdup(value);
    size_t n = strlen(ps->dir) + strlen(value) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", ps->dir, value);
    return p;
}

/* plugin_path: each relative element resolved against the INI's folder. */
static char *resolve_path_list(const parse_state *ps, const char *value)
{
    size_t cap = strlen(value) * 2 + (ps->dir ? strlen(ps->dir) * 8 : 0) + 64;
    char *out = malloc(cap), *tmp = ddph__strdup(value);
    if (!out || !tmp) {
        free(out);
        free(tmp);
        return NULL;
    }
    out[0] = '\0';
    size_t len = 0; /* of out: appending stays linear in the list */
    char *save = NULL;
    for (char *tok = strtok_r(tmp, ":", &save); tok;
         tok = strtok_r(NULL, ":", &save)) {
        char *abs = resolve_path(ps, tok);
        size_t n = abs ? strlen(abs) : 0;
        if (!abs || len + n + 2 > cap) {
            free(abs);
            free(tmp);
            free(out);
            return NULL;
        }
        if (len)
            out[len++] = ':';
        memcpy(out + len, abs, n + 1);
        len += n;
        free(abs);
    }
    free(tmp);
    return out;
}

static int operator_agrees(void)
{
    const char *v = getenv(DDPH_INSECURE_AS_ROOT_ENV);
    return v && strcmp(v, "1") == 0;
}

static int set_key(parse_state *ps, const key_spec *k, const char *value)
{
    char *base = (char *)ps->cfg;
    switch (k->type) {
    case K_REAL: {
        double v;
        if (k->auto_ok && strcmp(value, "auto") == 0) {
            *(double *)(base + k->offset) = DDPH_CAP_AUTO;
            return 1;
        }
        if (!ddph__parse_real(value, &v))
            return fail_at(ps, "[%s] %s = '%s' is not a number%s", k->section,
                           k->key, value, k->auto_ok ? " or auto" : "");
        char lo[DDPH__REAL_STR_LEN], hi[DDPH__REAL_STR_LEN];
        if (v < k->min || v > k->max)
            return fail_at(ps, "[%s] %s = %s is out of range [%s, %s]",
                           k->section, k->key, value,
                           ddph__real_str(k->min, lo),
                           ddph__real_str(k->max, hi));
        *(double *)(base + k->offset) = v;
        return 1;
    }
    case K_INT: {
        int64_t v;
        if (!ddph__parse_int(value, &v))
            return fail_at(ps, "[%s] %s = '%s' is not an integer", k->section,
                           k->key, value);
        if ((double)v < k->min || (double)v > k->max)
            return fail_at(ps, "[%s] %s = %s is out of range [%.0f, %.0f]",
                           k->section, k->key, value, k->min, k->max);
        *(int *)(base + k->offset) = (int)v;
        return 1;
    }
    case K_BOOL: {
        int v;
        if (!ddph__parse_bool(value, &v))
            return fail_at(ps, "[%s] %s = '%s' is not true or false",
                           k->section, k->key, value);
        /* A job file another user wrote must not turn off, for root, the
         * checks that keep that user's files out of root's process. */
        if (v && strncmp(k->key, "allow_insecure_", 15) == 0 &&
            geteuid() == 0 && !operator_agrees())
            return fail_at(ps, "[%s] %s = true is refused for a job run as "
                               "root unless the operator agrees: set %s=1 "
                               "in its environment",
                           k->section, k->key, DDPH_INSECURE_AS_ROOT_ENV);
        *(int *)(base + k->offset) = v;
        return 1;
    }
    case K_STRING: {
        if (!*value)
            return fail_at(ps, "[%s] %s is empty", k->section, k->key);
        /* inih keeps quotes in the value: trace = "run.json" would write
         * a file whose name holds them. */
        size_t vlen = strlen(value);
        if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') &&
            value[vlen - 1] == value[0])
            return fail_at(ps, "[%s] %s = %s: values take no quotes (they "
                               "would be part of the value); write %s = %.*s",
                           k->section, k->key, value, k->key, (int)(vlen - 2),
                           value + 1);
        char **slot = (char **)(base + k->offset);
        char *v;
        if (strcmp(k->key, "plugin_path") == 0)
            v = resolve_path_list(ps, value);
        else if ((strcmp(k->key, "name") == 0 && strchr(value, '/')) ||
                 strcmp(k->key, "trace") == 0)
            v = resolve_path(ps, value);
        else
            v = ddph__strdup(value);
        if (!v)
            return fail_at(ps, "out of memory");
        free(*slot);
        *slot = v;
        if (strcmp(k->key, "name") == 0)
            ps->cfg->hook_line = ps->line;
        return 1;
    }
    case K_BACKEND: {
        /* A name: which backends exist is the registry's to say, when
         * the job opens (the message then names this line). */
        char *b = base + k->offset;
        size_t len = strspn(value, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (len == 0 || value[len] != '\0' || len >= sizeof ps->cfg->backend)
            return fail_at(ps,
                           "[runtime] backend = '%s' is not a backend's "
                           "name (auto, mpi, nccl, ...: lower-case letters, "
                           "digits and '_', at most %zu)",
                           value, sizeof ps->cfg->backend - 1);
        memcpy(b, value, len + 1);
        ps->cfg->backend_line = ps->line;
        return 1;
    }
    case K_WRAPPER:
        if (!parse_wrapper(value, (ddph_wrapper *)(base + k->offset)))
            return fail_at(ps, "[%s] %s = '%s' is not none, fp16 or bf16",
                           k->section, k->key, value);
        return 1;
    }
    return 0;
}

static int handle_fixed_section(parse_state *ps, const char *section,
                                const char *name, const char *value)
{
    const char *cands[64]; /* more than any section has */
    size_t nc = 0;
    for (size_t i = 0; i < ddph__config_nkeys; i++) {
        if (strcmp(ddph__config_keys[i].section, section) != 0)
            continue;
        if (strcmp(ddph__config_keys[i].key, name) == 0)
            return set_key(ps, &ddph__config_keys[i], value);
        if (nc < sizeof cands / sizeof *cands)
            cands[nc++] = ddph__config_keys[i].key;
    }
    /* A key of another section (timeout_s under [accumulate]) is a
     * misplaced line, not a typo: say where it goes. */
    for (size_t i = 0; i < ddph__config_nkeys; i++)
        if (strcmp(ddph__config_keys[i].key, name) == 0)
            return fail_at(ps,
                           "unknown key '%s' in [%s]: '%s' is a key of "
                           "[%s]; move the line under [%s]",
                           name, section, name,
                           ddph__config_keys[i].section,
                           ddph__config_keys[i].section);
    const char *near = ddph__nearest(name, cands, nc);
    if (near)
        return fail_at(ps, "unknown key '%s' in [%s]; did you mean '%s'?",
                       name, section, near);
    return fail_at(ps, "unknown key '%s' in [%s]; see docs/config.md", name,
                   section);
}

static int handle_hook_option(parse_state *ps, const char *hook,
                              const char *name, const char *value)
{
    ddph_config *cfg = ps->cfg;
    ddph_hook_section *hs = NULL;
    for (size_t i = 0; i < cfg->nhook_sections; i++)
        if (strcmp(cfg->hook_sections[i].hook, hook) == 0)
            hs = &cfg->hook_sections[i];
    if (!hs) {
        ddph_hook_section *n = realloc(
            cfg->hook_sections, (cfg->nhook_sections + 1) * sizeof *n);
        if (!n)
            return fail_at(ps, "out of memory");
        cfg->hook_sections = n;
        hs = &n[cfg->nhook_sections++];
        memset(hs, 0, sizeof *hs);
        hs->hook = ddph__strdup(hook);
        hs->line = ps->section_line;
        if (!hs->hook)
            return fail_at(ps, "out of memory");
    }
    if (hs->nkv == hs->capkv) { /* doubling: a section of n keys is O(n) */
        size_t cap = hs->capkv ? 2 * hs->capkv : 8;
        ddph_kv *grown = realloc(hs->kv, cap * sizeof *grown);
        if (!grown)
            return fail_at(ps, "out of memory");
        hs->kv = grown;
        hs->capkv = cap;
    }
    ddph_kv *kv = &hs->kv[hs->nkv];
    kv->key = ddph__strdup(name);
    kv->value = ddph__strdup(value);
    kv->line = ps->line;
    if (!kv->key || !kv->value) {
        free(kv->key);
        free(kv->value);
        return fail_at(ps, "out of memory");
    }
    hs->nkv++;
    return 1;
}

static int handle_model(parse_state *ps, const char *model, const char *name,
                        const char *value)
{
    ddph_config *cfg = ps->cfg;
    ddph_model_section *ms = NULL;
    for (size_t i = 0; i < cfg->nmodels; i++)
        if (strcmp(cfg->models[i].model, model) == 0)
            ms = &cfg->models[i];
    if (!ms) {
        ddph_model_section *n =
            realloc(cfg->models, (cfg->nmodels + 1) * sizeof *n);
        if (!n)
            return fail_at(ps, "out of memory");
        cfg->models = n;
        ms = &n[cfg->nmodels++];
        memset(ms, 0, sizeof *ms);
        ms->line = ps->section_line;
        ms->model = ddph__strdup(model);
        if (!ms->model)
            return fail_at(ps, "out of memory");
    }
    if (strcmp(name, "hook") == 0) {
        if (!*value)
            return fail_at(ps, "[model.%s] hook is empty", model);
        free(ms->hook);
        ms->hook = strchr(value, '/') ? resolve_path(ps, value)
                                      : ddph__strdup(value);
        ms->hook_line = ps->line;
        return ms->hook ? 1 : fail_at(ps, "out of memory");
    }
    if (strcmp(name, "wrapper") == 0) {
        if (!parse_wrapper(value, &ms->wrapper))
            return fail_at(ps, "[model.%s] wrapper = '%s' is not none, fp16 "
                               "or bf16",
                           model, value);
        ms->wrapper_set = 1;
        return 1;
    }
    if (strcmp(name, "accumulate_steps") == 0) {
        int64_t v;
        if (!ddph__parse_int(value, &v) || v < 1 || v > INT_MAX)
            return fail_at(ps, "[model.%s] accumulate_steps = '%s' is not an "
                               "integer >= 1",
                           model, value);
        ms->accumulate_steps = (int)v;
        return 1;
    }
    const char *near = ddph__nearest(name, model_keys, 3);
    if (near)
        return fail_at(ps, "unknown key '%s' in [model.%s]; did you mean '%s'?",
                       name, model, near);
    return fail_at(ps, "unknown key '%s' in [model.%s]; valid keys: hook, "
                       "wrapper, accumulate_steps",
                   name, model);
}

static int dispatch(parse_state *ps, const char *section, const char *name,
                    const char *value);

/* "word = ..." or "word: ...": a key line someone indented, not the rest
 * of a value. */
static int looks_like_key(const char *text)
{
    size_t n = strspn(text, "abcdefghijklmnopqrstuvwxyz"
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.");
    if (n == 0)
        return 0;
    text += n;
    text += strspn(text, " \t");
    return *text == '=' || (*text == ':' && (text[1] == ' ' || !text[1]));
}

static int handler(void *user, const char *section, const char *name,
                   const char *value)
{
    parse_state *ps = user;
    if (ps->status != DDPH_OK && ps->status != DDPH_ERR_CONFIG)
        return 0; /* out of memory: nothing more is worth saying */
    if (ps->section_broken)
        return 1;
    if (!*section)
        return fail_at(ps, "key '%s' is outside any [section]", name);
    /* inih calls an indented line after a key a continuation of it: its
     * text is appended to the value; the key is set with the whole value,
     * at its own line, once a line that ends the value is read. */
    int continued = ps->indented && ps->last_key &&
                    strcmp(ps->last_key, name) == 0 &&
                    strcmp(ps->last_section, section) == 0;
    if (continued && !ps->pending)
        return fail_at(ps, "an indented line continues the value of '%s' "
                           "(line %d) after a line that is not part of it: "
                           "remove its indentation or the line between",
                       name, ps->key_line);
    if (continued && looks_like_key(value))
        return fail_at(ps, "an indented line continues the value of '%s' "
                           "(line %d), but '%s' looks like a key of its own: "
                           "remove its indentation",
                       name, ps->key_line, value);
    /* inih keeps a comment on a continuation line in the value. */
    if (continued && (strstr(value, " ;") || strstr(value, "\t;")))
        return fail_at(ps, "a comment on a line that continues the value of "
                           "'%s' would become part of the value: put it on "
                           "a line of its own",
                       name);
    size_t more = strlen(value);
    if (continued) {
        if (ps->joined_len + more + 1 > ps->joined_cap) {
            size_t cap = 2 * (ps->joined_len + more + 1);
            char *grown = realloc(ps->joined, cap);
            if (!grown)
                return fail_at(ps, "out of memory");
            ps->joined = grown;
            ps->joined_cap = cap;
        }
        memcpy(ps->joined + ps->joined_len, value, more + 1);
        ps->joined_len += more;
        return 1;
    }
    set_pending_key(ps);
    if (!check_duplicate(ps, section, name))
        return 0;
    free(ps->last_key);
    free(ps->joined);
    ps->last_key = ddph__strdup(name);
    ps->joined = ddph__strdup(value);
    ps->joined_len = more;
    ps->joined_cap = more + 1;
    if (!ps->last_key || !ps->joined)
        return fail_at(ps, "out of memory");
    snprintf(ps->last_section, sizeof ps->last_section, "%s", section);
    ps->key_line = ps->line;
    ps->pending = 1;
    return 1;
}

/* Sets the key whose value is complete, at its own line. */
static void set_pending_key(parse_state *ps)
{
    if (!ps->pending)
        return;
    ps->pending = 0;
    if (ps->status != DDPH_OK && ps->status != DDPH_ERR_CONFIG)
        return;
    int line = ps->line;
    ps->line = ps->key_line;
    dispatch(ps, ps->last_section, ps->last_key, ps->joined);
    ps->line = line;
}

/* Sets key `name` of `section` to `value`. */
static int dispatch(parse_state *ps, const char *section, const char *name,
                    const char *value)
{
    /* inih ends a value only at ' ;': a '#' after it stays in the value
     * (trace = run.json # note would name a file with the note). */
    if (strstr(value, " #") || strstr(value, "\t#"))
        return fail_at(ps, "[%s] %s = '%s': '#' starts a comment only at "
                           "the start of a line; after a value write ' ;'",
                       section, name, value);
    if (strcmp(section, "runtime") == 0 || strcmp(section, "accumulate") == 0 ||
        strcmp(section, "hook") == 0)
        return handle_fixed_section(ps, section, name, value);
    if (strncmp(section, "hook.", 5) == 0 && section[5])
        return handle_hook_option(ps, section + 5, name, value);
    if (strncmp(section, "model.", 6) == 0 && section[6])
        return handle_model(ps, section + 6, name, value);
    static const char *const sections[] = {"runtime", "accumulate", "hook"};
    const char *near = ddph__nearest(section, sections, 3);
    if (!near && strncmp(section, "hook", 4) == 0)
        near = "hook.NAME";
    if (!near && strncmp(section, "model", 5) == 0)
        near = "model.NAME";
    if (near)
        return fail_at(ps, "unknown section [%s]; did you mean [%s]?", section,
                       near);
    return fail_at(ps, "unknown section [%s]; valid sections: [runtime], "
                       "[accumulate], [hook], [hook.NAME], [model.NAME]",
                   section);
}

/* ---- public (internal) API ------------------------------------------------ */

ddph_status ddph__config_defaults(ddph_config *cfg, ddph_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->backend, sizeof cfg->backend, "auto");
    cfg->bucket_cap_mb = DDPH_CAP_AUTO;
    cfg->first_bucket_cap_mb = DDPH_CAP_AUTO;
    cfg->timeout_s = DDPH__DEFAULT_TIMEOUT_S;
    cfg->accumulate_steps = 1;
    cfg->lanes = 1;
    cfg->shared_buckets = 1;
    cfg->broadcast_parameters = 1;
    cfg->check_collectives = 1;
    cfg->divide_by_initial_world_size = 1;
    cfg->wrapper = DDPH_WRAP_NONE;
    cfg->path = ddph__strdup("(defaults)");
    cfg->plugin_path = ddph__strdup(DDPH_PLUGIN_DIR);
    cfg->hook_name = ddph__strdup("allreduce");
    if (!cfg->path || !cfg->plugin_path || !cfg->hook_name) {
        ddph__config_free(cfg);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    return DDPH_OK;
}

ddph_status ddph__config_load(const char *path, ddph_config *cfg,
                              ddph_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        memset(cfg, 0, sizeof *cfg);
        return ddph__fail(err, DDPH_ERR_CONFIG, "%s: cannot open job file: %s",
                          path, strerror(errno));
    }
    ddph_status st = ddph__config_parse(f, path, cfg, err);
    fclose(f);
    return st;
}

/* The parse of ddph__config_parse and ddph__config_load_all; with
 * each_error, what parsed is kept whatever the errors, and *nerrors is
 * their number. */
static ddph_status parse_stream(FILE *f, const char *path, ddph_config *cfg,
                                ddph_config_error_fn each_error, void *user,
                                int *nerrors, ddph_err *err)
{
    ddph_status st = ddph__config_defaults(cfg, err);
    if (st != DDPH_OK)
        return st;
    parse_state ps = {.file = f, .path = path, .cfg = cfg, .err = err,
                      .status = DDPH_OK, .each_error = each_error,
                      .each_user = user};
    const char *slash = strrchr(path, '/');
    if (slash) {
        size_t n = (size_t)(slash - path);
        ps.dir = malloc(n + 2);
        if (ps.dir) {
            memcpy(ps.dir, path, n ? n : 1);
            ps.dir[n ? n : 1] = '\0';
        }
    }
    int rc = ini_parse_stream(counting_reader, &ps, handler, &ps);
    set_pending_key(&ps);
    if (ps.status != DDPH_ERR_NOMEM && ferror(f))
        ps.status = ddph__fail(err, DDPH_ERR_IO, "%s: read error", path);
    if (rc > 0 && ps.status == DDPH_OK) { /* a line inih alone refused */
        ps.line = rc;
        fail_at(&ps, "syntax error: expected '[section]' or 'key = value'");
    }
    if (ps.status == DDPH_OK && rc < 0)
        ps.status = ddph__fail(err, DDPH_ERR_NOMEM, "%s: inih failed (%d)",
                               path, rc);
    tdestroy(ps.seen, free_seen);
    free(ps.dir);
    free(ps.last_key);
    free(ps.joined);
    if (ps.status == DDPH_OK || (each_error && ps.status == DDPH_ERR_CONFIG)) {
        free(cfg->path);
        cfg->path = ddph__strdup(path);
        if (!cfg->path)
            ps.status = ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    *nerrors = ps.nerrors;
    if (ps.status != DDPH_OK &&
        !(each_error && ps.status == DDPH_ERR_CONFIG))
        ddph__config_free(cfg);
    return ps.status;
}

ddph_status ddph__config_parse(FILE *f, const char *path, ddph_config *cfg,
                               ddph_err *err)
{
    int nerrors;
    return parse_stream(f, path, cfg, NULL, NULL, &nerrors, err);
}

int ddph__config_load_all(const char *path, ddph_config *cfg,
                          ddph_config_error_fn each_error, void *user,
                          ddph_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        memset(cfg, 0, sizeof *cfg);
        ddph__fail(err, DDPH_ERR_CONFIG, "%s: cannot open job file: %s", path,
                   strerror(errno));
        return -1;
    }
    int nerrors = 0;
    ddph_status st = parse_stream(f, path, cfg, each_error, user, &nerrors,
                                  err);
    fclose(f);
    return st == DDPH_OK || st == DDPH_ERR_CONFIG ? nerrors : -1;
}
