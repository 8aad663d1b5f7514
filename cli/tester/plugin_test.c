/* plugin_test.c: `ddphook-plugin-test`, the conformance tester for hooks.
 *
 *   [mpiexec -n W] ddphook-plugin-test PLUGIN.so [--option k=v ...]
 *       [--rtol R] [--steps N] [--valgrind]
 *
 * Without mpiexec it runs itself on 1 to 4 ranks (sweep()).
 * Loads the plugin through the real loader and runs it through the real
 * runtime (public API) on realistic, odd and empty buckets, trains a
 * least-squares problem through it, then prints a table of checks on rank
 * 0; a check fails if it fails on any rank (every rank agrees on every
 * row, valgrind's included).  Exit 0 when nothing failed.  See
 * docs/plugin-guide.md. */
#include "build-config.h"

#include <errno.h>
#include <getopt.h>
#ifdef HAVE_MALLINFO2
#include <malloc.h>
#endif
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#ifdef HAVE_VALGRIND_MEMCHECK_H
#include <valgrind/memcheck.h>
#endif

#include <ddphook/ddphook.h>

#include "backends/registry.h"
#include "plugin/hook.h"
#include "plugin/loader.h"
#include "plugin/options.h"

/* Set in the tester that runs under valgrind: it leaves the verdict to
 * the process that started valgrind. */
#define UNDER_VALGRIND "DDPH_PLUGIN_TEST_UNDER_VALGRIND"

/* Set in the testers a sweep over world sizes starts (sweep()). */
#define IN_SWEEP "DDPH_PLUGIN_TEST_IN_SWEEP"
/* The world sizes a hook must conform at: 1 to SWEEP_MAX ranks. */
#define SWEEP_MAX 4

/* The error an exact hook's f32 average may have (the sum's rounding). */
#define EXACT_RTOL 1e-5

static const char usage[] =
    "usage: [mpiexec -n W] ddphook-plugin-test PLUGIN.so [--option KEY=VALUE]...\n"
    "                      [--rtol R] [--steps N] [--ef-steps K] [--valgrind]\n"
    "                      [--suppressions FILE] [--only CHECKS]\n"
    "\n"
    "Checks a hook plugin against the ABI contract and prints a pass/fail\n"
    "table.  Started without mpiexec it runs itself on 1, 2, 3 and 4 ranks\n"
    "($MPIEXEC, else the mpiexec found at build time) and prints one\n"
    "verdict; under mpiexec it checks that world size only.  Rows: entry\n"
    "symbol and ABI numbers, struct_size, required members, option schema,\n"
    "create/destroy, the same collectives and the same result on every\n"
    "rank, the result within R of the plain average,\n"
    "heap in use steady over steps, error feedback (a hook that declares\n"
    "it: its results summed over steps approach the summed averages like\n"
    "1/K, on realistic and odd buckets), training (200 steps of SGD on a\n"
    "least-squares problem with a known optimum, 981 parameters in 5\n"
    "tensors and several buckets, each rank its own data, a few elements\n"
    "far from their optimum, then on the odd buckets (1-element\n"
    "included): the loss's excess over the optimum 0.5x to 10x that of\n"
    "the same run with the exact average, every tensor a quarter of its\n"
    "way to the optimum or more, and the ranks' parameters identical),\n"
    "save/load round trip (a hook without\n"
    "save/load: that nothing it keeps across steps changes its results,\n"
    "and that it does not declare error feedback), empty, 1-element,\n"
    "odd-sized and 1 MiB buckets, f16 and bf16 buckets under a\n"
    "wrapper, and failures injected into the first, a middle and the last\n"
    "call of each collective the hook calls (allreduce, allgather(v),\n"
    "alltoall, broadcast, reduce_scatter, the nonblocking ones, wait) and\n"
    "into the first test and progress, and buckets left untouched after\n"
    "their call.\n"
    "\n"
    "  --option K=V   a [hook.NAME] option for the runs (repeatable)\n"
    "  --rtol R       allowed error of one step relative to the largest\n"
    "                 |average|, below 1 (default: the tolerance the hook\n"
    "                 declares; none per step for a hook that declares\n"
    "                 error feedback and no tolerance; else 1e-5)\n"
    "  --steps N      steps per run (default 6)\n"
    "  --ef-steps K   the most steps of each error-feedback run\n"
    "                 (default 1024, at least 128; it stops once it passes)\n"
    "  --valgrind     re-run this test under valgrind --leak-check=full and\n"
    "                 fail on any leak or error (MPICH's own start-up\n"
    "                 allocations are suppressed with the installed\n"
    "                 valgrind.supp, or --suppressions FILE); each rank\n"
    "                 checks its own leaks and errors before the ranks agree\n"
    "                 on a 'valgrind' row, prints a 'valgrind, rank R:\n"
    "                 PASS|FAIL' line, and then the same verdict as every\n"
    "                 other rank: 'conforms' only when every rank's valgrind\n"
    "                 and checks passed (training is checked by the run\n"
    "                 without --valgrind)\n"
    "  --only CHECKS  run only these groups of checks (comma-separated:\n"
    "                 numerics, error-feedback, trains, state, errors),\n"
    "                 besides loading and create/destroy; to re-run what\n"
    "                 failed.  The last line then says 'passed CHECKS',\n"
    "                 never 'conforms'\n";

typedef struct tester {
    const char *plugin;
    char name[128];
    char options[4096]; /* INI lines */
    double rtol;           /* < 0 until known: --rtol, or the hook's */
    const char *rtol_from; /* where it came from, for the table */
    int error_feedback;    /* DDPH_PLUGIN_ERROR_FEEDBACK */
    int steps;
    int ef_steps; /* the most steps of the error-feedback check */
    unsigned only;  /* --only: the groups of checks to run (0: all) */
    const char *only_text;
    int rank, world;
    int failed;
    char dir[256];
} tester;

