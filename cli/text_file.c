/* text_file.c: see text_file.h. */
#include "build-config.h"

#include "text_file.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/ddphook.h>

#include "support/safe_file.h"

int text_file_read(const char *path, size_t limit, const char *what,
                   const char *magic, const char *hint, text_line_fn line,
                   text_done_fn done, void *ctx, char *msg, size_t cap)
{
    unsigned char *data = NULL;
    size_t len = 0;
    ddph_err e;
    char limit_what[128];
    snprintf(limit_what, sizeof limit_what, "a %s's limit", what);
    if (ddph__file_read_regular(path, limit, limit_what, &data, &len, &e) !=
        DDPH_OK) {
        snprintf(msg, cap, "%s", e.msg);
        return 0;
    }
    int ok = 1, lineno = 0;
    char why[300] = "";
    if (memchr(data, '\0', len)) {
        snprintf(why, sizeof why, "a NUL byte: not a %s", what);
        ok = 0;
    }
    char *at = (char *)data, *stop = at + len;
    while (ok && at < stop) {
        char *nl = memchr(at, '\n', (size_t)(stop - at));
        lineno++;
        if (!nl) {
            snprintf(why, sizeof why, "no newline at the end: truncated");
            ok = 0;
            break;
        }
        *nl = '\0';
        if (lineno == 1 && strcmp(at, magic) != 0) {
            snprintf(why, sizeof why, "not a %s (its first line is not "
                     "'%s'%s)", what, magic, hint);
            ok = 0;
        } else if (lineno > 1) {
            ok = line(ctx, at, why, sizeof why);
        }
        at = nl + 1;
    }
    if (ok && !done(ctx, why, sizeof why)) {
        lineno++;
        ok = 0;
    }
    free(data);
    if (!ok)
        snprintf(msg, cap, "%s:%d: %s", path, lineno, why);
    return ok;
}

int text_file_commit(FILE *f, char **text, size_t *len, const char *path,
                     const char *what, char *msg, size_t cap)
{
    int ok = f && fclose(f) == 0;
    if (!ok)
        snprintf(msg, cap, "out of memory");
    ddph_err e;
    if (ok && ddph__file_write_atomic(path, *text, *len, what, &e) != DDPH_OK) {
        snprintf(msg, cap, "%s", e.msg);
        ok = 0;
    }
    free(*text);
    *text = NULL;
    return ok;
}

int text_number(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

int text_hook_name_ok(const char *s, size_t cap)
{
    size_t n = strlen(s);
    if (n == 0 || n >= cap)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || strchr("._/-", *s)))
            return 0;
    return 1;
}
