/* bench_common.c: see bench_common.h. */
#include "build-config.h"

#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int bench_write_job(char *path, size_t len, int rank, const char *runtime_keys,
                    const char *plugin_path, const char *hook, int psgd_rank)
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
        fputs("plugin_path = ", f);
        for (const char *d = plugin_path; *d;) {
            size_t n = strcspn(d, ":");
            if (d != plugin_path)
                fputc(':', f);
            if (n && *d != '/')
                fprintf(f, "%s/", cwd);
            fprintf(f, "%.*s", (int)n, d);
            d += n;
            if (*d == ':')
                d++;
        }
        fputc('\n', f);
    }
    fprintf(f, "[hook]\nname = %s\n", hook);
    /* Options go to [hook.NAME]: NAME is the file's name without .so. */
    const char *base = strrchr(hook, '/') ? strrchr(hook, '/') + 1 : hook;
    int n = (int)(strstr(base, ".so") ? (size_t)(strstr(base, ".so") - base)
                                      : strlen(base));
    if (strstr(base, "powersgd"))
        fprintf(f, "[hook.%.*s]\nstart_powerSGD_iter = 2\n"
                   "matrix_approximation_rank = %d\n",
                n, base, psgd_rank);
    return fclose(f) == 0;
}
