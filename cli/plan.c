/* plan.c: `ddphook plan`: each hook's step time predicted for a model on
 * a cluster this machine cannot run (docs/plan.md).
 *
 * The model's buckets are the ones the runtime makes (it is asked, with
 * the job's bucket caps); each hook's collectives on each bucket are
 * priced by plan_hooks.h and plan_model.h; each hook's own arithmetic is
 * its step at one rank on the same buckets, measured once with `ddphook
 * bench hooks` and kept in a calibration file (plan_calib.h); buckets
 * run one after the other on the communication thread, each from the
 * moment backward has produced its gradients. */
#include "build-config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "bench_common.h"
#include "backends/mpi/backend_mpi.h"
#include "commands.h"
#include "plan_calib.h"
#include "plan_hooks.h"
#include "plan_model.h"
#include "plan_step.h"
#include "presets.h"
#include "support/config.h"
#include "support/safe_file.h"
#include "support/util.h"

#define ALL_HOOKS "allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8"
#define MAX_HOOKS 16

static const char plan_usage[] =
    "usage: ddphook plan [--model NAME | --shapes FILE | --trace DIR]\n"
    "           [--hosts H] [--ranks-per-host R] [--link-bandwidth RATE]\n"
    "           [--link-latency TIME] [--intra-bandwidth RATE]\n"
    "           [--intra-latency TIME] [--efficiency F] [--compute TIME]\n"
    "           [--device NAME] [--batch N] [--f32] [--utilization F]\n"
    "           [--collectives nccl|mpich]\n"
    "           [--backward-share F] [--job JOB.ini] [--bucket-cap-mb X]\n"
    "           [--first-bucket-cap-mb X] [--hooks LIST] [--rank R]\n"
    "           [--option NAME.KEY=VALUE]... [--calibration FILE]\n"
    "           [--recalibrate | --no-calibration] [--calibration-repeats N]\n"
    "           [--plugin-path DIRS] [--csv FILE]\n"
    "       ddphook plan --collective KIND:BYTES [cluster options] [--csv FILE]\n"
    "\n"
    "Predicts, for each hook, the time of a training step and the bytes each\n"
    "rank sends, for a model on a cluster described by the options, and\n"
    "recommends the fastest hook with its speed-up over allreduce.  The\n"
    "figures are predictions of a cost model (docs/plan.md says what it\n"
    "leaves out: congestion, stragglers, topology, NIC offloads).\n"
    "\n"
    "The model (one of):\n"
    "  --model NAME           a preset: gpt2-124m, resnet50, resnet18-cifar,\n"
    "                         gpt-example (examples/train_gpt), mlp\n"
    "                         (default gpt2-124m)\n"
    "  --shapes FILE          a parameter a line, NAME D0 [D1 ...], in\n"
    "                         registration order (`ddphook bench shapes`)\n"
    "  --trace DIR            the parameters of a gradient trace\n"
    "                         (`ddphook replay`, docs/replay.md)\n"
    "Gradients are f32; the buckets are the runtime's for these caps.\n"
    "\n"
    "The cluster:\n"
    "  --hosts H              hosts (default 2)\n"
    "  --ranks-per-host R     ranks on each host, numbered host by host\n"
    "                         (default 1)\n"
    "  --link-bandwidth RATE  each host's link to the switch, each way:\n"
    "                         100mbit, 1gbit, 10gbit, 400gbit, or bytes:\n"
    "                         1.25GB/s (default 10gbit)\n"
    "  --link-latency TIME    one message's start-up across the link:\n"
    "                         25us, 0.1ms, 0 (default 25us)\n"
    "  --intra-bandwidth RATE between two ranks of one host: a rate, or\n"
    "                         pcie3, pcie4, pcie5 (12, 24, 48 GB/s: GPUs\n"
    "                         without NVLink) (default: --device's NVLink;\n"
    "                         80gbit with --device cpu)\n"
    "  --intra-latency TIME   between two ranks of one host (default 1us)\n"
    "  --collectives KIND     nccl (the default with a GPU --device: its\n"
    "                         ring or tree, the cheaper) or mpich (MPICH\n"
    "                         4.0's algorithms and the runtime's own, for\n"
    "                         host buckets; the default with --device cpu)\n"
    "  --efficiency F         the share of the link's rate that carries\n"
    "                         payload (default 0.94: TCP over Ethernet with\n"
    "                         1500-byte frames)\n"
    "\n"
    "The step:\n"
    "  --compute TIME         forward + backward of one step; 0: the\n"
    "                         communication alone (default: estimated from\n"
    "                         the model's FLOPs on --device, and said so)\n"
    "  --device NAME          the GPU: v100, a100, h100 (default a100), or\n"
    "                         cpu (this machine: give --compute); its matrix\n"
    "                         rate prices the compute estimate, its memory\n"
    "                         bandwidth the hooks' arithmetic (measured on\n"
    "                         this CPU, scaled) and the sums, its NVLink the\n"
    "                         default --intra-bandwidth\n"
    "  --batch N              samples a rank takes in a step, for the\n"
    "                         estimate (default: the preset's, 32 else)\n"
    "  --f32                  the step's compute runs in f32 (default f16/bf16\n"
    "                         on tensor cores)\n"
    "  --utilization F        the share of the device's rate a step sustains\n"
    "                         (default 0.35)\n"
    "  --backward-share F     the share of --compute that is backward, during\n"
    "                         which finished buckets are sent (default 0.66);\n"
    "                         gradients are taken to finish in reverse\n"
    "                         registration order at a rate proportional to\n"
    "                         their size\n"
    "  --job JOB.ini          take bucket_cap_mb and first_bucket_cap_mb from\n"
    "                         the job's [runtime] (and its plugin_path)\n"
    "  --bucket-cap-mb X      bucket cap in MiB or auto (default: the\n"
    "                         runtime's, auto: docs/config.md)\n"
    "  --first-bucket-cap-mb X  the first bucket's cap, MiB or auto\n"
    "                         (default: the runtime's, auto)\n"
    "  --hooks LIST           hooks to predict (default\n"
    "                         " ALL_HOOKS ")\n"
    "  --rank R               PowerSGD's matrix_approximation_rank (default 4,\n"
    "                         as `bench hooks`)\n"
    "  --option NAME.KEY=VALUE  a hook option (repeatable): topk.ratio (default\n"
    "                         0.01), powersgd.min_compression_rate (default 2);\n"
    "                         every option also goes to the calibration run\n"
    "\n"
    "The calibration (each hook's own arithmetic, measured on this machine):\n"
    "  --calibration FILE     where it is kept (default ddphook-plan.cal in\n"
    "                         the current folder); a hook's step at one rank\n"
    "                         on these buckets is measured with `ddphook bench\n"
    "                         hooks` the first time a hook, model, caps and\n"
    "                         options are asked for, and read back after\n"
    "  --recalibrate          measure again, replacing the file's entries\n"
    "  --no-calibration       take the hooks' arithmetic as 0 (communication\n"
    "                         alone); reads and writes no file\n"
    "  --calibration-repeats N  steps measured, the median kept (default 5)\n"
    "  --plugin-path DIRS     folders searched for the hooks before the\n"
    "                         installed one\n"
    "\n"
    "Output:\n"
    "  --csv FILE             also write the table as CSV: hook,\n"
    "                         sent_bytes_per_rank, link_bytes_per_host,\n"
    "                         comm_seconds, arithmetic_seconds, step_seconds,\n"
    "                         speedup_over_allreduce\n"
    "  --collective KIND:BYTES  the cost of one collective instead (KIND:\n"
    "                         allreduce, allreduce-f16, allgather (BYTES from\n"
    "                         each rank), alltoall (BYTES to each peer),\n"
    "                         broadcast): time, algorithm, bytes on the\n"
    "                         busiest link; CSV: kind, bytes, ranks,\n"
    "                         algorithm, seconds, link_bytes\n";

