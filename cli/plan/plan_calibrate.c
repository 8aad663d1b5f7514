/* plan_calibrate.c: see plan_calibrate.h. */
#include "build-config.h"

#include "plan_calibrate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "support/config.h"
#include "support/safe_file.h"
#include "support/util.h"

/* The sample measured for the model: every parameter's first dimension
 * divided by the same factor, so the sample keeps the model's parameters,
 * their kinds and (with the caps divided alike) its buckets. */
static double sample_factor(const plan_layout *l)
{
    double f = ceil((double)l->numel * 4 / PLAN_SAMPLE_BYTES);
    return f > 1 ? f : 1;
}

static int64_t sampled_dim0(int64_t d, double f)
{
    int64_t s = (int64_t)llround((double)d / f);
    return s > 0 ? s : 1;
}

uint64_t plan_calibration_key(const plan_args *a, const plan_layout *l)
{
    uint64_t h = 0;
    for (int i = 0; i < l->nparams; i++) {
        h = plan_hash(h, &l->params[i].ndim, sizeof l->params[i].ndim);
        h = plan_hash(h, l->params[i].shape,
                      (size_t)l->params[i].ndim * sizeof *l->params[i].shape);
    }
    h = plan_hash(h, &a->cap_mb, sizeof a->cap_mb);
    h = plan_hash(h, &a->first_cap_mb, sizeof a->first_cap_mb);
    h = plan_hash(h, &a->psgd_rank, sizeof a->psgd_rank);
    for (int i = 0; i < a->options.n; i++)
        h = plan_hash(h, a->options.items[i], strlen(a->options.items[i]) + 1);
    const double sample = PLAN_SAMPLE_BYTES;
    return plan_hash(h, &sample, sizeof sample);
}

/* Writes the sample's shapes file (`ddphook bench shapes` format) at
 * `path` (a mkstemps template, filled in); its elements in *numel. */
static int write_sample(const plan_layout *l, double f, char *path,
                        double *numel)
{
    int fd = mkstemps(path, 7);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!out) {
        fprintf(stderr, "ddphook plan: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    *numel = 0;
    for (int i = 0; i < l->nparams; i++) {
        const preset_param *p = &l->params[i];
        double e = 1;
        fprintf(out, "p%d", i);
        for (int d = 0; d < p->ndim; d++) {
            int64_t dim = d == 0 ? sampled_dim0(p->shape[0], f) : p->shape[d];
            fprintf(out, " %lld", (long long)dim);
            e *= (double)dim;
        }
        fputc('\n', out);
        *numel += e;
    }
    if (fclose(out) != 0) {
        fprintf(stderr, "ddphook plan: %s: %s\n", path, strerror(errno));
        unlink(path);
        return 0;
    }
    return 1;
}

/* A temporary file's name in $TMPDIR: PREFIX-XXXXXX.SUFFIX. */
static void temp_name(char *out, size_t cap, const char *suffix)
{
    const char *dir = getenv("TMPDIR");
    snprintf(out, cap, "%s/ddph-plan-XXXXXX%s", dir && *dir ? dir : "/tmp",
             suffix);
}

/* Runs `ddphook bench hooks` at one rank (this program, a child process)
 * on the sample for `hook` and gives its median step in *seconds. */
static int run_bench(const plan_args *a, const char *hook, const char *shapes,
                     const char *cap, double *seconds)
{
    char self[4096], csv[256], reps[32], rank[32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "ddphook plan: /proc/self/exe: %s\n", strerror(errno));
        return 0;
    }
    self[n] = '\0';
    temp_name(csv, sizeof csv, ".csv");
    int fd = mkstemps(csv, 4);
    if (fd < 0) {
        fprintf(stderr, "ddphook plan: %s: %s\n", csv, strerror(errno));
        return 0;
    }
    close(fd);
    snprintf(reps, sizeof reps, "%d", a->repeats);
    snprintf(rank, sizeof rank, "%d", a->psgd_rank);
    const char *argv[32 + 2 * 64];
    int k = 0;
    const char *fixed[] = {self, "bench", "hooks", "--shapes", shapes,
                           "--hooks", hook, "--repeats", reps,
                           "--bucket-cap-mb", cap, "--rank", rank,
                           "--dtype", "f32", "--csv", csv};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        argv[k++] = fixed[i];
    if (a->plugin_path) {
        argv[k++] = "--plugin-path";
        argv[k++] = a->plugin_path;
    }
    for (int i = 0; i < a->options.n; i++) {
        argv[k++] = "--option";
        argv[k++] = a->options.items[i];
    }
    argv[k] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child's table is not ours to print: the CSV carries it. */
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execv(self, (char *const *)argv);
        _exit(127);
    }
    int status = 0, ok = pid > 0 && waitpid(pid, &status, 0) == pid &&
                         WIFEXITED(status) && WEXITSTATUS(status) == 0;
    unsigned char *text = NULL;
    size_t len = 0;
    ddph_err e;
    if (ok && ddph__file_read_regular(csv, (size_t)1 << 20, "a CSV's limit",
                                      &text, &len, &e) != DDPH_OK)
        ok = 0;
    unlink(csv);
    if (!ok) {
        fprintf(stderr, "ddphook plan: the calibration run (`ddphook bench "
                        "hooks` at one rank) failed: see above\n");
        free(text);
        return 0;
    }
    /* hook,bytes_per_step,seconds_per_step,... after a header line */
    int found = 0;
    char *save = NULL, *line = strtok_r((char *)text, "\n", &save);
    for (line = line ? strtok_r(NULL, "\n", &save) : NULL; line && !found;
         line = strtok_r(NULL, "\n", &save)) {
        char name[128];
        double bytes;
        found = sscanf(line, "%127[^,],%lf,%lf", name, &bytes, seconds) == 3 &&
                strcmp(name, hook) == 0 && isfinite(*seconds) && *seconds >= 0;
    }
    free(text);
    return found;
}

