/* trace.c: see trace.h.  trace.ini is parsed with inih, like job files. */
#include "build-config.h"

#include "trace.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/util.h"

typedef struct parse {
    trace *t;
    char *msg;
    size_t msglen;
    const char *file;
    int failed;
} parse;

static int fail(parse *p, const char *fmt, const char *a, const char *b)
{
    if (!p->failed)
        snprintf(p->msg, p->msglen, fmt, p->file, a, b);
    p->failed = 1;
    return 0;
}

static int handler(void *user, const char *section, const char *name,
                   const char *value)
{
    parse *p = user;
    trace *t = p->t;
    if (strcmp(section, "trace") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (strcmp(name, "world_size") == 0 || strcmp(name, "steps") == 0) {
            if (end == value || *end || v < 1 || v > 1000000)
                return fail(p, "%s: [trace] %s = '%s' is not a positive integer",
                            name, value);
            *(strcmp(name, "steps") == 0 ? &t->steps : &t->world_size) = (int)v;
        } else if (strcmp(name, "dtype") == 0) {
            if (!ddph__dtype_parse(value, &t->dtype))
                return fail(p, "%s: [trace] dtype = '%s' is not one of f32, "
                               "f16, bf16, f64%s",
                            value, "");
        } /* other keys (generator, notes) are descriptive */
        return 1;
    }
    if (strncmp(section, "param.", 6) == 0 && section[6]) {
        if (strcmp(name, "shape") != 0)
            return fail(p, "%s: [%s] has unknown key '%s' (only shape)",
                        section, name);
        trace_param *np = realloc(t->params, (size_t)(t->nparams + 1) * sizeof *np);
        if (!np)
            return fail(p, "%s: out of memory%s%s", "", "");
        t->params = np;
        trace_param *tp = &np[t->nparams];
        memset(tp, 0, sizeof *tp);
        tp->numel = 1;
        const char *c = value;
        while (*c) {
            char *end;
            errno = 0;
            long long v = strtoll(c, &end, 10);
            if (end == c || v < 0 || errno == ERANGE || tp->ndim == 16 ||
                __builtin_mul_overflow(tp->numel, (size_t)v, &tp->numel) ||
                tp->numel > (SIZE_MAX >> 4))
                return fail(p, "%s: [%s] shape = '%s' is not a,b,... of "
                               "non-negative integers whose product fits",
                            section, value);
            tp->shape[tp->ndim++] = v;
            c = end;
            while (*c == ' ')
                c++;
            if (*c == ',')
                c++;
            else if (*c)
                return fail(p, "%s: [%s] shape = '%s' is not a,b,... of "
                               "non-negative integers",
                            section, value);
        }
        if (!(tp->name = strdup(section + 6)))
            return fail(p, "%s: out of memory%s%s", "", "");
        t->total += tp->numel;
        t->nparams++;
        return 1;
    }
    return fail(p, "%s: unknown section [%s]%s (expected [trace] or "
                   "[param.NAME])",
                section, "");
}

int trace_open(const char *dir, trace *t, char *msg, size_t msglen)
{
    memset(t, 0, sizeof *t);
    size_t n = strlen(dir) + 16;
    char *file = malloc(n);
    t->dir = strdup(dir);
    if (!file || !t->dir) {
        free(file);
        snprintf(msg, msglen, "out of memory");
        return 0;
    }
    snprintf(file, n, "%s/trace.ini", dir);
    parse p = {t, msg, msglen, file, 0};
    int rc = ini_parse(file, handler, &p);
    if (rc == -1)
        snprintf(msg, msglen, "%s: cannot open: %s", file, strerror(errno));
    else if (rc > 0 && !p.failed)
        snprintf(msg, msglen, "%s:%d: syntax error", file, rc);
    else if (rc > 0)
        snprintf(msg + strlen(msg), msglen - strlen(msg), " (line %d)", rc);
    else if (!t->world_size || !t->steps || !t->nparams)
        snprintf(msg, msglen,
                 "%s: needs [trace] world_size, steps and at least one "
                 "[param.NAME] section",
                 file);
    free(file);
    if (rc != 0 || !t->world_size || !t->steps || !t->nparams) {
        trace_close(t);
        return 0;
    }
    return 1;
}

int trace_read_step(const trace *t, int rank, int step, float *out, char *msg,
                    size_t msglen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%d.step%d.f32", t->dir, rank, step);
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        snprintf(msg, msglen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    struct stat sb;
    size_t want = t->total * sizeof(float);
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(msg, msglen, "%s: not a regular file", path);
        fclose(f);
        return 0;
    }
    if ((size_t)sb.st_size != want) {
        snprintf(msg, msglen,
                 "%s has %lld bytes; trace.ini's parameters make %zu floats "
                 "= %zu bytes",
                 path, (long long)sb.st_size, t->total, want);
        fclose(f);
        return 0;
    }
    size_t got = fread(out, 1, want, f);
    fclose(f);
    if (got != want) {
        snprintf(msg, msglen, "%s: short read (%zu of %zu bytes)", path, got,
                 want);
        return 0;
    }
    return 1;
}

void trace_close(trace *t)
{
    for (int i = 0; i < t->nparams; i++)
        free(t->params[i].name);
    free(t->params);
    free(t->dir);
    memset(t, 0, sizeof *t);
}