typedef struct plan_args {
    const char *model, *shapes, *trace, *job, *hooks, *calibration;
    const char *plugin_path, *csv, *collective;
    bench_options options;
    plan_cluster cluster;
    double rate_bits, efficiency, compute, backward_share, utilization;
    const char *device, *collectives;
    int batch, f32, intra_set;
    double cap_mb, first_cap_mb;
    int psgd_rank, recalibrate, no_calibration, repeats;
} plan_args;

/* "100mbit", "1gbit", "1.25GB/s", ... into bytes per second, or a named
 * GPU interconnect (what a x16 slot carries in practice); 0 if not. */
static double parse_rate(const char *s)
{
    static const struct {
        const char *name;
        double bytes;
    } named[] = {{"pcie3", 12e9}, {"pcie4", 24e9}, {"pcie5", 48e9}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strcasecmp(s, named[i].name) == 0)
            return named[i].bytes;
    static const struct {
        const char *unit;
        double bytes;
    } units[] = {
        {"bit", 1.0 / 8}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8},
        {"gbit", 1e9 / 8}, {"tbit", 1e12 / 8}, {"b/s", 1}, {"kb/s", 1e3},
        {"mb/s", 1e6}, {"gb/s", 1e9}, {"tb/s", 1e12},
    };
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double r = v * units[i].bytes;
            return r <= 1e15 ? r : 0;
        }
    return 0;
}

/* "25us", "0.1ms", "2s", "0" into seconds; -1 if not. */
static double parse_time(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return -1;
    double unit = !*end                   ? (v == 0 ? 1 : -1)
                  : strcmp(end, "s") == 0  ? 1
                  : strcmp(end, "ms") == 0 ? 1e-3
                  : strcmp(end, "us") == 0 ? 1e-6
                  : strcmp(end, "ns") == 0 ? 1e-9
                                           : -1;
    return unit < 0 || v * unit > 1e6 ? -1 : v * unit;
}