/* One row; status is agreed over all ranks (any failure fails the row). */
static void row(tester *t, int ok, int skipped, const char *check,
                const char *fmt, ...)
{
    int all_ok = ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char detail[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    /* The first failing rank's detail is the interesting one. */
    int who = all_ok ? 0 : (ok ? t->world : t->rank), first = 0;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Bcast(detail, sizeof detail, MPI_CHAR, first, MPI_COMM_WORLD);
    if (t->rank == 0)
        printf("%-5s %-46s %s\n", skipped ? "SKIP" : all_ok ? "PASS" : "FAIL",
               check, detail);
    t->failed |= !all_ok && !skipped;
}

/* ---- a model with realistic, odd and empty tensors ------------------------ */

typedef struct shape_set {
    const char *label;
    int n;
    int64_t shapes[8][4];
    int ndims[8];
    double cap_mb; /* bucket_cap_mb (first_bucket_cap_mb is half) */
} shape_set;

static const shape_set realistic = {"realistic", 6,
    {{64, 32}, {64}, {33, 17}, {16, 8, 3, 3}, {16}, {10, 64}},
    {2, 1, 2, 4, 1, 2}, 0.004};
/* Each a bucket of its own: the cap (and half of it for the first) is
 * below one float, so that the 1-element tensor is not joined to the
 * next one. */
static const shape_set odd = {"odd", 3, {{7, 13}, {1}, {5}}, {2, 1, 1},
                              0.000003};
static const shape_set empty = {"empty", 1, {{0}}, {1}, 0.004};
/* About 1 MiB in one bucket of three tensors, none a multiple of 8
 * elements: enough for a hook's chunking and polling paths. */
static const shape_set large = {"large", 3, {{1031, 257}, {4099}, {3, 5, 7}},
                                {2, 1, 3}, 4};

static float grad_value(int rank, int step, int p, size_t i)
{
    uint32_t h = (uint32_t)(rank * 73856093) ^ (uint32_t)(step * 19349663) ^
                 (uint32_t)(p * 83492791) ^ (uint32_t)(i * 2654435761u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (float)(h % 20001) / 10000.0f - 1.0f;
}

typedef struct run {
    ddph_ctx *ctx;
    ddph_model *m;
    float *g[8];
    size_t numel[8];
    int n;
} run;

static const char *write_job(tester *t, const char *wrapper, double cap_mb)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/job.rank%d.ini", t->dir, t->rank);
    FILE *f = fopen(path, "w");
    if (!f)
        return NULL;
    /* The plugin is the one the operator named on the command line: their
     * word for loading it from a build folder, as root too. */
    setenv(DDPH_INSECURE_AS_ROOT_ENV, "1", 1);
    fprintf(f, "[runtime]\nbucket_cap_mb = %g\nfirst_bucket_cap_mb = %g\n"
               "timeout_s = 60\nallow_insecure_plugins = true\n[hook]\n",
            cap_mb, cap_mb / 2);
    ddph__config_write_kv(f, "name", t->plugin); /* a path may be long */
    fprintf(f, "wrapper = %s\n[hook.%s]\n%s", wrapper, t->name, t->options);
    return fclose(f) == 0 ? path : NULL;
}

static int run_open(tester *t, run *r, const shape_set *set, const char *wrapper,
                    char *why, size_t whylen)
{
    memset(r, 0, sizeof *r);
    const char *job = write_job(t, wrapper, set->cap_mb);
    if (!job || ddph_open(job, NULL, NULL, &r->ctx) != DDPH_OK) {
        snprintf(why, whylen, "the job could not be opened (see stderr)");
        return 0;
    }
    r->n = set->n;
    if (ddph_model_create(r->ctx, set->label, &r->m) != DDPH_OK)
        goto fail;
    for (int i = 0; i < set->n; i++) {
        size_t numel = 1;
        for (int d = 0; d < set->ndims[i]; d++)
            numel *= (size_t)set->shapes[i][d];
        r->numel[i] = numel;
        r->g[i] = calloc(numel ? numel : 1, sizeof(float));
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        if (ddph_model_add_param(r->m, name, r->g[i], set->shapes[i],
                                 set->ndims[i], DDPH_F32, DDPH_CPU,
                                 NULL) != DDPH_OK)
            goto fail;
    }
    if (ddph_model_finalize(r->m) != DDPH_OK)
        goto fail;
    return 1;
fail:
    snprintf(why, whylen, "%s", ddph_last_error(r->ctx));
    return 0;
}

static void run_close(run *r)
{
    ddph_close(r->ctx);
    for (int i = 0; i < r->n; i++)
        free(r->g[i]);
    memset(r, 0, sizeof *r);
}

/* One step whose gradients are those of step index s (s < 0: zeros);
 * leaves the reduced gradients in r->g. */
static int run_step(run *r, int s, char *why, size_t whylen, int rank)
{
    if (ddph_step_begin(r->ctx, &r->m, 1) != DDPH_OK)
        goto fail;
    for (int i = r->n - 1; i >= 0; i--) {
        for (size_t k = 0; k < r->numel[i]; k++)
            r->g[i][k] = s < 0 ? 0.0f : grad_value(rank, s, i, k);
        if (ddph_grad_ready(r->m, i) != DDPH_OK)
            goto fail;
    }
    if (ddph_step_wait(r->ctx) != DDPH_OK || ddph_step_end(r->ctx) != DDPH_OK)
        goto fail;
    return 1;
fail:
    snprintf(why, whylen, "%s", ddph_last_error(r->ctx));
    return 0;
}

/* Largest |out - mean| relative to the largest |mean|, the mean computed
 * in double with a plain MPI_Allreduce. */
static double error_vs_average(const run *r, int s, int world)
{
    double worst = 0, scale = 0;
    for (int i = 0; i < r->n; i++) {
        size_t n = r->numel[i];
        double *loc = malloc((n ? n : 1) * sizeof *loc);
        double *sum = malloc((n ? n : 1) * sizeof *sum);
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        for (size_t k = 0; k < n; k++)
            loc[k] = grad_value(rank, s, i, k);
        MPI_Allreduce(loc, sum, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (size_t k = 0; k < n; k++) {
            double mean = sum[k] / world;
            double d = fabs((double)r->g[i][k] - mean);
            if (!(d <= worst))
                worst = d; /* NaN propagates as a failure */
            if (fabs(mean) > scale)
                scale = fabs(mean);
        }
        free(loc);
        free(sum);
    }
    return scale > 0 ? worst / scale : worst;
}

static uint32_t checksum(const run *r)
{
    uLong c = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < r->n; i++)
        c = crc32(c, (const Bytef *)r->g[i], (uInt)(r->numel[i] * sizeof(float)));
    return (uint32_t)c;
}

/* Whether v is the same on every rank. */
static int same_everywhere(uint64_t v)
{
    uint64_t lo = v, hi = v;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* ---- the checks --------------------------------------------------------------- */

static int check_load(tester *t)
{
    ddph_plugin *p;
    ddph_err e;
    ddph_status st = ddph__plugin_load(t->plugin, NULL, 1, &p, &e);
    int loaded = st == DDPH_OK;
    MPI_Allreduce(MPI_IN_PLACE, &loaded, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!loaded) {
        row(t, st == DDPH_OK, 0, "entry symbol and ABI numbers", "%s",
            st == DDPH_OK ? "" : e.msg);
        if (st == DDPH_OK)
            ddph__plugin_unload(p);
        return 0;
    }
    snprintf(t->name, sizeof t->name, "%s", p->api.name);
    row(t, 1, 0, "entry symbol and ABI numbers", "%s %s exports %s, ABI %u.%u",
        p->api.name, p->api.version, DDPH_PLUGIN_ENTRY_V1, p->api.abi_major,
        p->api.abi_minor);
    row(t, p->plugin_size >= DDPH__PLUGIN_V1_MIN_SIZE, 0, "struct_size",
        "%u bytes (host: %zu; members past it read as NULL)", p->plugin_size,
        sizeof(ddph_plugin_api_v1));
    row(t, 1, 0, "required members",
        "name, version, description, create, destroy, on_bucket set; "
        "on_step_end %s, save/load %s, stats %s",
        p->api.on_step_end ? "yes" : "no", p->api.save ? "yes" : "no",
        p->api.stats ? "yes" : "no");
    int nopt = 0;
    for (const ddph_option_spec *o = p->api.options; o && o->name; o++)
        nopt++;
    row(t, 1, 0, "option schema", "%d option%s: unique names, docs, defaults "
                                  "within ranges",
        nopt, nopt == 1 ? "" : "s");
    t->error_feedback = (p->api.flags & DDPH_PLUGIN_ERROR_FEEDBACK) != 0;
    /* Without --rtol, the numerical checks allow what the hook declares;
     * a hook with error feedback and no tolerance is judged on its sums
     * over steps instead (rtol 0: not judged per step). */
    if (t->rtol < 0) {
        t->rtol_from = p->api.tolerance > 0 ? "declared by the hook"
                       : t->error_feedback  ? "error feedback"
                                            : "exact";
        t->rtol = p->api.tolerance > 0 ? p->api.tolerance
                  : t->error_feedback  ? 0
                                       : EXACT_RTOL;
    }
    ddph__plugin_unload(p);
    /* A bound as large as the average itself passes a hook that sends
     * nothing and returns zeros. */
    char bound[96];
    if (t->rtol > 0)
        snprintf(bound, sizeof bound, "rtol %g (%s)", t->rtol, t->rtol_from);
    else
        snprintf(bound, sizeof bound, "judged on sums over steps (%s)",
                 t->rtol_from);
    row(t, t->rtol < 1, 0, "tolerance", "%s%s", bound,
        t->rtol >= 1 ? ": accepts a hook that returns zeros; give a bound "
                       "below 1, or declare DDPH_PLUGIN_ERROR_FEEDBACK if "
                       "the hook has it"
                     : "");
    return 1;
}

static void check_create_destroy(tester *t)
{
    char why[512] = "";
    int ok = 1;
    for (int i = 0; i < 3 && ok; i++) {
        run r;
        ok = run_open(t, &r, &realistic, "none", why, sizeof why);
        run_close(&r);
    }
    row(t, ok, 0, "create/destroy", "%s", ok ? "3 instances made and freed "
                                               "(--valgrind checks for leaks)"
                                             : why);
}

static void check_numerics(tester *t, const shape_set *set, const char *wrapper,
                           double rtol, const char *label)
{
    char why[512] = "";
    run r;
    int ok = run_open(t, &r, set, wrapper, why, sizeof why);
    double worst = 0;
    int same_result = 1, same_bytes = 1;
    for (int s = 0; ok && s < t->steps; s++) {
        ok = run_step(&r, s, why, sizeof why, t->rank);
        if (!ok)
            break;
        double err = error_vs_average(&r, s, t->world);
        if (!(err <= worst))
            worst = err;
        same_result &= same_everywhere(checksum(&r));
        int nb = ddph_model_bucket_count(r.m);
        for (int b = 0; b < nb; b++) {
            ddph_bucket_info info;
            ddph_model_bucket_info(r.m, b, &info);
            same_bytes &= same_everywhere(info.bytes_on_wire);
        }
    }
    int nb = ok ? ddph_model_bucket_count(r.m) : 0;
    run_close(&r);
    char check[64];
    if (!ok) {
        row(t, 0, 0, label, "%s", why);
        return;
    }
    snprintf(check, sizeof check, "%s: same collectives", label);
    row(t, same_bytes, 0, check, "bytes per bucket %s on all ranks (%d buckets)",
        same_bytes ? "identical" : "DIFFER", nb);
    snprintf(check, sizeof check, "%s: same result", label);
    row(t, same_result, 0, check, "%s", same_result
                                            ? "bit-identical on all ranks"
                                            : "ranks hold different results");
    snprintf(check, sizeof check, "%s: close to average", label);
    if (rtol == 0) /* error feedback: see check_error_feedback */
        row(t, isfinite(worst), 0, check,
            "max error %.3g of max |average|: finite; not judged per step "
            "(error feedback: see its row)",
            worst);
    else
        row(t, worst <= rtol, 0, check,
            "max error %.3g of max |average| (rtol %g, %s)", worst, rtol,
            rtol == t->rtol ? t->rtol_from : "half precision");
}

/* ---- error feedback --------------------------------------------------------
 * A hook that keeps back what it did not send and sends it later returns,
 * summed over K steps, the summed averages minus what the ranks still
 * hold back, which stays bounded.  With each rank's gradients the same
 * at every step, the relative distance of the sum from K times the
 * average must then fall like 1/K.  It is measured at K = 8, 16, 32, ...
 * and the exponent fitted over the last EF_FIT points: a pass needs the
 * distance at most EF_BOUND and a slope of at most EF_SLOPE, from K =
 * EF_MIN_K on; or a distance below EF_EXACT.  Top-k's slope is -1 there,
 * 1-bit hooks' -0.74 to -0.83 (their memory still grows slowly); unbiased
 * noise without memory (random rounding) averages out only like
 * 1/sqrt(K), -0.37 to -0.49.  A hook that drops
 * part of the gradient, scales it or returns zeros reaches a floor.  It
 * runs on every kind of bucket: the realistic ones, and odd ones each a
 * bucket of its own, a 1-element bucket among them. */
#define EF_BOUND 0.1
#define EF_EXACT 1e-4
#define EF_SLOPE -0.65
#define EF_FIT 4
#define EF_MIN_K 128

/* Least-squares slope of log(d) over log(k) for n points. */
static double loglog_slope(const double *k, const double *d, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double x = log(k[i]), y = log(d[i] > 0 ? d[i] : 1e-300);
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

/* One set's run: 1 when it passed; what it measured in trail. */
static int ef_run(tester *t, const shape_set *set, char *trail, size_t len,
                  char *why, size_t whylen, int *failed_to_run)
{
    run r;
    int ok = run_open(t, &r, set, "none", why, whylen);
    size_t total = 0;
    for (int i = 0; ok && i < r.n; i++)
        total += r.numel[i];
    double *sum = calloc(total ? total : 1, sizeof *sum);
    double *avg = calloc(total ? total : 1, sizeof *avg);
    ok = ok && sum && avg;
    /* The exact average of the gradients every step repeats (step 0's). */
    for (int i = 0, at = 0; ok && i < r.n; at += (int)r.numel[i], i++)
        for (size_t k = 0; k < r.numel[i]; k++)
            avg[at + (int)k] = grad_value(t->rank, 0, i, k);
    if (ok)
        MPI_Allreduce(MPI_IN_PLACE, avg, (int)total, MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
    double norm_avg = 0;
    for (size_t j = 0; ok && j < total; j++) {
        avg[j] /= t->world;
        norm_avg += avg[j] * avg[j];
    }
    norm_avg = sqrt(norm_avg);
    int passed = 0, npts = 0;
    double ks[32], ds[32], slope = 0, dist = 1;
    snprintf(trail, len, "%s:", set->label);
    for (int k = 1; ok && !passed && k <= t->ef_steps; k++) {
        ok = run_step(&r, 0, why, whylen, t->rank);
        for (int i = 0, at = 0; ok && i < r.n; at += (int)r.numel[i], i++)
            for (size_t j = 0; j < r.numel[i]; j++)
                sum[at + (int)j] += r.g[i][j];
        if (!ok || k < 8 || (k & (k - 1)) != 0 || npts >= 32)
            continue;
        double d = 0;
        for (size_t j = 0; j < total; j++) {
            double e = sum[j] - k * avg[j];
            d += e * e;
        }
        dist = norm_avg > 0 ? sqrt(d) / (k * norm_avg) : sqrt(d);
        ks[npts] = k;
        ds[npts++] = dist;
        size_t used = strlen(trail);
        snprintf(trail + used, len - used, " %d: %.3g", k, dist);
        int fit = npts >= EF_FIT ? EF_FIT : npts;
        slope = loglog_slope(ks + npts - fit, ds + npts - fit, fit);
        passed = dist <= EF_EXACT ||
                 (k >= EF_MIN_K && dist <= EF_BOUND && slope <= EF_SLOPE);
    }
    if (ok && !passed && npts >= 2) {
        size_t used = strlen(trail);
        snprintf(trail + used, len - used, " (slope %.2f)", slope);
    }
    run_close(&r);
    free(sum);
    free(avg);
    *failed_to_run = !ok;
    return ok && passed;
}

static void check_error_feedback(tester *t)
{
    const char *check = "error feedback: sums track the average";
    if (!t->error_feedback) {
        row(t, 1, 1, check,
            "the hook does not declare DDPH_PLUGIN_ERROR_FEEDBACK");
        return;
    }
    char why[512] = "", trail[2][240] = {"", ""};
    const shape_set *sets[2] = {&realistic, &odd};
    int passed = 1, broken = 0;
    for (int i = 0; i < 2 && !broken; i++) {
        int ran_out = 0;
        passed &= ef_run(t, sets[i], trail[i], sizeof trail[i], why,
                         sizeof why, &ran_out);
        broken = ran_out;
    }
    if (broken) {
        row(t, 0, 0, check, "%s", why);
        return;
    }
    char said[512];
    snprintf(said, sizeof said,
             "|sum of K results - K x average| / |K x average|, like 1/K "
             "(fitted slope <= %.2f): %s; %s%s",
             EF_SLOPE, trail[0], trail[1],
             passed ? ""
                    : " (slope near 0: part of the gradient lost for "
                      "good; near -0.5: noise, no memory; or more "
                      "--ef-steps)");
    row(t, passed, 0, check, "%s", said);
}

/* ---- training ----------------------------------------------------------------
 * Plain SGD through the hook on a least-squares problem with a known
 * optimum, against the same run with the exact average (MPI_Allreduce in
 * double).  Rank r's loss is
 *   L_r(w) = 1/2 sum_i h_i ((w_i - t_ri)^2 + v_ri)
 * (curvatures h_i in [1, TRAIN_KAPPA], targets t_ri and spreads v_ri >= 0
 * of rank r's data; the same on every run), the loss trained is their
 * mean, and its optimum is w_i = the ranks' mean target, with the loss
 * L* there known in closed form (positive on 1 rank too: the spreads).
 * The parameters are the tensors of `trained` (odd sizes, several buckets),
 * TRAIN_STEPS steps of rate TRAIN_RATE from w = 0.
 *
 * One element in TRAIN_FAR_EVERY has its target TRAIN_FAR further away, so
 * that, as in a network's gradient, a few elements of every chunk carry
 * most of it for many steps.  A hook that holds part of the gradient back
 * and sends it later (error feedback) must send those elements soon: what
 * it holds back of them arrives after the exact run has moved them, and
 * they overshoot.  A 1-bit hook with a scale per chunk sends every element
 * of a chunk with the same magnitude, so a large element waits until its
 * memory lifts the chunk's scale; at half the right scale it waits about
 * three times as long.  At this rate and step count the right scale ends
 * 1.4-3x the exact run's excess (chunks of 64 to 256), half of it about
 * 40x: TRAIN_FACTOR sits between them, about 3.5x from each (top-k, which
 * sends the large elements first, ends at 1.2-2.6x).  The exact run still
 * has loss to lose at the end, so a hook that drops, inflates, flips or
 * forgets part of the gradient ends with a visibly larger excess L - L*
 * too. */
#define TRAIN_STEPS 200
#define TRAIN_RATE 0.004
#define TRAIN_KAPPA 10.0
#define TRAIN_FAR_EVERY 37
#define TRAIN_FAR 50.0
#define TRAIN_FACTOR 10.0
/* The least excess accepted, of the exact run's: a hook at the right
 * scale does not beat the exact average by much, one at a wrong scale (a
 * divisor that is not W) converges "faster" by overshooting less, e.g.
 * 1.5x the average ends near 0.13x. */
#define TRAIN_LEAST 0.5
/* The loss hides a small tensor that never moves (a 1-element bucket
 * never sent: 1 of 97 parameters in `odd`).  Each tensor is checked: the
 * exact run takes every one more than half its way (curvature 1 and up,
 * 200 steps of 0.004); one never sent goes nowhere (0). */
#define TRAIN_MOVED 0.25

static const shape_set trained = {"trained", 5,
    {{37, 13}, {37}, {11, 37}, {11}, {5, 3, 3}}, {2, 1, 2, 1, 3}, 0.002};

static double curvature(int p, size_t i)
{
    return 1.0 + (TRAIN_KAPPA - 1.0) * (grad_value(0, 99991, p, i) + 1.0) / 2;
}
static double target(int rank, int p, size_t i)
{
    double far = i % TRAIN_FAR_EVERY == (size_t)p ? TRAIN_FAR : 0.0;
    return 1.0 + far + grad_value(rank, 99992, p, i);
}
static double spread(int rank, int p, size_t i)
{
    return 0.5 + 0.5 * grad_value(rank, 99993, p, i);
}

/* The mean over ranks of L_r(w), or (w = NULL) of L_r at the optimum,
 * where each w_i is the ranks' mean target; `scratch` holds the largest
 * tensor's elements. */
static double train_loss(const run *r, int rank, int world, float *const *w,
                         double *scratch)
{
    double mine = 0;
    for (int p = 0; p < r->n; p++) {
        size_t n = r->numel[p];
        for (size_t i = 0; i < n; i++)
            scratch[i] = w ? (double)w[p][i] : target(rank, p, i) / world;
        if (!w)
            MPI_Allreduce(MPI_IN_PLACE, scratch, (int)n, MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD);
        for (size_t i = 0; i < n; i++) {
            double d = scratch[i] - target(rank, p, i);
            mine += 0.5 * curvature(p, i) * (d * d + spread(rank, p, i));
        }
    }
    double all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all / world;
}

/* TRAIN_STEPS steps through the hook (exact = 0) or with the exact
 * average; the final loss in *loss, the final parameters' checksum in
 * *sum, and in *moved the least fraction of its way from 0 (where it
 * starts) to the optimum that a tensor went, measured along that way.  The exact run's parameters are the same on every rank, so the
 * mean of the ranks' gradients h_i (w_i - t_ri) is h_i (w_i - the mean
 * target), in double: one allreduce of the targets, none per step (on
 * more ranks than cores, each collective costs a time slice). */
static int train(tester *t, const shape_set *set, int exact, double *loss,
                 uint32_t *sum, double *optimum, double *moved, char *why,
                 size_t whylen)
{
    run r;
    int ok = run_open(t, &r, set, "none", why, whylen);
    float *w[8] = {0};
    double *avg = NULL, *mean_target[8] = {0};
    size_t most = 0;
    for (int p = 0; ok && p < r.n; p++) {
        w[p] = calloc(r.numel[p] ? r.numel[p] : 1, sizeof(float));
        mean_target[p] = calloc(r.numel[p] ? r.numel[p] : 1, sizeof(double));
        most = r.numel[p] > most ? r.numel[p] : most;
        ok = w[p] && mean_target[p];
        for (size_t i = 0; ok && i < r.numel[p]; i++)
            mean_target[p][i] = target(t->rank, p, i) / t->world;
        if (ok)
            MPI_Allreduce(MPI_IN_PLACE, mean_target[p], (int)r.numel[p],
                          MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    avg = ok ? calloc(most ? most : 1, sizeof *avg) : NULL;
    ok = ok && avg;
    for (int s = 0; ok && s < TRAIN_STEPS; s++) {
        if (!exact && ddph_step_begin(r.ctx, &r.m, 1) != DDPH_OK)
            goto fail;
        for (int p = r.n - 1; p >= 0; p--) {
            for (size_t i = 0; i < r.numel[p]; i++)
                r.g[p][i] = (float)(curvature(p, i) *
                                    ((double)w[p][i] -
                                     (exact ? mean_target[p][i]
                                            : target(t->rank, p, i))));
            if (!exact && ddph_grad_ready(r.m, p) != DDPH_OK)
                goto fail;
        }
        if (!exact &&
            (ddph_step_wait(r.ctx) != DDPH_OK || ddph_step_end(r.ctx) != DDPH_OK))
            goto fail;
        for (int p = 0; p < r.n; p++)
            for (size_t i = 0; i < r.numel[p]; i++)
                w[p][i] -= (float)TRAIN_RATE * r.g[p][i];
    }
    if (ok) {
        *loss = train_loss(&r, t->rank, t->world, w, avg);
        *optimum = train_loss(&r, t->rank, t->world, NULL, avg);
        uLong c = crc32(0L, Z_NULL, 0);
        for (int p = 0; p < r.n; p++)
            c = crc32(c, (const Bytef *)w[p], (uInt)(r.numel[p] * sizeof(float)));
        *sum = (uint32_t)c;
        *moved = INFINITY;
        for (int p = 0; p < r.n; p++) {
            double along = 0, way = 0;
            for (size_t i = 0; i < r.numel[p]; i++) {
                along += (double)w[p][i] * mean_target[p][i];
                way += mean_target[p][i] * mean_target[p][i];
            }
            if (way > 0 && !(along / way >= *moved))
                *moved = along / way; /* NaN included */
        }
    }
    if (0) {
fail:
        snprintf(why, whylen, "%s", ddph_last_error(r.ctx));
        ok = 0;
    }
    for (int p = 0; p < 8; p++) {
        free(w[p]);
        free(mean_target[p]);
    }
    free(avg);
    run_close(&r);
    return ok;
}

/* One set's training, judged: 1 when it passed; what it measured in said. */
static int train_set(tester *t, const shape_set *set, char *said, size_t len,
                     int *failed_to_run)
{
    char why[512] = "";
    double hook_loss = 0, exact_loss = 0, optimum = 0, hook_moved = 0,
           exact_moved = 0;
    uint32_t hook_sum = 0, exact_sum = 0;
    int ok = train(t, set, 1, &exact_loss, &exact_sum, &optimum, &exact_moved,
                   why, sizeof why) &&
             train(t, set, 0, &hook_loss, &hook_sum, &optimum, &hook_moved, why,
                   sizeof why);
    int agree = ok && same_everywhere(hook_sum);
    MPI_Allreduce(MPI_IN_PLACE, &agree, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    *failed_to_run = !ok;
    if (!ok) {
        snprintf(said, len, "%s: %s", set->label, why);
        return 0;
    }
    size_t params = 0;
    for (int p = 0; p < set->n; p++) {
        size_t numel = 1;
        for (int d = 0; d < set->ndims[p]; d++)
            numel *= (size_t)set->shapes[p][d];
        params += numel;
    }
    double excess = hook_loss - optimum, exact_excess = exact_loss - optimum;
    int close = excess <= TRAIN_FACTOR * exact_excess && /* NaN fails */
                excess >= TRAIN_LEAST * exact_excess && hook_moved >= TRAIN_MOVED;
    snprintf(said, len,
             "%s (%zu parameters, %d tensors): loss %.6g through the hook, "
             "%.6g exact, optimum %.6g: excess %.3gx the exact run's; each "
             "tensor went %.2f of its way or more (exact run %.2f)%s",
             set->label, params, set->n, hook_loss, exact_loss, optimum,
             exact_excess > 0 ? excess / exact_excess : excess, hook_moved,
             exact_moved, agree ? "" : "; the ranks' parameters DIFFER");
    return close && agree;
}

/* On the trained set (several buckets of odd sizes), then on `odd`, each
 * tensor a bucket of its own, a 1-element one among them: a hook that
 * never sends part of a bucket leaves those parameters where they
 * started. */
static void check_training(tester *t)
{
    const char *check = "trains: least squares, SGD";
    if (getenv(UNDER_VALGRIND)) {
        row(t, 1, 1, check, "not under valgrind (the run without "
                            "--valgrind trains)");
        return;
    }
    const shape_set *sets[2] = {&trained, &odd};
    char said[2][640] = {"", ""};
    int passed = 1, broken = 0;
    for (int i = 0; i < 2 && !broken; i++)
        passed &= train_set(t, sets[i], said[i], sizeof said[i], &broken);
    if (broken) {
        row(t, 0, 0, check, "%s", said[1][0] ? said[1] : said[0]);
        return;
    }
    row(t, passed, 0, check,
        "%d steps of rate %g: %s; %s (excess %g to %gx: below, a wrong "
        "scale; a tensor %g of its way or more: less, part of it never "
        "sent)",
        TRAIN_STEPS, TRAIN_RATE, said[0], said[1], TRAIN_LEAST, TRAIN_FACTOR,
        TRAIN_MOVED);
}

/* ---- heap growth ---------------------------------------------------------
 * A hook that leaks a little every step runs out of memory after days;
 * valgrind sees it only under --valgrind.  Here the process's heap in use
 * (glibc's mallinfo2, every arena, mmap'd blocks included) is measured
 * over two windows of HEAP_STEPS steps after a warm-up: a leak grows it
 * in both, a pool that grows once (MPI's, a hook's cache) in one only.
 * HEAP_SLACK bytes a step are allowed. */
#define HEAP_WARMUP 6
#define HEAP_STEPS 24
#define HEAP_SLACK 256

#ifdef HAVE_MALLINFO2
static long long heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long long)mi.uordblks + (long long)mi.hblkhd;
}
#endif

static void check_heap(tester *t)
{
    const char *check = "heap steady over steps";
#ifdef HAVE_MALLINFO2
    if (getenv(UNDER_VALGRIND)) {
        row(t, 1, 1, check, "not under valgrind (its leak check instead)");
        return;
    }
    char why[512] = "";
    run r;
    long long at[3] = {0, 0, 0};
    int ok = run_open(t, &r, &realistic, "none", why, sizeof why);
    for (int s = 0; ok && s < HEAP_WARMUP + 2 * HEAP_STEPS; s++) {
        if (s >= HEAP_WARMUP && (s - HEAP_WARMUP) % HEAP_STEPS == 0)
            at[(s - HEAP_WARMUP) / HEAP_STEPS] = heap_in_use();
        ok = run_step(&r, s, why, sizeof why, t->rank);
    }
    at[2] = heap_in_use();
    run_close(&r);
    if (!ok) {
        row(t, 0, 0, check, "%s", why);
        return;
    }
    double first = (double)(at[1] - at[0]) / HEAP_STEPS,
           second = (double)(at[2] - at[1]) / HEAP_STEPS;
    int steady = first <= HEAP_SLACK || second <= HEAP_SLACK;
    row(t, steady, 0, check,
        "rank %d: %+.0f then %+.0f bytes a step over 2 x %d steps (at most "
        "%d in one of them)%s",
        t->rank, first, second, HEAP_STEPS, HEAP_SLACK,
        steady ? "" : ": a leak every step (--valgrind shows where)");
#else
    row(t, 1, 1, check, "this build has no mallinfo2 (glibc 2.33+): "
                        "--valgrind checks leaks");
#endif
}

/* A hook without save/load must keep nothing across steps that changes
 * its results, or a resumed job (ddph_state_save cannot save it) would
 * continue differently.  Two fresh instances run the same last steps:
 * one after the usual first steps, one after as many steps of zero
 * gradients (which leave a stateless hook's results as they were: each
 * step depends on its own gradients and its iteration only).  Different
 * results there mean state carried over. */
static void check_stateless(tester *t)
{
    const char *check = "state across steps (no save/load)";
    char why[512] = "";
    if (t->error_feedback) {
        /* What a trainer's checkpoint then gets. */
        char state[300], said[400] = "";
        snprintf(state, sizeof state, "%s/state", t->dir);
        run r;
        int refused = -1;
        if (run_open(t, &r, &realistic, "none", why, sizeof why) &&
            run_step(&r, 0, why, sizeof why, t->rank)) {
            refused = ddph_state_save(r.ctx, state) != DDPH_OK;
            snprintf(said, sizeof said, "%s", ddph_last_error(r.ctx));
        }
        run_close(&r);
        snprintf(state + strlen(state), sizeof state - strlen(state),
                 ".rank%d", t->rank);
        unlink(state);
        row(t, 0, 0, check,
            "declares DDPH_PLUGIN_ERROR_FEEDBACK but has no save/load: its "
            "error memory would be lost on resume (save it with "
            "ddph_util_save_errors); %s%s",
            refused < 0  ? "the run failed: "
            : refused    ? "ddph_state_save refused: "
                         : "ddph_state_save wrote a file anyway",
            refused < 0 ? why : refused ? said : "");
        return;
    }
    int half = t->steps / 2, same = 1;
    uint32_t *want = calloc((size_t)t->steps, sizeof *want);
    run a, b;
    int ok = want != NULL, opened = ok;
    ok = ok && run_open(t, &a, &realistic, "none", why, sizeof why);
    for (int s = 0; ok && s < t->steps; s++) {
        ok = run_step(&a, s, why, sizeof why, t->rank);
        want[s] = ok ? checksum(&a) : 0;
    }
    if (opened)
        run_close(&a);
    if (ok && (ok = run_open(t, &b, &realistic, "none", why, sizeof why))) {
        for (int s = 0; ok && s < t->steps; s++) {
            ok = run_step(&b, s < half ? -1 : s, why, sizeof why, t->rank);
            same &= s < half || (ok && checksum(&b) == want[s]);
        }
        run_close(&b);
    }
    free(want);
    if (!ok)
        row(t, 0, 0, check, "%s", why);
    else
        row(t, same, 0, check, "%s",
            same ? "none: after zero gradients the same results as after "
                   "the usual steps (nothing to save)"
                 : "results depend on earlier steps' gradients, but the "
                   "hook has no save/load: a resumed job would continue "
                   "differently (add save and load)");
}

static void check_save_load(tester *t)
{
    ddph_plugin *p;
    ddph_err e;
    int has = 0;
    if (ddph__plugin_load(t->plugin, NULL, 1, &p, &e) == DDPH_OK) {
        has = p->api.save != NULL;
        ddph__plugin_unload(p);
    }
    if (!has) {
        check_stateless(t);
        return;
    }
    char why[512] = "", state[300];
    snprintf(state, sizeof state, "%s/state", t->dir);
    int half = t->steps / 2, n = t->steps - half;
    uint32_t *want = calloc((size_t)n, sizeof *want);
    run a, b;
    int ok = run_open(t, &a, &realistic, "none", why, sizeof why);
    for (int s = 0; ok && s < t->steps; s++) {
        ok = run_step(&a, s, why, sizeof why, t->rank);
        if (ok && s == half - 1 && ddph_state_save(a.ctx, state) != DDPH_OK) {
            snprintf(why, sizeof why, "%s", ddph_last_error(a.ctx));
            ok = 0;
        }
        if (ok && s >= half)
            want[s - half] = checksum(&a);
    }
    run_close(&a);
    int same = ok;
    if (ok && (ok = run_open(t, &b, &realistic, "none", why, sizeof why))) {
        if (ddph_state_load(b.ctx, state) != DDPH_OK) {
            snprintf(why, sizeof why, "%s", ddph_last_error(b.ctx));
            ok = 0;
        }
        for (int s = half; ok && s < t->steps; s++) {
            ok = run_step(&b, s, why, sizeof why, t->rank);
            same &= ok && checksum(&b) == want[s - half];
        }
        run_close(&b);
    }
    char path[320];
    snprintf(path, sizeof path, "%s.rank%d", state, t->rank);
    unlink(path);
    free(want);
    row(t, ok && same, 0, "save/load round trip", "%s",
        !ok ? why
            : same ? "a loaded instance continues bit for bit"
                   : "results after load differ from the saved run's");
}

/* ---- failure injection -------------------------------------------------------
 * Every collective service is wrapped.  A first run records how often the
 * hook calls each one over a few steps of a probe bucket; then, for each
 * of them, fresh
 * instances run with the first, a middle and the last call of that
 * collective failing (the other services work), and the hook must return
 * an error: not crash, not report success.  Every rank injects the same
 * failure at the same point, so the ranks' collectives stay matched.  A
 * failing wait or test still ends its request first: the buffers must be
 * free when the hook returns.  How often a hook polls with test depends on
 * timing, so test fails at its first call only. */
enum {
    INJ_ALLREDUCE, INJ_ALLGATHER, INJ_BROADCAST, INJ_REDUCE_SCATTER,
    INJ_ALLGATHERV, INJ_ALLTOALL, INJ_IALLREDUCE, INJ_IALLGATHER,
    INJ_IALLGATHERV, INJ_IALLTOALL, INJ_WAIT, INJ_TEST, INJ_PROGRESS,
    INJ_COUNT
};
static const char *const inj_names[INJ_COUNT] = {
    "allreduce", "allgather", "broadcast", "reduce_scatter", "allgatherv",
    "alltoall", "iallreduce", "iallgather", "iallgatherv", "ialltoall",
    "wait", "test", "progress"};

static struct {
    ddph_services real; /* the host's table, for the pass-through */
    int fail;           /* INJ_* to fail, or -1 */
    int at;             /* which call of it fails, from 1 */
    int calls[INJ_COUNT];
} inj;

/* Counts the call; 1 when this call is the one to fail. */
static int inject(const ddph_services *s, int kind)
{
    if (++inj.calls[kind] != inj.at || inj.fail != kind)
        return 0;
    s->set_error(s, "injected failure in %s (call %d)", inj_names[kind],
                 inj.at);
    return 1;
}

static ddph_status inj_allreduce(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 ddph_redop op)
{
    return inject(s, INJ_ALLREDUCE)
               ? DDPH_ERR_BACKEND
               : inj.real.allreduce(s, g, buf, count, dtype, op);
}
static ddph_status inj_allgather(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype)
{
    return inject(s, INJ_ALLGATHER)
               ? DDPH_ERR_BACKEND
               : inj.real.allgather(s, g, send, recv, count, dtype);
}
static ddph_status inj_broadcast(const ddph_services *s, ddph_group *g,
                                 void *buf, size_t count, ddph_dtype dtype,
                                 int root)
{
    return inject(s, INJ_BROADCAST)
               ? DDPH_ERR_BACKEND
               : inj.real.broadcast(s, g, buf, count, dtype, root);
}
static ddph_status inj_reduce_scatter(const ddph_services *s, ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op)
{
    return inject(s, INJ_REDUCE_SCATTER)
               ? DDPH_ERR_BACKEND
               : inj.real.reduce_scatter(s, g, send, recv, count, dtype, op);
}
static ddph_status inj_allgatherv(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype)
{
    return inject(s, INJ_ALLGATHERV)
               ? DDPH_ERR_BACKEND
               : inj.real.allgatherv(s, g, send, recv, counts, dtype);
}
static ddph_status inj_alltoall(const ddph_services *s, ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype)
{
    return inject(s, INJ_ALLTOALL)
               ? DDPH_ERR_BACKEND
               : inj.real.alltoall(s, g, send, recv, count, dtype);
}
static ddph_status inj_iallreduce(const ddph_services *s, ddph_group *g,
                                  void *buf, size_t count, ddph_dtype dtype,
                                  ddph_redop op, ddph_request **req)
{
    return inject(s, INJ_IALLREDUCE)
               ? DDPH_ERR_BACKEND
               : inj.real.iallreduce(s, g, buf, count, dtype, op, req);
}
static ddph_status inj_iallgather(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_request **req)
{
    return inject(s, INJ_IALLGATHER)
               ? DDPH_ERR_BACKEND
               : inj.real.iallgather(s, g, send, recv, count, dtype, req);
}
static ddph_status inj_iallgatherv(const ddph_services *s, ddph_group *g,
                                   const void *send, void *recv,
                                   const size_t *counts, ddph_dtype dtype,
                                   ddph_request **req)
{
    return inject(s, INJ_IALLGATHERV)
               ? DDPH_ERR_BACKEND
               : inj.real.iallgatherv(s, g, send, recv, counts, dtype, req);
}
static ddph_status inj_ialltoall(const ddph_services *s, ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_request **req)
{
    return inject(s, INJ_IALLTOALL)
               ? DDPH_ERR_BACKEND
               : inj.real.ialltoall(s, g, send, recv, count, dtype, req);
}
static ddph_status inj_wait(const ddph_services *s, ddph_request *req)
{
    ddph_status st = inj.real.wait(s, req);
    return inject(s, INJ_WAIT) ? DDPH_ERR_BACKEND : st;
}
/* A failing test ends its request, as a real failure does. */
static ddph_status inj_test(const ddph_services *s, ddph_request *req,
                            int *done)
{
    ddph_status st = inj.real.test(s, req, done);
    if (inj.fail != INJ_TEST || inj.calls[INJ_TEST] + 1 != inj.at) {
        inj.calls[INJ_TEST]++;
        return st;
    }
    if (st == DDPH_OK && !*done)
        inj.real.wait(s, req);
    *done = 1;
    inject(s, INJ_TEST);
    return DDPH_ERR_BACKEND;
}
static ddph_status inj_progress(const ddph_services *s)
{
    return inject(s, INJ_PROGRESS) ? DDPH_ERR_BACKEND : inj.real.progress(s);
}

static void wrap_services(ddph_services *sv)
{
    inj.real = *sv;
    sv->allreduce = inj_allreduce;
    sv->allgather = inj_allgather;
    sv->broadcast = inj_broadcast;
    sv->reduce_scatter = inj_reduce_scatter;
    sv->allgatherv = inj_allgatherv;
    sv->alltoall = inj_alltoall;
    sv->iallreduce = inj_iallreduce;
    sv->iallgather = inj_iallgather;
    sv->iallgatherv = inj_iallgatherv;
    sv->ialltoall = inj_ialltoall;
    sv->wait = inj_wait;
    sv->test = inj_test;
    sv->progress = inj_progress;
}

/* The probe bucket: an 823 x 15 matrix (what matrix compressors work on)
 * and two vectors, none a multiple of 8 elements, about 64 KiB, reduced
 * PROBE_STEPS times at late iterations. */
#define PROBE_TENSORS 3
static const int64_t probe_shape[PROBE_TENSORS][2] = {{823, 15}, {33, 0}, {4099, 0}};
static const int probe_ndim[PROBE_TENSORS] = {2, 1, 1};
static const size_t probe_numel[PROBE_TENSORS] = {823 * 15, 33, 4099};
#define PROBE_ELEMENTS (823 * 15 + 33 + 4099)
#define PROBE_STEPS 12

/* A fresh instance of the hook for the probe bucket (layout given), or
 * NULL with the reason in why. */
static ddph_hook *probe_open(tester *t, ddph_comm comm, const ddph_logger *log,
                             const ddph_bucket *b, char *why, size_t whylen)
{
    ddph_config cfg;
    ddph_err e;
    ddph_hook *h = NULL;
    const char *job = write_job(t, "none", 4);
    ddph_status st = job ? ddph__config_load(job, &cfg, &e) : DDPH_ERR_IO;
    if (!job)
        snprintf(e.msg, sizeof e.msg, "the job file could not be written");
    if (st == DDPH_OK) {
        st = ddph__hook_create(&cfg, t->plugin, 0, DDPH_WRAP_NONE, "probe",
                               comm, NULL, NULL, log, &h, &e);
        ddph__config_free(&cfg);
    }
    if (st == DDPH_OK) {
        ddph_bucket shown = *b;
        shown.buffer = NULL;
        shown.iteration = 0;
        ddph_layout layout = {.struct_size = sizeof layout, .model = "probe",
                              .nbuckets = 1, .buckets = &shown};
        st = ddph__hook_on_layout(h, &layout, &e);
    }
    if (st != DDPH_OK) {
        snprintf(why, whylen, "%s", e.msg);
        ddph__hook_destroy(h);
        return NULL;
    }
    return h;
}

/* The probe bucket over buf, its gradients those of step `step`. */
static ddph_bucket probe_fill(tester *t, float *buf, ddph_tensor_view *v,
                              int step)
{
    size_t off = 0;
    for (int i = 0; i < PROBE_TENSORS; i++) {
        v[i] = (ddph_tensor_view){"probe", off, probe_numel[i], probe_ndim[i],
                                  probe_shape[i]};
        for (size_t k = 0; buf && k < probe_numel[i]; k++)
            buf[off + k] = grad_value(t->rank, step, i, k);
        off += probe_numel[i];
    }
    return (ddph_bucket){sizeof(ddph_bucket), 0, 1, 1, 1u << 30, DDPH_F32,
                         DDPH_CPU, buf, PROBE_ELEMENTS, PROBE_TENSORS, v,
                         "probe", 0};
}

/* PROBE_STEPS calls of on_bucket on a fresh instance, with call `at` of
 * service `fail` failing (-1: none); they stop at the first error.
 * Returns the hook's status, or sets *setup_failed. */
static ddph_status probe_bucket(tester *t, ddph_comm comm,
                                const ddph_logger *log, int fail, int at,
                                char *why, size_t whylen, int *setup_failed)
{
    ddph_tensor_view v[PROBE_TENSORS];
    float *buf = malloc(PROBE_ELEMENTS * sizeof *buf);
    ddph_bucket b = probe_fill(t, buf, v, 7);
    ddph_hook *h = buf ? probe_open(t, comm, log, &b, why, whylen) : NULL;
    *setup_failed = h == NULL;
    if (!h) {
        if (!buf)
            snprintf(why, whylen, "out of memory");
        free(buf);
        return DDPH_ERR_INVALID;
    }
    wrap_services(&h->services);
    inj.fail = fail;
    inj.at = at;
    memset(inj.calls, 0, sizeof inj.calls);
    uint64_t sent, received;
    ddph_err e;
    e.msg[0] = '\0';
    ddph_status st = DDPH_OK;
    /* Several steps on one instance, so that a hook's later phases (past
     * a warm-up it counts itself) are reached too. */
    for (int k = 0; k < PROBE_STEPS && st == DDPH_OK; k++) {
        b.iteration = (1u << 30) + (unsigned)k;
        st = ddph__hook_on_bucket(h, &b, NULL, &sent, &received, &e);
    }
    snprintf(why, whylen, "%s", e.msg);
    ddph__hook_destroy(h);
    free(buf);
    return st;
}

/* A bucket's buffer is the hook's only during its call (plugin.h): each
 * call here gets a fresh buffer, every one kept alive to the end, and
 * the results must still be what the calls returned after all of them
 * (a hook that keeps the pointer and writes through it later corrupts
 * a trainer's gradients, or the next bucket's). */
static void check_buffer_kept(tester *t, ddph_comm comm, const ddph_logger *log)
{
    const char *check = "buckets untouched after their call";
    char why[512] = "";
    float *buf[PROBE_STEPS] = {0}, *seen[PROBE_STEPS] = {0};
    ddph_tensor_view v[PROBE_STEPS][PROBE_TENSORS];
    ddph_bucket b[PROBE_STEPS];
    int ok = 1, changed = -1;
    for (int k = 0; k < PROBE_STEPS && ok; k++) {
        buf[k] = malloc(PROBE_ELEMENTS * sizeof(float));
        seen[k] = malloc(PROBE_ELEMENTS * sizeof(float));
        ok = buf[k] && seen[k];
        b[k] = probe_fill(t, buf[k], v[k], k);
        b[k].iteration = (1u << 30) + (unsigned)k;
    }
    ddph_hook *h = ok ? probe_open(t, comm, log, &b[0], why, sizeof why) : NULL;
    ok = h != NULL;
    uint64_t sent, received;
    ddph_err e;
    e.msg[0] = '\0';
    for (int k = 0; k < PROBE_STEPS && ok; k++) {
        ok = ddph__hook_on_bucket(h, &b[k], NULL, &sent, &received, &e) ==
             DDPH_OK;
        if (ok)
            memcpy(seen[k], buf[k], PROBE_ELEMENTS * sizeof(float));
        else
            snprintf(why, sizeof why, "%s", e.msg);
    }
    ddph__hook_destroy(h);
    for (int k = 0; k < PROBE_STEPS && ok && changed < 0; k++)
        if (memcmp(seen[k], buf[k], PROBE_ELEMENTS * sizeof(float)) != 0)
            changed = k;
    for (int k = 0; k < PROBE_STEPS; k++) {
        free(buf[k]);
        free(seen[k]);
    }
    if (!ok)
        row(t, 0, 0, check, "%s", why[0] ? why : "out of memory");
    else if (changed >= 0)
        row(t, 0, 0, check,
            "call %d's bucket changed after the call returned: the hook "
            "keeps the buffer past completion and writes through it "
            "(a bucket's memory is the hook's during its call only)",
            changed + 1);
    else
        row(t, 1, 0, check, "%d calls, each on a fresh buffer, all kept: "
                            "none written after its call returned",
            PROBE_STEPS);
}

static void check_error_path(tester *t, ddph_comm comm, const ddph_logger *log)
{
    char why[512] = "";
    int setup_failed;
    ddph_status st = probe_bucket(t, comm, log, -1, 0, why, sizeof why,
                                  &setup_failed);
    if (st != DDPH_OK) {
        row(t, 0, 0, "service errors propagate", "%s%s",
            setup_failed ? "" : "probe run failed: ", why);
        return;
    }
    /* Every rank goes through the same kinds (what any rank called) and
     * the same calls (the fewest any rank made; test and progress aside,
     * these are the same everywhere). */
    int called[INJ_COUNT], fewest[INJ_COUNT], any = 0;
    MPI_Allreduce(inj.calls, called, INJ_COUNT, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(inj.calls, fewest, INJ_COUNT, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    for (int k = 0; k < INJ_COUNT; k++)
        any |= called[k] > 0 && k != INJ_TEST && k != INJ_PROGRESS;
    if (!any) {
        row(t, 0, 0, "service errors propagate",
            "on_bucket called no collective: a hook must average across "
            "ranks");
        return;
    }
    for (int k = 0; k < INJ_COUNT; k++) {
        if (!called[k])
            continue;
        int lo = fewest[k] > 0 ? fewest[k] : 1;
        int ats[3] = {1, (lo + 1) / 2, lo}, nat = 0, failed_ok = 1;
        char list[64] = "";
        for (int a = 0; a < 3; a++) {
            if ((k == INJ_TEST || k == INJ_PROGRESS) && a > 0)
                break; /* timing-dependent counts: the first call only */
            if (a > 0 && ats[a] == ats[a - 1])
                continue;
            st = probe_bucket(t, comm, log, k, ats[a], why, sizeof why,
                              &setup_failed);
            failed_ok &= st != DDPH_OK;
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%d", nat++ ? ", " : "",
                     ats[a]);
        }
        char check[64];
        snprintf(check, sizeof check, "error propagates: %s", inj_names[k]);
        if (k == INJ_TEST || k == INJ_PROGRESS)
            row(t, failed_ok, 0, check, "%s at its first call",
                failed_ok ? "on_bucket returned an error"
                          : "on_bucket returned DDPH_OK although it failed");
        else
            row(t, failed_ok, 0, check, "%s at call %s of %d",
                failed_ok ? "on_bucket returned an error"
                          : "on_bucket returned DDPH_OK although it failed",
                list, lo);
    }
}

#ifndef DDPH_DATA_DIR
#define DDPH_DATA_DIR "/usr/local/share/ddphook"
#endif


/* Under valgrind (--valgrind), every rank checks its own leaks and
 * memory errors now, with everything of the hook's freed, and the ranks
 * agree on the row: a leak on one rank fails the test on every rank, and
 * every rank's exit status (so its final line) says so.  Without
 * valgrind's headers at build time each rank's valgrind judges only its
 * own rank (at exit). */
static void check_valgrind(tester *t)
{
#ifdef HAVE_VALGRIND_MEMCHECK_H
    if (!getenv(UNDER_VALGRIND) || !RUNNING_ON_VALGRIND)
        return;
    VALGRIND_DO_LEAK_CHECK;
    unsigned long leaked = 0, dubious = 0, reachable = 0, suppressed = 0;
    VALGRIND_COUNT_LEAKS(leaked, dubious, reachable, suppressed);
    unsigned long errors = (unsigned long)VALGRIND_COUNT_ERRORS;
    (void)dubious;
    (void)reachable;
    (void)suppressed;
    row(t, leaked == 0 && errors == 0, 0, "valgrind: leaks and memory errors",
        "rank %d: %lu bytes definitely lost, %lu errors%s", t->rank, leaked,
        errors, leaked || errors ? " (valgrind's report on stderr)" : "");
#else
    (void)t;
#endif
}

/* The groups of checks --only names. */
enum { ONLY_NUMERICS = 1, ONLY_EF = 2, ONLY_TRAINS = 4, ONLY_STATE = 8,
       ONLY_ERRORS = 16 };
static const struct {
    const char *name;
    unsigned bit;
} only_names[] = {{"numerics", ONLY_NUMERICS}, {"error-feedback", ONLY_EF},
                  {"trains", ONLY_TRAINS},     {"state", ONLY_STATE},
                  {"errors", ONLY_ERRORS}};

/* --only's comma-separated names as a mask; 0 for an unknown name. */
static unsigned parse_only(const char *list)
{
    unsigned mask = 0;
    while (*list) {
        size_t len = strcspn(list, ",");
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof only_names / sizeof only_names[0]; i++)
            if (strlen(only_names[i].name) == len &&
                strncmp(only_names[i].name, list, len) == 0)
                bit = only_names[i].bit;
        if (!bit)
            return 0;
        mask |= bit;
        list += len + (list[len] == ',');
    }
    return mask;
}

/* Whether the group runs: every group without --only. */
static int runs(const tester *t, unsigned group)
{
    return t->only == 0 || (t->only & group) != 0;
}

/* The last line: 'conforms' only for a full run that passed. */
static void print_verdict(const char *plugin, int failed, const char *only)
{
    if (failed)
        printf("\n%s: FAILED\n", plugin);
    else if (only)
        printf("\n%s: passed %s (--only: not a full conformance run)\n",
               plugin, only);
    else
        printf("\n%s: conforms\n", plugin);
}

static int rerun_under_valgrind(int argc, char **argv, const char *supp,
                                const char *plugin, const char *only)
{
    char **args = calloc((size_t)argc + 8, sizeof *args);
    static char supp_arg[4200];
    int n = 0;
    args[n++] = "valgrind";
    /* MPICH's own start-up allocations (notes/reliability-tests.md). */
    if (!supp && access(DDPH_DATA_DIR "/valgrind.supp", R_OK) == 0)
        supp = DDPH_DATA_DIR "/valgrind.supp";
    if (supp) {
        snprintf(supp_arg, sizeof supp_arg, "--suppressions=%s", supp);
        args[n++] = supp_arg;
    }
    args[n++] = "--leak-check=full";
    args[n++] = "--errors-for-leak-kinds=definite";
    args[n++] = "--error-exitcode=99";
    args[n++] = "--quiet";
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--valgrind") != 0 &&
            strncmp(argv[i], "--suppressions", 14) != 0)
            args[n++] = argv[i];
        else if (strcmp(argv[i], "--suppressions") == 0)
            i++; /* and its value */
    args[n] = NULL;
    /* valgrind's own findings go to stderr; the verdict line here says
     * what they mean, for each rank (under mpiexec every rank runs one). */
    const char *rank = getenv("PMI_RANK");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv(UNDER_VALGRIND, "1", 1);
        /* hwloc's x86 backend (MPICH's) says at length that it cannot
         * run under valgrind. */
        setenv("HWLOC_COMPONENTS", "-x86", 0);
        execvp("valgrind", args);
        perror("ddphook-plugin-test: cannot run valgrind");
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        perror("ddphook-plugin-test: valgrind");
        free(args);
        return 2;
    }
    free(args);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const char *verdict =
        code == 0    ? "PASS  no leaks or memory errors"
        : code == 99 ? "FAIL  leaks or memory errors (valgrind's report above)"
        : code == 127 ? "FAIL  valgrind could not be run (apt-get install valgrind)"
                      : "FAIL  the tester failed under valgrind (see above)";
    printf("valgrind%s%s: %s\n", rank ? ", rank " : "", rank ? rank : "",
           verdict);
    /* The verdict, the same line on every rank: the ranks agreed on every
     * row, valgrind's included (check_valgrind), so each exit status is 0
     * only when every rank passed. */
    print_verdict(plugin, code != 0, only);
    return code;
}

/* Whether a process manager started this process (MPICH's Hydra, PMIx,
 * Open MPI). */
static int under_mpiexec(void)
{
    return getenv("PMI_RANK") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           getenv("OMPI_COMM_WORLD_SIZE");
}

/* Started without mpiexec: the tester runs itself on 1 to SWEEP_MAX ranks
 * (many bugs show at some world sizes only: a divisor that is right for
 * powers of two, a rank's chunk that is empty on 3) and prints one
 * verdict.  $MPIEXEC, else the mpiexec found at build time, starts them. */
static int sweep(int argc, char **argv, const char *plugin, const char *only)
{
    const char *mpiexec = getenv("MPIEXEC");
    if (!mpiexec || !*mpiexec)
        mpiexec = DDPH_MPIEXEC;
    static char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        perror("ddphook-plugin-test: /proc/self/exe");
        return 2;
    }
    self[len] = '\0';
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args)
        return 2;
    int code[SWEEP_MAX + 1] = {0}, failed = 0;
    for (int n = 1; n <= SWEEP_MAX; n++) {
        char ranks[16];
        snprintf(ranks, sizeof ranks, "%d", n);
        int a = 0;
        args[a++] = (char *)mpiexec;
        args[a++] = "-n";
        args[a++] = ranks;
        args[a++] = self;
        for (int i = 1; i < argc; i++)
            args[a++] = argv[i];
        args[a] = NULL;
        printf("==== %d rank%s: %s -n %d ddphook-plugin-test\n", n,
               n == 1 ? "" : "s", mpiexec, n);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            setenv(IN_SWEEP, "1", 1);
            execvp(mpiexec, args);
            fprintf(stderr, "ddphook-plugin-test: cannot run %s: %s (set "
                            "MPIEXEC, or run under mpiexec yourself)\n",
                    mpiexec, strerror(errno));
            _exit(127);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid)
            status = 127 << 8;
        code[n] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        failed |= code[n] != 0;
        printf("\n");
    }
    free(args);
    printf("world sizes:");
    for (int n = 1; n <= SWEEP_MAX; n++)
        printf(" %d %s%s", n, code[n] ? "FAIL" : "PASS", n < SWEEP_MAX ? "," : "\n");
    print_verdict(plugin, failed, only);
    return failed ? 1 : 0;
}

