/* bench.c: `ddphook bench`: speed measured against a baseline in the same
 * run, printed as a ratio (docs/performance.md).
 *
 *   ddphook bench casts [--mib N] [--repeats R]
 *
 * For a buffer of N MiB of f32 (and the matching half buffer) each cast is
 * timed on every SIMD path this CPU has and compared with memcpy of the
 * same N MiB: ratio = memcpy time / cast time (1.0 = as fast as copying
 * the f32 bytes once).  Times are medians of R runs, buffers pre-faulted. */
#include "build-config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "cpu_simd.h"
#include "util.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const char bench_usage[] =
    "usage: ddphook bench casts [--mib N] [--repeats R]\n"
    "\n"
    "  casts      f32<->f16/bf16 casts on every SIMD path of this CPU, as a\n"
    "             ratio to memcpy of the same f32 bytes (default 64 MiB,\n"
    "             median of 7 runs)\n";

static int bench_casts(size_t mib, int repeats)
{
    size_t n = mib * 1048576 / 4;
    float *f32 = NULL, *f32b = NULL;
    uint16_t *h16 = NULL;
    if (posix_memalign((void **)&f32, 64, n * 4) ||
        posix_memalign((void **)&f32b, 64, n * 4) ||
        posix_memalign((void **)&h16, 64, n * 2)) {
        fprintf(stderr, "ddphook bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        f32[i] = (float)((i * 2654435761u) % 100000) * 1e-3f - 50.0f;
    memset(f32b, 0, n * 4);
    memset(h16, 0, n * 2);
    double *t = malloc((size_t)repeats * sizeof *t);
    for (int r = 0; r < repeats; r++) {
        double t0 = ddph__now();
        memcpy(f32b, f32, n * 4);
        t[r] = ddph__now() - t0;
    }
    double base = median(t, repeats);
    printf("memcpy of %zu MiB: %.2f ms (%.2f GB/s), the baseline\n\n", mib,
           base * 1e3, (double)n * 4 / base / 1e9);
    printf("%-11s %-7s %10s %12s %14s\n", "cast", "path", "ms", "Gelem/s",
           "x memcpy");
    static const char *const names[] = {"f32->f16", "f16->f32", "f32->bf16",
                                        "bf16->f32"};
    double worst_best = 1e9;
    for (int k = 0; k < DDPH_CAST_COUNT; k++) {
        int from16 = k == DDPH_CAST_F16_F32 || k == DDPH_CAST_BF16_F32;
        const void *src = from16 ? (const void *)h16 : (const void *)f32;
        void *dst = from16 ? (void *)f32b : (void *)h16;
        double best_ratio = 0;
        for (int p = 0; p < DDPH_SIMD_COUNT; p++) {
            if (!ddph__simd_available((ddph_simd_path)p))
                continue;
            for (int r = 0; r < repeats; r++) {
                double t0 = ddph__now();
                ddph__cast_run((ddph_simd_path)p, (ddph_cast_kind)k, src, dst, n);
                t[r] = ddph__now() - t0;
            }
            double m = median(t, repeats);
            double ratio = base / m;
            if (ratio > best_ratio && p == (int)ddph__simd_best())
                best_ratio = ratio;
            printf("%-11s %-7s %10.2f %12.2f %13.2fx\n", names[k],
                   ddph__simd_name((ddph_simd_path)p), m * 1e3,
                   (double)n / m / 1e9, ratio);
        }
        if (best_ratio < worst_best)
            worst_best = best_ratio;
    }
    printf("\ndefault path on this CPU: %s; its slowest cast runs at %.2fx "
           "memcpy\n",
           ddph__simd_name(ddph__simd_best()), worst_best);
    free(t);
    free(f32);
    free(f32b);
    free(h16);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    size_t mib = 64;
    int repeats = 7;
    static const struct option opts[] = {
        {"mib", required_argument, NULL, 'm'},
        {"repeats", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'm')
            mib = (size_t)strtoul(optarg, NULL, 10);
        else if (c == 'r')
            repeats = atoi(optarg);
        else {
            fputs(bench_usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind >= argc || mib == 0 || repeats < 1) {
        fputs(bench_usage, stderr);
        return 2;
    }
    if (strcmp(argv[optind], "casts") == 0)
        return bench_casts(mib, repeats);
    fprintf(stderr, "ddphook bench: unknown benchmark '%s'\n\n%s",
            argv[optind], bench_usage);
    return 2;
}
