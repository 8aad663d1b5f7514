/* bench_common.h: what the CPU and GPU benchmarks of `ddphook bench`
 * share: the median of their timings and the job file of one run. */
#ifndef DDPH_CLI_BENCH_COMMON_H
#define DDPH_CLI_BENCH_COMMON_H

#include <stddef.h>

/* The median of v[0..n) (n > 0); sorts v in place. */
double bench_median(double *v, int n);

/* Hook options given on the command line (--option NAME.KEY=VALUE),
 * for the job files below. */
typedef struct bench_options {
    const char *items[64]; /* "NAME.KEY=VALUE" */
    int n;
} bench_options;

/* Writes a job file for one benchmarked hook into `path` (a fresh name
 * under $TMPDIR or /tmp): [runtime] with `runtime_keys` (lines ending in
 * '\n'); plugin_path when not NULL, followed by the installed plugin
 * folder, so that the shipped hooks (the baseline's allreduce among them)
 * are still found; [hook] name = hook (a name or a .so path); and under
 * [hook.NAME] every option of `opts` for that NAME, and for the PowerSGD
 * hooks compression from the third step on with rank `psgd_rank` unless
 * an option says otherwise.  Returns 0 (and nothing to remove) on
 * failure. */
int bench_write_job(char *path, size_t len, int rank, const char *runtime_keys,
                    const char *plugin_path, const char *hook, int psgd_rank,
                    const bench_options *opts);

/* A bucket cap as a job file writes it: "auto" for DDPH_CAP_AUTO, else
 * MiB to 17 digits.  Returns buf (of at least BENCH_CAP_LEN bytes). */
#define BENCH_CAP_LEN 32
const char *bench_cap_text(double mb, char *buf);

/* Parses a bucket cap given on the command line: "auto" or MiB in
 * [2^-20, 65536].  Returns 0 when it is neither. */
int bench_parse_cap(const char *text, double *mb);

#endif