/* Under a plain mpiexec: which world sizes this run did not check. */
static void print_coverage(int world)
{
    if (getenv(IN_SWEEP))
        return;
    printf("(checked on %d rank%s only; not on", world, world == 1 ? "" : "s");
    int said = 0;
    for (int n = 1; n <= SWEEP_MAX; n++)
        if (n != world)
            printf("%s %d", said++ ? "," : "", n);
    printf(": run ddphook-plugin-test without mpiexec to check 1 to %d)\n",
           SWEEP_MAX);
}

int main(int argc, char **argv)
{
    tester t = {.rtol = -1, .rtol_from = "--rtol", .steps = 6,
                .ef_steps = 1024};
    static const struct option opts[] = {
        {"option", required_argument, NULL, 'o'},
        {"rtol", required_argument, NULL, 'r'},
        {"steps", required_argument, NULL, 's'},
        {"ef-steps", required_argument, NULL, 'e'},
        {"valgrind", no_argument, NULL, 'v'},
        {"suppressions", required_argument, NULL, 'S'},
        {"only", required_argument, NULL, 'O'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c, valgrind = 0;
    const char *supp = NULL;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'o') {
            char *eq = strchr(optarg, '=');
            if (!eq) {
                fprintf(stderr, "ddphook-plugin-test: --option %s: KEY=VALUE\n",
                        optarg);
                return 2;
            }
            size_t used = strlen(t.options);
            snprintf(t.options + used, sizeof t.options - used, "%.*s = %s\n",
                     (int)(eq - optarg), optarg, eq + 1);
        } else if (c == 'r') {
            char *end;
            t.rtol = strtod(optarg, &end);
            if (end == optarg || *end || !(t.rtol >= 0)) {
                fprintf(stderr, "ddphook-plugin-test: --rtol %s: a number "
                                "of 0 or more\n",
                        optarg);
                return 2;
            }
        } else if (c == 's') {
            t.steps = atoi(optarg);
        } else if (c == 'e') {
            t.ef_steps = atoi(optarg);
        } else if (c == 'v') {
            valgrind = 1;
        } else if (c == 'S') {
            supp = optarg;
        } else if (c == 'O') {
            t.only = parse_only(optarg);
            t.only_text = optarg;
            if (!t.only) {
                fprintf(stderr, "ddphook-plugin-test: --only %s: a comma-"
                                "separated list of numerics, error-feedback, "
                                "trains, state, errors\n",
                        optarg);
                return 2;
            }
        } else {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind != argc - 1 || t.steps < 2 || t.ef_steps < EF_MIN_K) {
        fputs(usage, stderr);
        return 2;
    }
    if (!under_mpiexec() && !getenv(IN_SWEEP) && !getenv(UNDER_VALGRIND))
        return sweep(argc, argv, argv[optind], t.only_text);
    if (valgrind)
        return rerun_under_valgrind(argc, argv, supp, argv[optind],
                                    t.only_text);
    /* The job files live in a temporary folder: name the plugin by an
     * absolute path (a name without '/' is looked up as given). */
    static char plugin_abs[4096];
    if (strchr(argv[optind], '/') && realpath(argv[optind], plugin_abs))
        t.plugin = plugin_abs;
    else
        t.plugin = argv[optind];
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t.world);
    snprintf(t.dir, sizeof t.dir, "/tmp/ddph-plugin-test-XXXXXX");
    if (t.rank == 0 && !mkdtemp(t.dir))
        t.dir[0] = '\0';
    MPI_Bcast(t.dir, sizeof t.dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (t.rank == 0)
        printf("ddphook-plugin-test %s on %d rank%s\n\n", t.plugin, t.world,
               t.world == 1 ? "" : "s");
    if (t.dir[0] && check_load(&t)) {
        check_create_destroy(&t);
        if (runs(&t, ONLY_NUMERICS)) {
            check_numerics(&t, &realistic, "none", t.rtol, "f32 buckets");
            check_numerics(&t, &odd, "none", t.rtol,
                           "1-element and odd buckets");
            check_numerics(&t, &empty, "none", t.rtol, "empty bucket");
            check_numerics(&t, &large, "none", t.rtol,
                           "1 MiB bucket, 3 tensors");
            /* Half precision loses bits: 2e-2 relative at least (0:
             * judged on sums, not per step). */
            double hr = t.rtol == 0 || t.rtol > 2e-2 ? t.rtol : 2e-2;
            check_numerics(&t, &realistic, "fp16", hr, "f16 under wrapper");
            check_numerics(&t, &realistic, "bf16", hr, "bf16 under wrapper");
        }
        if (runs(&t, ONLY_NUMERICS))
            check_heap(&t);
        if (runs(&t, ONLY_EF))
            check_error_feedback(&t);
        if (runs(&t, ONLY_TRAINS))
            check_training(&t);
        if (runs(&t, ONLY_STATE))
            check_save_load(&t);
        ddph_backend job = {0};
        const ddph_backend_args args = {.argc = &argc, .argv = &argv,
                                        .timeout_s = 60};
        ddph_logger log;
        ddph_err e;
        ddph__logger_init(&log);
        if (runs(&t, ONLY_ERRORS) &&
            ddph__backend_load_job(ddph__backend_find("mpi"), &job.ops, &e) ==
                DDPH_OK &&
            job.ops->open(&args, &job.state, &e) == DDPH_OK) {
            ddph_comm comm = job.ops->comm(job.state);
            check_error_path(&t, comm, &log);
            check_buffer_kept(&t, comm, &log);
            job.ops->close(job.state, &e);
        }
    }
    char path[320];
    snprintf(path, sizeof path, "%s/job.rank%d.ini", t.dir, t.rank);
    unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
    check_valgrind(&t);
    if (t.rank == 0) {
        rmdir(t.dir);
        /* Under --valgrind the verdict waits for valgrind's (at exit). */
        /* Under --valgrind the verdict comes from the process that
         * started valgrind, once valgrind is done. */
        if (!getenv(UNDER_VALGRIND)) {
            print_coverage(t.world);
            print_verdict(t.plugin, t.failed, t.only_text);
        }
    }
    MPI_Finalize();
    return t.failed ? 1 : 0;
}
