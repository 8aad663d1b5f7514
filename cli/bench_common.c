/* bench_common.c: see bench_common.h. */
#include "build-config.h"

#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/config.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The value opts gives KEY for hook NAME (n characters), or NULL. */
static const char *option_for(const bench_options *opts, const char *name,
                              int n, const char *key)
{
    for (int i = 0; opts && i < opts->n; i++) {
        const char *o = opts->items[i];
        if (strncmp(o, name, (size_t)n) != 0 || o[n] != '.')
            continue;
        size_t kl = strlen(key);
        if (strncmp(o + n + 1, key, kl) == 0 && o[n + 1 + kl] == '=')
            return o + n + 2 + kl;
    }
    return NULL;
}

int bench_write_job(char *path, size_t len, int rank, const char *runtime_keys,
                    const char *plugin_path, const char *hook, int psgd_rank,
                    const bench_options *opts)
{
    /* A name made exclusively (mkstemps): a predictable name in /tmp
     * would let another user plant a link or a job file of their own. */
    (void)rank;
    snprintf(path, len, "%s/ddph-bench-XXXXXX.ini",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemps(path, 4);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    fprintf(f, "[runtime]\n%s", runtime_keys);
    if (plugin_path) {
        /* The job file resolves relative folders against its own folder
         * (/tmp); the user meant the current one. */
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd))
            snprintf(cwd, sizeof cwd, ".");
        char *list = NULL;
        size_t list_len = 0;
        FILE *m = open_memstream(&list, &list_len);
        for (const char *d = plugin_path; m && *d;) {
            size_t n = strcspn(d, ":");
            if (d != plugin_path)
                fputc(':', m);
            if (n && *d != '/')
                fprintf(m, "%s/", cwd);
            fprintf(m, "%.*s", (int)n, d);
            d += n;
            if (*d == ':')
                d++;
        }
        if (m)
            fprintf(m, ":%s", DDPH_PLUGIN_DIR);
        int ok = m && fclose(m) == 0 &&
                 ddph__config_write_kv(f, "plugin_path", list);
        free(list);
        if (!ok) {
            fclose(f);
            unlink(path);
            return 0;
        }
    }
    fputs("[hook]\n", f);
    /* A relative path to a .so is the user's, from the current folder,
     * not from the job file's ($TMPDIR). */
    char where[4096 + 1024];
    if (strchr(hook, '/') && hook[0] != '/') {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd))
            snprintf(cwd, sizeof cwd, ".");
        snprintf(where, sizeof where, "%s/%s", cwd, hook);
        ddph__config_write_kv(f, "name", where);
    } else {
        ddph__config_write_kv(f, "name", hook);
    }
    /* Options go to [hook.NAME]: NAME is the file's name without .so. */
    const char *base = strrchr(hook, '/') ? strrchr(hook, '/') + 1 : hook;
    int n = (int)(strstr(base, ".so") ? (size_t)(strstr(base, ".so") - base)
                                      : strlen(base));
    int psgd = strstr(base, "powersgd") != NULL, mine = 0;
    for (int i = 0; opts && i < opts->n; i++)
        mine += strncmp(opts->items[i], base, (size_t)n) == 0 &&
                opts->items[i][n] == '.';
    if (psgd || mine)
        fprintf(f, "[hook.%.*s]\n", n, base);
    if (psgd && !option_for(opts, base, n, "start_powerSGD_iter"))
        fputs("start_powerSGD_iter = 2\n", f);
    if (psgd && !option_for(opts, base, n, "matrix_approximation_rank"))
        fprintf(f, "matrix_approximation_rank = %d\n", psgd_rank);
    for (int i = 0; opts && i < opts->n; i++) {
        const char *o = opts->items[i], *eq = strchr(o, '=');
        if (strncmp(o, base, (size_t)n) == 0 && o[n] == '.' && eq)
            fprintf(f, "%.*s = %s\n", (int)(eq - o - n - 1), o + n + 1,
                    eq + 1);
    }
    return fclose(f) == 0;
}

const char *bench_cap_text(double mb, char *buf)
{
    if (mb == DDPH_CAP_AUTO)
        snprintf(buf, BENCH_CAP_LEN, "auto");
    else
        snprintf(buf, BENCH_CAP_LEN, "%.17g", mb);
    return buf;
}

int bench_parse_cap(const char *text, double *mb)
{
    if (strcmp(text, "auto") == 0) {
        *mb = DDPH_CAP_AUTO;
        return 1;
    }
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v >= DDPH_CAP_MIN_MB && v <= DDPH_CAP_MAX_MB))
        return 0;
    *mb = v;
    return 1;
}