/* The hook's step on the sample divided by f: *seconds and the sample's
 * elements in *numel. */
static int sample_step(const plan_args *a, const plan_layout *l,
                       const char *hook, double f, double *seconds,
                       double *numel)
{
    char shapes[256], cap[BENCH_CAP_LEN];
    temp_name(shapes, sizeof shapes, ".shapes");
    if (!write_sample(l, f, shapes, numel))
        return 0;
    /* The caps divided as the parameters are: as many buckets. */
    double cap_mb = a->cap_mb;
    if (cap_mb != DDPH_CAP_AUTO && f > 1)
        cap_mb = fmax(cap_mb / f, DDPH_CAP_MIN_MB);
    int ok = run_bench(a, hook, shapes, bench_cap_text(cap_mb, cap), seconds);
    unlink(shapes);
    return ok;
}

/* The hook's step on the whole model.  A sampled step is a part that
 * does not shrink with the sample (each parameter's and bucket's own
 * overhead, as many in the sample) plus a part proportional to its
 * elements: two samples, of 1/f and 1/(4f) of each parameter's rows,
 * give both. */
static int measure_hook(const plan_args *a, const plan_layout *l,
                        const char *hook, double f, double *seconds)
{
    double t1, n1, t4, n4;
    if (!sample_step(a, l, hook, f, &t1, &n1))
        return 0;
    if (f == 1) {
        *seconds = t1;
        return 1;
    }
    if (!sample_step(a, l, hook, 4 * f, &t4, &n4))
        return 0;
    double per_element = n1 > n4 ? fmax(t1 - t4, 0) / (n1 - n4) : t1 / n1;
    double fixed = fmax(t1 - per_element * n1, 0);
    *seconds = fixed + per_element * (double)l->numel;
    return 1;
}

/* Why a kept figure measured at `at` is not reused now, or NULL. */
static const char *stale(const plan_args *a, plan_conditions at,
                         plan_conditions now, char *why, size_t cap)
{
    if (at.cpus != now.cpus) {
        snprintf(why, cap, "measured with %d CPUs, this machine has %d",
                 at.cpus, now.cpus);
        return why;
    }
    if (!a->calibrate_busy && plan_conditions_busy(at, a->busy_load)) {
        snprintf(why, cap, "measured on a busy machine (load average %.1f on "
                 "%d CPUs)", at.load, at.cpus);
        return why;
    }
    return NULL;
}

/* Measuring is refused on a busy machine unless asked for. */
static int may_measure(const plan_args *a, plan_conditions now)
{
    if (a->calibrate_busy || !plan_conditions_busy(now, a->busy_load))
        return 1;
    fprintf(stderr, "ddphook plan: this machine is busy (load average %.1f "
                    "on %d CPUs, at least --busy-load %g a CPU): the hooks' "
                    "arithmetic measured now would be slower than the "
                    "machine's own.  Run plan again when it is idle, give "
                    "--calibrate-busy to measure anyway (the figures are kept "
                    "with the load and flagged at every use), or "
                    "--no-calibration\n",
            now.load, now.cpus, a->busy_load);
    return 0;
}