static int parse_real(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* ---- the model's parameters and the runtime's buckets ------------------ */

typedef struct layout {
    preset_param *params;
    int nparams;
    size_t numel;
    char label[300];
    int nbuckets;
    size_t *bucket_numel;
    int *bucket_first, *bucket_count; /* into order[] */
    int *order;                       /* parameter indices, bucket by bucket */
} layout;

static int load_params(const plan_args *a, layout *l)
{
    char msg[4200];
    if (a->trace) {
        ddph_dtype dtype;
        if (!preset_from_trace(a->trace, &l->params, &l->nparams, &dtype, msg,
                               sizeof msg)) {
            fprintf(stderr, "ddphook plan: %s\n", msg);
            return 0;
        }
        snprintf(l->label, sizeof l->label, "trace %s", a->trace);
    } else if (a->shapes) {
        if (!preset_read_file(a->shapes, &l->params, &l->nparams, msg,
                              sizeof msg)) {
            fprintf(stderr, "ddphook plan: %s\n", msg);
            return 0;
        }
        snprintf(l->label, sizeof l->label, "shapes %s", a->shapes);
    } else if (!preset_load(a->model, &l->params, &l->nparams)) {
        fprintf(stderr, "ddphook plan: unknown model '%s' (gpt2-124m, "
                        "resnet50, resnet18-cifar, gpt-example, mlp)\n",
                a->model);
        return 0;
    } else {
        snprintf(l->label, sizeof l->label, "%s", a->model);
    }
    l->numel = preset_numel(l->params, l->nparams);
    return 1;
}

/* Asks the runtime for the buckets it makes of these parameters (one
 * rank, the allreduce hook): the same code a training job runs. */
static int runtime_layout(const plan_args *a, layout *l)
{
    char path[256], keys[256], cap[BENCH_CAP_LEN], first[BENCH_CAP_LEN];
    snprintf(keys, sizeof keys,
             "bucket_cap_mb = %s\nfirst_bucket_cap_mb = %s\n"
             "timeout_s = 600\ngradient_as_bucket_view = true\n",
             bench_cap_text(a->cap_mb, cap),
             bench_cap_text(a->first_cap_mb, first));
    if (!bench_write_job(path, sizeof path, 0, keys, a->plugin_path,
                         "allreduce", 4, NULL)) {
        fprintf(stderr, "ddphook plan: cannot write a job file in $TMPDIR\n");
        return 0;
    }
    ddph_ctx *ctx = NULL;
    ddph_model *m;
    int ok = ddph_open(path, NULL, NULL, &ctx) == DDPH_OK &&
             ddph_model_create(ctx, "plan", &m) == DDPH_OK;
    for (int i = 0; ok && i < l->nparams; i++)
        ok = ddph_model_add_param(m, l->params[i].name, NULL,
                                  l->params[i].shape, l->params[i].ndim,
                                  DDPH_F32, DDPH_CPU, NULL) == DDPH_OK;
    ok = ok && ddph_model_finalize(m) == DDPH_OK;
    if (ok) {
        l->nbuckets = ddph_model_bucket_count(m);
        l->bucket_numel = calloc((size_t)l->nbuckets, sizeof *l->bucket_numel);
        l->bucket_first = calloc((size_t)l->nbuckets, sizeof *l->bucket_first);
        l->bucket_count = calloc((size_t)l->nbuckets, sizeof *l->bucket_count);
        l->order = calloc((size_t)l->nparams + 1, sizeof *l->order);
        ok = l->bucket_numel && l->bucket_first && l->bucket_count && l->order;
        int at = 0;
        for (int b = 0; ok && b < l->nbuckets; b++) {
            ddph_bucket_info info;
            ok = ddph_model_bucket_info(m, b, &info) == DDPH_OK &&
                 at + info.nparams <= l->nparams;
            if (!ok)
                break;
            l->bucket_numel[b] = info.numel;
            l->bucket_first[b] = at;
            l->bucket_count[b] = info.nparams;
            memcpy(l->order + at, info.params,
                   (size_t)info.nparams * sizeof *l->order);
            at += info.nparams;
        }
    }
    if (!ok)
        fprintf(stderr, "ddphook plan: the runtime's bucket layout: %s\n",
                ctx ? ddph_last_error(ctx) : "ddph_open failed");
    if (ctx)
        ddph_close(ctx);
    unlink(path);
    return ok;
}

static void layout_free(layout *l)
{
    free(l->params);
    free(l->bucket_numel);
    free(l->bucket_first);
    free(l->bucket_count);
    free(l->order);
}

/* ---- calibration ------------------------------------------------------- */

/* What a hook's measurement depends on: the shapes, the caps, the
 * options. */
static uint64_t calibration_key(const plan_args *a, const layout *l)
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
    return h;
}

/* Runs `ddphook bench hooks` at one rank (this program, a child process)
 * on the model for `hook`, and puts its step into c with the conditions
 * it was measured at. */
