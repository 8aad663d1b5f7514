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

#include "cli/bench_common.h"
#include "backends/mpi/backend_mpi.h"
#include "cli/commands.h"
#include "cli/gpu_profile.h"
#include "plan_args.h"
#include "plan_calib.h"
#include "plan_calibrate.h"
#include "plan_hooks.h"
#include "plan_model.h"
#include "plan_step.h"
#include "cli/presets.h"
#include "support/config.h"
#include "support/safe_file.h"
#include "support/util.h"

/* ---- the model's parameters and the runtime's buckets ------------------ */


static int load_params(const plan_args *a, plan_layout *l)
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
                        "resnet50, resnet18-cifar, lstm-wikitext2, gpt-example, mlp)\n",
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
static int runtime_layout(const plan_args *a, plan_layout *l)
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

static void layout_free(plan_layout *l)
{
    free(l->params);
    free(l->bucket_numel);
    free(l->bucket_first);
    free(l->bucket_count);
    free(l->order);
}

/* ---- the prediction ---------------------------------------------------- */

typedef struct prediction {
    double step_s, comm_s, arith_s, sent, link;
} prediction;

static prediction predict(plan_model *m, const plan_args *a, const plan_layout *l,
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
static int record_hooks(const plan_args *a, const plan_layout *l,
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
        !plan_parse_real(colon + 1, 0, 1e15, &bytes) || bytes != floor(bytes)) {
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

/* Where each hook's arithmetic comes from: the GPU profile's own figure,
 * this machine's calibration (scaled to the device), or none. */
static void say_arithmetic(const plan_args *a, const preset_device *dev,
                           const gpu_profile *prof, char names[][128], int n,
                           int ncal)
{
    if (prof) {
        printf("hook arithmetic: as --device-profile %s measured it (%s, one "
               "rank) for", a->device_profile, prof->device);
        int listed = 0;
        for (int i = 0; i < n; i++)
            if (plan_profile_hook(prof, names[i], 1) >= 0)
                printf("%s %s", listed++ ? "," : "", names[i]);
        printf("%s\n", listed ? "" : " none (its figures are from more than "
                                     "one rank, or of other hooks)");
    }
    if (!prof || ncal > 0)
        printf("hook arithmetic%s: %s%s%s\n", prof ? " of the others" : "",
               a->no_calibration ? "taken as 0 (--no-calibration)"
                                 : "measured on this machine at one rank",
               dev && !a->no_calibration
                   ? ", scaled to the memory bandwidth of "
                   : "",
               dev && !a->no_calibration ? dev->label : "");
}

static int plan_model_run(plan_args *a)
{
    char names[MAX_HOOKS][128];
    int nnames;
    plan_recording rec[MAX_HOOKS] = {{0}};
    if (!split_hooks(a->hooks, names, &nnames))
        return 2;
    plan_layout l = {0};
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
    gpu_profile prof;
    preset_device measured;
    char measured_label[512];
    int have_prof = 0;
    if (a->device_profile) {
        char msg[DDPH__ERR_LEN + 300];
        if (!dev) {
            fprintf(stderr, "ddphook plan: --device-profile measures a GPU: "
                            "give a GPU --device (v100, a100, h100) for the "
                            "matrix rates it does not measure, not cpu\n");
            rc = 2;
            goto out;
        }
        if (!gpu_profile_load(a->device_profile, &prof, msg, sizeof msg)) {
            fprintf(stderr, "ddphook plan: --device-profile: %s\n", msg);
            rc = 2;
            goto out;
        }
        plan_device_measured(dev, &prof, &measured, measured_label,
                             sizeof measured_label);
        if (!a->intra_set)
            a->cluster.intra_bw = measured.nvlink_bw;
        dev = &measured;
        have_prof = 1;
    }
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
    /* The hooks the profile measured need no calibration. */
    char cal_names[MAX_HOOKS][128];
    int ncal = 0;
    for (int i = 0; i < nnames; i++)
        if (!have_prof || plan_profile_hook(&prof, names[i], 1) < 0)
            memcpy(cal_names[ncal++], names[i], sizeof names[i]);
    uint64_t key = plan_calibration_key(a, &l);
    if (!a->no_calibration && ncal > 0 &&
        !plan_calibrate(a, &l, cal_names, ncal, &cal, key))
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
    if (have_prof) /* the device's sums as measured */
        k.add_f32 = k.add_half = plan_device_add(dev);
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
    say_arithmetic(a, dev, have_prof ? &prof : NULL, names, nnames, ncal);
    if (!a->no_calibration)
        plan_say_conditions(a, &cal, cal_names, ncal, key);
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
        double gpu = have_prof ? plan_profile_hook(&prof, names[i],
                                                   (double)l.numel * 4)
                               : -1;
        p[i] = predict(m, a, &l, &rec[i],
                       gpu >= 0 ? gpu : c ? c->seconds * arith_scale : 0,
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
           "offloads, %s, %s, and whether a compressing hook needs more "
           "steps to reach the same loss\n",
           k.nccl ? "NCCL's own tuning tables and protocols (its ring and "
                    "tree are priced by their steps)"
                  : "NCCL (collectives are priced as MPICH 4.0 runs them)",
           have_prof ? "the hooks' GPU kernels on the model's own shapes "
                       "(the profile's, on one matrix, scaled by bytes)"
                     : "the hooks' GPU kernels (CPU figures scaled by "
                       "memory bandwidth)");
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

int cmd_plan(int argc, char **argv)
{
    plan_args a;
    int parsed = plan_args_parse(argc, argv, &a);
    if (parsed >= 0)
        return parsed;
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