int plan_calibrate(const plan_args *a, const plan_layout *l,
                   char names[][128], int nnames, plan_calib *c, uint64_t key)
{
    char msg[4400], why[160];
    if (plan_calib_load(a->calibration, c, msg, sizeof msg) < 0) {
        fprintf(stderr, "ddphook plan: %s\n", msg);
        return 0;
    }
    plan_conditions now = plan_conditions_now();
    int measure[MAX_HOOKS] = {0}, missing = 0;
    int machine = a->recalibrate || !c->have_machine;
    if (!machine && stale(a, c->machine_at, now, why, sizeof why)) {
        fprintf(stderr, "ddphook plan: the machine's sums in %s were %s: "
                        "measuring again\n", a->calibration, why);
        machine = 1;
    }
    for (int i = 0; i < nnames && i < MAX_HOOKS; i++) {
        const plan_calib_hook *h = plan_calib_find(c, names[i], key);
        measure[i] = a->recalibrate || !h;
        if (!measure[i] && stale(a, h->at, now, why, sizeof why)) {
            fprintf(stderr, "ddphook plan: %s's figure in %s was %s: "
                            "measuring again\n",
                    names[i], a->calibration, why);
            measure[i] = 1;
        }
        missing += measure[i];
    }
    if (!machine && !missing)
        return 1;
    if (!may_measure(a, now))
        return 0;
    double f = sample_factor(l), started = ddph__now();
    if (missing)
        fprintf(stderr, "ddphook plan: calibrating %d hook%s on this machine "
                        "(load average %.1f on %d CPUs), one rank, on %s\n",
                missing, missing == 1 ? "" : "s", now.load, now.cpus,
                f > 1 ? "two samples of the model (every parameter's first "
                        "dimension divided alike), fitted to its size"
                      : "the whole model");
    if (machine)
        plan_calib_measure_machine(c);
    int ok = 1;
    for (int i = 0, done = 0; ok && i < nnames && i < MAX_HOOKS; i++) {
        if (!measure[i])
            continue;
        fprintf(stderr, "ddphook plan: calibration %d of %d: %s, %d steps...",
                ++done, missing, names[i], a->repeats);
        double t0 = ddph__now(), s = 0;
        plan_conditions at = plan_conditions_now();
        ok = measure_hook(a, l, names[i], f, &s) &&
             plan_calib_put(c, names[i], key, s, at);
        if (ok)
            fprintf(stderr, " %.3g s a step (took %.1f s)\n", s,
                    ddph__now() - t0);
        else
            fprintf(stderr, "\nddphook plan: the calibration run gave no "
                            "figure for %s\n", names[i]);
    }
    if (ok && missing)
        fprintf(stderr, "ddphook plan: calibration took %.1f s\n",
                ddph__now() - started);
    if (ok && !plan_calib_save(a->calibration, c, msg, sizeof msg)) {
        fprintf(stderr, "ddphook plan: %s\n", msg);
        ok = 0;
    }
    return ok;
}

void plan_say_conditions(const plan_args *a, const plan_calib *c,
                         char names[][128], int n, uint64_t key)
{
    plan_conditions now = plan_conditions_now();
    double lo = 1e300, hi = -1;
    for (int i = 0; i < n; i++) {
        const plan_calib_hook *h = plan_calib_find(c, names[i], key);
        if (!h)
            continue;
        lo = h->at.load < lo ? h->at.load : lo;
        hi = h->at.load > hi ? h->at.load : hi;
        if (plan_conditions_busy(h->at, a->busy_load))
            printf("warning: %s's arithmetic was measured on a busy machine "
                   "(load average %.1f on %d CPUs, --calibrate-busy): too "
                   "slow by up to %.0fx; --recalibrate when idle\n",
                   names[i], h->at.load, h->at.cpus,
                   h->at.load / (h->at.cpus > 0 ? h->at.cpus : 1) + 1);
    }
    if (hi >= 0)
        printf("calibration: measured at load average %.1f-%.1f on %d CPUs "
               "(now %.1f)\n",
               lo, hi, now.cpus, now.load);
}