static int measure_hook(const plan_args *a, const char *hook, uint64_t key,
                        plan_calib *c, plan_conditions at)
{
    char self[4096], csv[256], cap[64], reps[32], rank[32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "ddphook plan: /proc/self/exe: %s\n", strerror(errno));
        return 0;
    }
    self[n] = '\0';
    snprintf(csv, sizeof csv, "%s/ddph-plan-XXXXXX.csv",
             getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemps(csv, 4);
    if (fd < 0) {
        fprintf(stderr, "ddphook plan: %s: %s\n", csv, strerror(errno));
        return 0;
    }
    close(fd);
    bench_cap_text(a->cap_mb, cap);
    snprintf(reps, sizeof reps, "%d", a->repeats);
    snprintf(rank, sizeof rank, "%d", a->psgd_rank);
    const char *argv[32 + 2 * 64];
    int k = 0;
    argv[k++] = self;
    argv[k++] = "bench";
    argv[k++] = "hooks";
    argv[k++] = a->trace ? "--trace" : a->shapes ? "--shapes" : "--model";
    argv[k++] = a->trace ? a->trace : a->shapes ? a->shapes : a->model;
    argv[k++] = "--hooks";
    argv[k++] = hook;
    argv[k++] = "--repeats";
    argv[k++] = reps;
    argv[k++] = "--bucket-cap-mb";
    argv[k++] = cap;
    argv[k++] = "--rank";
    argv[k++] = rank;
    argv[k++] = "--dtype";
    argv[k++] = "f32";
    argv[k++] = "--csv";
    argv[k++] = csv;
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
    for (line = line ? strtok_r(NULL, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        char name[128];
        double bytes, seconds;
        if (sscanf(line, "%127[^,],%lf,%lf", name, &bytes, &seconds) == 3 &&
            strcmp(name, hook) == 0 &&
            plan_calib_put(c, name, key, seconds, at))
            found++;
    }
    free(text);
    return found > 0;
}

/* Fills c with every hook of `names` (measuring what is missing) and the
 * machine's sums; saves the file when anything was measured. */
static int calibrate(const plan_args *a, char names[][128], int nnames,
                     plan_calib *c, uint64_t key)
{
    char msg[4400];
    int r = plan_calib_load(a->calibration, c, msg, sizeof msg);
    if (r < 0) {
        fprintf(stderr, "ddphook plan: %s\n", msg);
        return 0;
    }
    int missing = 0, changed = 0;
    for (int i = 0; i < nnames; i++)
        missing += a->recalibrate || !plan_calib_find(c, names[i], key);
    plan_conditions now = plan_conditions_now();
    if ((missing || !c->have_machine || a->recalibrate) &&
        plan_conditions_busy(now))
        fprintf(stderr, "ddphook plan: warning: this machine is busy (load "
                        "average %.1f on %d CPUs): what is measured now is "
                        "slower than the machine's own; it is kept with that "
                        "load and flagged at every use (measure again with "
                        "--recalibrate when it is idle, or use "
                        "--no-calibration)\n",
                now.load, now.cpus);
    if (!c->have_machine || a->recalibrate) {
        plan_calib_measure_machine(c);
        changed = 1;
    }
    for (int i = 0, done = 0; i < nnames; i++) {
        if (!a->recalibrate && plan_calib_find(c, names[i], key))
            continue;
        fprintf(stderr, "ddphook plan: calibration %d of %d: %s's arithmetic "
                        "at one rank, %d steps...",
                ++done, missing, names[i], a->repeats);
        double t0 = ddph__now();
        if (!measure_hook(a, names[i], key, c, plan_conditions_now())) {
            fprintf(stderr, "\nddphook plan: the calibration run gave no "
                            "figure for %s\n", names[i]);
            return 0;
        }
        fprintf(stderr, " %.3g s a step (took %.1f s)\n",
                plan_calib_find(c, names[i], key)->seconds, ddph__now() - t0);
        changed = 1;
    }
    if (changed && !plan_calib_save(a->calibration, c, msg, sizeof msg)) {
        fprintf(stderr, "ddphook plan: %s\n", msg);
        return 0;
    }
    return 1;
}

/* Where each figure of the calibration was measured: never reused
 * without saying so, and a busy machine's or another machine's
 * figures flagged. */
static void say_conditions(const plan_calib *c, char names[][128], int n,
                           uint64_t key)
{
    plan_conditions now = plan_conditions_now();
    double lo = 1e300, hi = -1;
    for (int i = 0; i < n; i++) {
        const plan_calib_hook *h = plan_calib_find(c, names[i], key);
        if (!h)
            continue;
        lo = h->at.load < lo ? h->at.load : lo;
        hi = h->at.load > hi ? h->at.load : hi;
        if (plan_conditions_busy(h->at))
            printf("warning: %s's arithmetic was measured on a busy machine "
                   "(load average %.1f on %d CPUs): too slow by up to %.0fx; "
                   "--recalibrate when idle\n",
                   names[i], h->at.load, h->at.cpus,
                   h->at.load / (h->at.cpus > 0 ? h->at.cpus : 1) + 1);
        if (h->at.cpus != now.cpus)
            printf("warning: %s's arithmetic was measured with %d CPUs, this "
                   "machine has %d: --recalibrate\n",
                   names[i], h->at.cpus, now.cpus);
    }
    if (hi >= 0)
        printf("calibration: measured at load average %.1f-%.1f on %d CPUs "
               "(now %.1f)\n",
               lo, hi, now.cpus, now.load);
}

/* ---- the prediction ---------------------------------------------------- */

typedef struct prediction {
    double step_s, comm_s, arith_s, sent, link;
} prediction;

static prediction predict(plan_model *m, const plan_args *a, const layout *l,
                          const plan_recording *rec, double hook_step_one_rank,
                          double scatter_s)
{
    prediction p = {0, 0, 0, 0, 0};
    double fwd = a->compute * (1 - a->backward_share);
    double bwd = a->compute * a->backward_share;
    double done = 0, t = 0;
    for (int b = 0; b < l->nbuckets && b < rec->nbuckets; b++) {
        plan_hook_cost h = plan_hook_bucket(m, &rec->buckets[b], scatter_s);
        double share = l->numel ? (double)l->bucket_numel[b] / l->numel : 0;
        double arith = hook_step_one_rank * share + h.extra_s;
        done += (double)l->bucket_numel[b];
        double ready = fwd + bwd * (l->numel ? done / l->numel : 1);
        t = (t > ready ? t : ready) + arith + h.comm_s;
        p.comm_s += h.comm_s;
        p.arith_s += arith;
        p.sent += h.sent_bytes;
        p.link += h.link_bytes;
    }
    /* The end-of-step agreement: one small exchange ([runtime]
     * check_collectives). */
    plan_cost end = plan_collective(m, PLAN_ALLGATHER, 64);
    p.comm_s += end.seconds;
    t += end.seconds;
    p.step_s = t > a->compute ? t : a->compute;
    return p;
}

/* Each hook's collectives on the model's buckets, from a dry run at the
 * cluster's world size (plan_record.h). */
static int record_hooks(const plan_args *a, const layout *l,
                        char names[][128], int n, plan_recording *rec)
{
    const char **pnames = calloc((size_t)l->nparams + 1, sizeof *pnames);
    int *ndim = calloc((size_t)l->nparams + 1, sizeof *ndim);
    const int64_t **shapes = calloc((size_t)l->nparams + 1, sizeof *shapes);
    int ok = pnames && ndim && shapes;
    for (int j = 0; ok && j < l->nparams; j++) {
        const preset_param *pp = &l->params[l->order[j]];
        pnames[j] = pp->name;
        ndim[j] = pp->ndim;
        shapes[j] = pp->shape;
    }
    plan_rec_model model = {l->nbuckets, l->bucket_numel, l->bucket_first,
                            l->bucket_count, l->nparams, pnames, ndim,
                            shapes};
    int world = a->cluster.hosts * a->cluster.per_host;
    char msg[DDPH__ERR_LEN + 256];
    for (int i = 0; ok && i < n; i++) {
        ok = plan_record(names[i], a->plugin_path, &a->options, a->psgd_rank,
                         world, &model, &rec[i], msg, sizeof msg);
        if (!ok)
            fprintf(stderr, "ddphook plan: %s\n", msg);
    }
    if (!pnames || !ndim || !shapes)
        fprintf(stderr, "ddphook plan: out of memory\n");
    free(pnames);
    free(ndim);
    free(shapes);
    return ok;
}

static void human_bytes(double b, char *out, size_t cap)
{
    if (b >= 1e9)
        snprintf(out, cap, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(out, cap, "%.2f MB", b / 1e6);
    else if (b >= 1e3)
        snprintf(out, cap, "%.1f kB", b / 1e3);
    else
        snprintf(out, cap, "%.0f B", b);
}

static void human_rate(double bytes_per_s, char *out, size_t cap)
{
    double bits = bytes_per_s * 8;
    if (bits >= 1e9)
        snprintf(out, cap, "%g Gbit/s", bits / 1e9);
    else
        snprintf(out, cap, "%g Mbit/s", bits / 1e6);
}

static int write_csv(const char *path, const char *text, size_t len)
{
    ddph_err e;
    if (ddph__file_write_atomic(path, text, len, "csv", &e) != DDPH_OK) {
        fprintf(stderr, "ddphook plan: %s\n", e.msg);
        return 0;
    }
    return 1;
}

static int one_collective(const plan_args *a)
{
    const char *colon = strrchr(a->collective, ':');
    char kind_name[64];
    double bytes;
    plan_coll kind;
    if (!colon || (size_t)(colon - a->collective) >= sizeof kind_name ||
        !parse_real(colon + 1, 0, 1e15, &bytes) || bytes != floor(bytes)) {
        fprintf(stderr, "ddphook plan: --collective %s: KIND:BYTES (e.g. "
                        "allreduce:1048576)\n",
                a->collective);
        return 2;
    }
    snprintf(kind_name, sizeof kind_name, "%.*s",
             (int)(colon - a->collective), a->collective);
    if (!plan_coll_parse(kind_name, &kind)) {
        fprintf(stderr, "ddphook plan: --collective: unknown kind '%s' "
                        "(allreduce, allreduce-f16, allgather, alltoall, "
                        "broadcast)\n",
                kind_name);
        return 2;
    }
    plan_model *m = plan_model_new(&a->cluster);
    if (!m) {
        fprintf(stderr, "ddphook plan: out of memory\n");
        return 1;
    }
    plan_cost c = plan_collective(m, kind, bytes);
    plan_model_free(m);
    int n = a->cluster.hosts * a->cluster.per_host;
    printf("%s of %.0f bytes on %d ranks (%d hosts x %d): %.9g s by %s; "
           "%.0f bytes each way on the busiest link\n",
           kind_name, bytes, n, a->cluster.hosts, a->cluster.per_host,
           c.seconds, c.algorithm, c.link_bytes);
    if (a->csv) {
        char text[512];
        int len = snprintf(text, sizeof text,
                           "kind,bytes,ranks,algorithm,seconds,link_bytes\n"
                           "%s,%.0f,%d,%s,%.9g,%.0f\n",
                           kind_name, bytes, n, c.algorithm, c.seconds,
                           c.link_bytes);
        if (!write_csv(a->csv, text, (size_t)len))
            return 1;
    }
    return 0;
}

static int split_hooks(const char *list, char names[][128], int *n)
{
    *n = 0;
    int has_allreduce = 0;
    char *copy = ddph__strdup(list), *save = NULL;
    for (char *h = copy ? strtok_r(copy, ",", &save) : NULL; h;
         h = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_HOOKS - 1) {
            fprintf(stderr, "ddphook plan: more than %d hooks\n",
                    MAX_HOOKS - 1);
            free(copy);
            return 0;
        }
        has_allreduce |= strcmp(h, "allreduce") == 0;
        snprintf(names[(*n)++], 128, "%s", h);
    }
    free(copy);
    if (*n == 0) {
        fprintf(stderr, "ddphook plan: --hooks: an empty list\n");
        return 0;
    }
    /* allreduce is the reference of the speed-ups: always predicted. */
    if (!has_allreduce) {
        memmove(names[1], names[0], (size_t)*n * sizeof names[0]);
        snprintf(names[0], 128, "allreduce");
        (*n)++;
    }
    return 1;
}

static int plan_model_run(plan_args *a)
{
    char names[MAX_HOOKS][128];
    int nnames;
    plan_recording rec[MAX_HOOKS] = {{0}};
    if (!split_hooks(a->hooks, names, &nnames))
        return 2;
    layout l = {0};
    plan_calib cal = {0};
    plan_model *m = NULL;
    char *csv_text = NULL;
    size_t csv_len = 0;
    FILE *csv = NULL;
    int rc = 1, inited = 0, provided;
    if (!load_params(a, &l)) {
        rc = 2;
        goto out;
    }
    const preset_device *dev = preset_device_find(a->device);
    char compute_how[512] = "given (--compute)";
    if (a->compute < 0) {
        plan_step_inputs in = {a->trace || a->shapes ? NULL : a->model,
                               l.numel, a->batch, dev, a->f32,
                               a->utilization};
        a->compute = plan_estimate_compute(&in, compute_how,
                                           sizeof compute_how);
        if (a->compute < 0) {
            fprintf(stderr, "ddphook plan: the compute time: %s\n",
                    compute_how);
            rc = 2;
            goto out;
        }
    }
    uint64_t key = calibration_key(a, &l);
    if (!a->no_calibration && !calibrate(a, names, nnames, &cal, key))
        goto out;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    int layout_ok = runtime_layout(a, &l);
    if (!inited)
        ddph__mpi_finalize_watched(30);
    if (!layout_ok)
        goto out;
    if (!record_hooks(a, &l, names, nnames, rec)) {
        rc = 2;
        goto out;
    }
    plan_cluster k = a->cluster;
    k.add_f32 = cal.have_machine ? cal.add_f32 : 0;
    k.add_half = cal.have_machine ? cal.add_half : 0;
    /* The hooks' kernels are mostly bandwidth-bound: this CPU's measured
     * arithmetic, scaled by the device's memory bandwidth over this
     * CPU's (its f32 sum's). */
    double arith_scale = 1;
    if (dev && cal.have_machine && cal.add_f32 > 0) {
        arith_scale = plan_device_add(dev) / cal.add_f32;
        k.add_f32 = k.add_half = plan_device_add(dev);
    }
    if (!(m = plan_model_new(&k))) {
        fprintf(stderr, "ddphook plan: out of memory\n");
        goto out;
    }
    char rate[64], intra[64], total[32];
    char cap[BENCH_CAP_LEN], first[BENCH_CAP_LEN];
    human_rate(k.link_bw / a->efficiency, rate, sizeof rate);
    human_rate(k.intra_bw, intra, sizeof intra);
    human_bytes((double)l.numel * 4, total, sizeof total);
    printf("ddphook plan: %s, %.4g M parameters (%s of f32 gradients) in %d "
           "buckets (bucket_cap_mb %s, first_bucket_cap_mb %s)\n",
           l.label, (double)l.numel / 1e6, total, l.nbuckets,
           bench_cap_text(a->cap_mb, cap),
           bench_cap_text(a->first_cap_mb, first));
    printf("cluster: %d hosts x %d ranks = %d ranks; links %s (%.0f%% "
           "payload), %g us; within a host %s, %g us; collectives %s\n",
           k.hosts, k.per_host, k.hosts * k.per_host, rate,
           a->efficiency * 100, k.link_lat * 1e6, intra, k.intra_lat * 1e6,
           k.nccl ? "NCCL's" : "MPICH 4.0's and the runtime's");
    printf("step: compute %.4g s, %s; backward %.0f%% of it, overlapping\n",
           a->compute, compute_how, a->backward_share * 100);
    printf("hook arithmetic: %s%s%s\n",
           a->no_calibration ? "taken as 0 (--no-calibration)"
                             : "measured on this machine at one rank",
           dev && !a->no_calibration ? ", scaled to the memory bandwidth of "
                                     : "",
           dev && !a->no_calibration ? dev->label : "");
    if (!a->no_calibration)
        say_conditions(&cal, names, nnames, key);
    printf("\n%-18s %12s %12s %10s %10s %10s %12s\n", "hook", "sent/rank",
           "link/host", "comm s", "arith s", "step s", "x allreduce");
    if (a->csv && !(csv = open_memstream(&csv_text, &csv_len))) {
        fprintf(stderr, "ddphook plan: out of memory\n");
        goto out;
    }
    if (csv)
        fprintf(csv, "hook,sent_bytes_per_rank,link_bytes_per_host,"
                     "comm_seconds,arithmetic_seconds,step_seconds,"
                     "speedup_over_allreduce\n");
    prediction p[MAX_HOOKS];
    double reference = 0, best = 0;
    const char *best_name = NULL;
    for (int i = 0; i < nnames; i++) {
        const plan_calib_hook *c =
            a->no_calibration ? NULL : plan_calib_find(&cal, names[i], key);
        p[i] = predict(m, a, &l, &rec[i], c ? c->seconds * arith_scale : 0,
                       cal.have_machine ? cal.scatter * arith_scale : 0);
        if (strcmp(names[i], "allreduce") == 0)
            reference = p[i].step_s;
        if (!best_name || p[i].step_s < best) {
            best = p[i].step_s;
            best_name = names[i];
        }
    }
    for (int i = 0; i < nnames; i++) {
        double up = p[i].step_s > 0 ? reference / p[i].step_s : 0;
        char sent[32], link[32];
        human_bytes(p[i].sent, sent, sizeof sent);
        human_bytes(p[i].link, link, sizeof link);
        printf("%-18s %12s %12s %10.4f %10.4f %10.4f %11.2fx\n", names[i],
               sent, link, p[i].comm_s, p[i].arith_s, p[i].step_s, up);
        if (csv)
            fprintf(csv, "%s,%.0f,%.0f,%.9g,%.9g,%.9g,%.6g\n", names[i],
                    p[i].sent, p[i].link, p[i].comm_s, p[i].arith_s,
                    p[i].step_s, up);
    }
    /* Every hook but allreduce changes the gradients (rounding,
     * compression): worth it only past the model's own error. */
    double gain = best > 0 ? reference / best : 0;
    if (strcmp(best_name, "allreduce") == 0) {
        printf("\nrecommended: allreduce, predicted %.4f s a step: no hook "
               "is predicted faster\n",
               reference);
    } else if (gain < 1 + PLAN_MARGIN) {
        printf("\nrecommended: allreduce, predicted %.4f s a step: the "
               "fastest, %s, is predicted %.2fx its speed, within the "
               "model's own error (%.0f%%), not worth changing what a step "
               "learns\n",
               reference, best_name, gain, PLAN_MARGIN * 100);
    } else {
        printf("\nrecommended: %s, predicted %.4f s a step, %.2fx the speed "
               "of allreduce (beyond the model's own error, %.0f%%; "
               "compressing hooks also change what a step learns: "
               "docs/hooks.md)\n",
               best_name, best, gain, PLAN_MARGIN * 100);
    }
    printf("not modelled: congestion and other jobs on the links, "
           "stragglers, the network's topology beyond one switch, NIC "
           "offloads, %s, the hooks' GPU kernels (CPU figures scaled by "
           "memory bandwidth), and whether a compressing hook needs more "
           "steps to reach the same loss\n",
           k.nccl ? "NCCL's own tuning tables and protocols (its ring and "
                    "tree are priced by their steps)"
                  : "NCCL (collectives are priced as MPICH 4.0 runs them)");
    if (csv) {
        int closed = fclose(csv) == 0;
        csv = NULL;
        if (!closed || !write_csv(a->csv, csv_text, csv_len))
            goto out;
    }
    rc = 0;
out:
    if (csv)
        fclose(csv);
    free(csv_text);
    plan_model_free(m);
    for (int i = 0; i < nnames; i++)
        plan_recording_free(&rec[i]);
    plan_calib_free(&cal);
    layout_free(&l);
    return rc;
}

static int bad(const char *opt, const char *value, const char *want)
{
    fprintf(stderr, "ddphook plan: %s %s: %s\n", opt, value, want);
    return 2;
}

int cmd_plan(int argc, char **argv)
{
    plan_args a = {
        .model = "gpt2-124m",
        .hooks = ALL_HOOKS,
        .calibration = "ddphook-plan.cal",
        .cluster = {.hosts = 2, .per_host = 1, .link_lat = 25e-6,
                    .intra_bw = 10e9, .intra_lat = 1e-6},
        .rate_bits = 10e9,
        .efficiency = 0.94,
        .backward_share = 0.66,
        .compute = -1,
        .device = "a100",
        .batch = -1,
        .utilization = PLAN_UTILIZATION,
        .cap_mb = -1,
        .first_cap_mb = -1,
        .psgd_rank = 4,
        .repeats = 5,
    };
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'M'},
        {"shapes", required_argument, NULL, 'F'},
        {"trace", required_argument, NULL, 'T'},
        {"hosts", required_argument, NULL, 'H'},
        {"ranks-per-host", required_argument, NULL, 'R'},
        {"link-bandwidth", required_argument, NULL, 'b'},
        {"link-latency", required_argument, NULL, 'l'},
        {"intra-bandwidth", required_argument, NULL, 'B'},
        {"intra-latency", required_argument, NULL, 'L'},
        {"efficiency", required_argument, NULL, 'e'},
        {"compute", required_argument, NULL, 'c'},
        {"device", required_argument, NULL, 'D'},
        {"collectives", required_argument, NULL, 'O'},
        {"batch", required_argument, NULL, 'a'},
        {"f32", no_argument, NULL, '3'},
        {"utilization", required_argument, NULL, 'u'},
        {"backward-share", required_argument, NULL, 's'},
        {"job", required_argument, NULL, 'j'},
        {"bucket-cap-mb", required_argument, NULL, 'k'},
        {"first-bucket-cap-mb", required_argument, NULL, 'f'},
        {"hooks", required_argument, NULL, 'h' + 256},
        {"rank", required_argument, NULL, 'r'},
        {"option", required_argument, NULL, 'o'},
        {"calibration", required_argument, NULL, 'C'},
        {"recalibrate", no_argument, NULL, 'X'},
        {"no-calibration", no_argument, NULL, 'N'},
        {"calibration-repeats", required_argument, NULL, 'n'},
        {"plugin-path", required_argument, NULL, 'p'},
        {"csv", required_argument, NULL, 'v'},
        {"collective", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c, models = 0;
    double x;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'M': a.model = optarg; models++; break;
        case 'F': a.shapes = optarg; models++; break;
        case 'T': a.trace = optarg; models++; break;
        case 'H':
        case 'R':
            if (!parse_real(optarg, 1, c == 'H' ? 1e6 : 4096, &x) ||
                x != floor(x))
                return bad(c == 'H' ? "--hosts" : "--ranks-per-host", optarg,
                           c == 'H' ? "a whole number in [1, 1000000]"
                                    : "a whole number in [1, 4096]");
            *(c == 'H' ? &a.cluster.hosts : &a.cluster.per_host) = (int)x;
            break;
        case 'b':
        case 'B':
            if (!(x = parse_rate(optarg)))
                return bad(c == 'b' ? "--link-bandwidth" : "--intra-bandwidth",
                           optarg, "a rate like 100mbit, 10gbit, 1.25GB/s");
            if (c == 'b')
                a.rate_bits = x * 8;
            else
                a.cluster.intra_bw = x, a.intra_set = 1;
            break;
        case 'l':
        case 'L':
            if ((x = parse_time(optarg)) < 0)
                return bad(c == 'l' ? "--link-latency" : "--intra-latency",
                           optarg, "a time like 25us, 0.1ms, 0");
            *(c == 'l' ? &a.cluster.link_lat : &a.cluster.intra_lat) = x;
            break;
        case 'e':
            if (!parse_real(optarg, 0.01, 1, &a.efficiency))
                return bad("--efficiency", optarg, "a share in [0.01, 1]");
            break;
        case 'c':
            if ((a.compute = parse_time(optarg)) < 0)
                return bad("--compute", optarg, "a time like 0.25s, 80ms, 0");
            break;
        case 'D':
            if (strcmp(optarg, "cpu") != 0 && !preset_device_find(optarg))
                return bad("--device", optarg, "v100, a100, h100 or cpu");
            a.device = optarg;
            break;
        case 'O':
            if (strcmp(optarg, "nccl") != 0 && strcmp(optarg, "mpich") != 0)
                return bad("--collectives", optarg, "nccl or mpich");
            a.collectives = optarg;
            break;
        case 'a':
            if (!parse_real(optarg, 1, 1e9, &x) || x != floor(x))
                return bad("--batch", optarg, "a whole number in [1, 1e9]");
            a.batch = (int)x;
            break;
        case '3': a.f32 = 1; break;
        case 'u':
            if (!parse_real(optarg, 0.01, 1, &a.utilization))
                return bad("--utilization", optarg, "a share in [0.01, 1]");
            break;
        case 's':
            if (!parse_real(optarg, 0, 1, &a.backward_share))
                return bad("--backward-share", optarg, "a share in [0, 1]");
            break;
        case 'j': a.job = optarg; break;
        case 'k':
        case 'f':
            if (!bench_parse_cap(optarg, &x))
                return bad(c == 'k' ? "--bucket-cap-mb" : "--first-bucket-cap-mb",
                           optarg, "auto or MiB in [2^-20, 65536]");
            *(c == 'k' ? &a.cap_mb : &a.first_cap_mb) = x;
            break;
        case 'h' + 256: a.hooks = optarg; break;
        case 'r':
            if (!parse_real(optarg, 1, 4096, &x) || x != floor(x))
                return bad("--rank", optarg, "a whole number in [1, 4096]");
            a.psgd_rank = (int)x;
            break;
        case 'o': {
            const char *dot = strchr(optarg, '.'), *eq = strchr(optarg, '=');
            if (!dot || !eq || dot > eq || dot == optarg || eq == dot + 1)
                return bad("--option", optarg, "NAME.KEY=VALUE (e.g. "
                                               "topk.ratio=0.05)");
            if (a.options.n == (int)(sizeof a.options.items /
                                     sizeof *a.options.items))
                return bad("--option", optarg, "too many --option");
            a.options.items[a.options.n++] = optarg;
            break;
        }
        case 'C': a.calibration = optarg; break;
        case 'X': a.recalibrate = 1; break;
        case 'N': a.no_calibration = 1; break;
        case 'n':
            if (!parse_real(optarg, 1, 9, &x) || x != floor(x))
                return bad("--calibration-repeats", optarg,
                           "a whole number in [1, 9]");
            a.repeats = (int)x;
            break;
        case 'p': a.plugin_path = optarg; break;
        case 'v': a.csv = optarg; break;
        case 'K': a.collective = optarg; break;
        case 'h':
            fputs(plan_usage, stdout);
            return 0;
        default:
            fprintf(stderr, "ddphook plan: see `ddphook plan --help`\n");
            return 2;
        }
    }
    if (optind < argc)
        return bad("argument", argv[optind], "not an option (see --help)");
    if (models > 1) {
        fprintf(stderr, "ddphook plan: one of --model, --shapes, --trace\n");
        return 2;
    }
    if (a.recalibrate && a.no_calibration) {
        fprintf(stderr, "ddphook plan: --recalibrate and --no-calibration "
                        "contradict each other\n");
        return 2;
    }
    if ((double)a.cluster.hosts * a.cluster.per_host > 1e7) {
        fprintf(stderr, "ddphook plan: more than 10 million ranks\n");
        return 2;
    }
    a.cluster.link_bw = a.rate_bits / 8 * a.efficiency;
    const preset_device *dev = preset_device_find(a.device);
    if (dev && !a.intra_set)
        a.cluster.intra_bw = dev->nvlink_bw;
    a.cluster.nccl = a.collectives ? strcmp(a.collectives, "nccl") == 0
                                   : dev != NULL;
    if (a.collective)
        return one_collective(&a);
    /* The bucket caps: the job's, or the runtime's defaults. */
    ddph_config cfg;
    ddph_err e;
    if ((a.job ? ddph__config_load(a.job, &cfg, &e)
               : ddph__config_defaults(&cfg, &e)) != DDPH_OK) {
        fprintf(stderr, "ddphook plan: %s\n", e.msg);
        return 2;
    }
    if (a.cap_mb < 0)
        a.cap_mb = cfg.bucket_cap_mb;
    if (a.first_cap_mb < 0)
        a.first_cap_mb = cfg.first_bucket_cap_mb;
    if (a.job && !a.plugin_path && cfg.plugin_path && *cfg.plugin_path)
        a.plugin_path = cfg.plugin_path;
    int rc = plan_model_run(&a);
    ddph__config_free(&cfg);
    return rc;
}
