/* tester_runs.c: the model of realistic, odd and empty tensors, the runs
 * made on it, loading, create/destroy and the per-step numerics
 * (tester.h). */
#include "build-config.h"

#include <limits.h>

#include "tester.h"

/* ---- a model with realistic, odd and empty tensors ------------------------ */



const shape_set realistic = {"realistic", 6,
    {{64, 32}, {64}, {33, 17}, {16, 8, 3, 3}, {16}, {10, 64}},
    {2, 1, 2, 4, 1, 2}, 0.004};
/* Each a bucket of its own: the cap (and half of it for the first) is
 * below one float, so that the 1-element tensor is not joined to the
 * next one. */
const shape_set odd = {"odd", 3, {{7, 13}, {1}, {5}}, {2, 1, 1},
                              0.000003};
const shape_set empty = {"empty", 1, {{0}}, {1}, 0.004};
/* About 1 MiB in one bucket of three tensors, none a multiple of 8
 * elements: enough for a hook's chunking and polling paths. */
const shape_set large = {"large", 3, {{1031, 257}, {4099}, {3, 5, 7}},
                                {2, 1, 3}, 4};

float grad_value(int rank, int step, int p, size_t i)
{
    uint32_t h = (uint32_t)(rank * 73856093) ^ (uint32_t)(step * 19349663) ^
                 (uint32_t)(p * 83492791) ^ (uint32_t)(i * 2654435761u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (float)(h % 20001) / 10000.0f - 1.0f;
}



const char *write_job(tester *t, const char *wrapper, double cap_mb)
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
               "timeout_s = 60\nallow_insecure_plugins = true\n"
               "gradient_as_bucket_view = %s\nlanes = %d\n[hook]\n",
            cap_mb, cap_mb / 2, t->as_view ? "true" : "false",
            t->lanes > 1 ? t->lanes : 1);
    ddph__config_write_kv(f, "name", t->plugin); /* a path may be long */
    fprintf(f, "wrapper = %s\n[hook.%s]\n%s", wrapper, t->name, t->options);
    return fclose(f) == 0 ? path : NULL;
}

int run_open(tester *t, run *r, const shape_set *set, const char *wrapper,
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
        r->own[i] = calloc(numel ? numel : 1, sizeof(float));
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        if (ddph_model_add_param(r->m, name, r->own[i], set->shapes[i],
                                 set->ndims[i], DDPH_F32, DDPH_CPU,
                                 NULL) != DDPH_OK)
            goto fail;
    }
    if (ddph_model_finalize(r->m) != DDPH_OK)
        goto fail;
    for (int i = 0; i < set->n; i++) {
        void *at;
        if (ddph_model_grad_ptr(r->m, i, &at) != DDPH_OK)
            goto fail;
        r->g[i] = at;
    }
    return 1;
fail:
    snprintf(why, whylen, "%s", ddph_last_error(r->ctx));
    return 0;
}

void run_close(run *r)
{
    ddph_close(r->ctx);
    for (int i = 0; i < r->n; i++)
        free(r->own[i]);
    memset(r, 0, sizeof *r);
}

/* One step whose gradients are those of step index s (s < 0: zeros);
 * leaves the reduced gradients in r->g. */
int run_step(run *r, int s, char *why, size_t whylen, int rank)
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
double error_vs_average(const run *r, int s, int world, worst_at *at)
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
            if (!(d <= worst)) {
                worst = d; /* NaN propagates as a failure */
                *at = (worst_at){.step = s, .tensor = i, .element = k,
                                 .numel = n};
            }
            if (fabs(mean) > scale)
                scale = fabs(mean);
        }
        free(loc);
        free(sum);
    }
    return scale > 0 ? worst / scale : worst;
}

uint32_t checksum(const run *r)
{
    uLong c = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < r->n; i++)
        c = crc32(c, (const Bytef *)r->g[i], (uInt)(r->numel[i] * sizeof(float)));
    return (uint32_t)c;
}

/* Whether v is the same on every rank. */
int same_everywhere(uint64_t v)
{
    uint64_t lo = v, hi = v;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* ---- the checks --------------------------------------------------------------- */

int check_load(tester *t)
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
    t->concurrent = (p->api.flags & DDPH_PLUGIN_CONCURRENT_BUCKETS) != 0;
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

void check_create_destroy(tester *t)
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

/* Where the ranks' results of step `step` first part from rank 0's (their
 * checksums differ): the lowest rank that holds other bits, and its first
 * such tensor and element.  Collective. */
typedef struct differ_at {
    int step, rank, tensor;
    size_t element, numel;
} differ_at;

static void first_difference(const run *r, int step, int my_rank,
                             differ_at *d)
{
    int tensor = -1;
    size_t element = 0;
    for (int i = 0; i < r->n; i++) {
        size_t bytes = r->numel[i] * sizeof(float);
        float *ref = malloc(bytes ? bytes : 1);
        int have = ref != NULL, all = 0;
        MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) { /* no room to compare: say no more than the checksum */
            free(ref);
            break;
        }
        if (my_rank == 0)
            memcpy(ref, r->g[i], bytes);
        MPI_Bcast(ref, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        for (size_t e = 0; tensor < 0 && e < r->numel[i]; e++)
            if (memcmp(&ref[e], &r->g[i][e], sizeof(float)) != 0) {
                tensor = i;
                element = e;
            }
        free(ref);
    }
    int mine = tensor >= 0 ? my_rank : INT_MAX, lowest = INT_MAX;
    MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    uint64_t where[2] = {(uint64_t)(tensor + 1), element};
    d->step = step;
    d->rank = lowest == INT_MAX ? -1 : lowest;
    if (d->rank < 0)
        return;
    MPI_Bcast(where, 2, MPI_UINT64_T, lowest, MPI_COMM_WORLD);
    d->tensor = (int)where[0] - 1;
    d->element = (size_t)where[1];
    d->numel = r->numel[d->tensor];
}

void check_numerics(tester *t, const shape_set *set, const char *wrapper,
                           double rtol, const char *label)
{
    char why[512] = "";
    run r;
    int ok = run_open(t, &r, set, wrapper, why, sizeof why);
    double worst = 0;
    worst_at at = {0}, step_at = {0};
    int same_result = 1, same_bytes = 1;
    differ_at differ = {.rank = -1};
    for (int s = 0; ok && s < t->steps; s++) {
        ok = run_step(&r, s, why, sizeof why, t->rank);
        if (!ok)
            break;
        double err = error_vs_average(&r, s, t->world, &step_at);
        if (!(err <= worst)) {
            worst = err;
            at = step_at;
        }
        int same = same_everywhere(checksum(&r));
        if (!same && same_result)
            first_difference(&r, s, t->rank, &differ);
        same_result &= same;
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
    char parted[160] = "";
    if (differ.rank >= 0)
        snprintf(parted, sizeof parted,
                 ": rank %d differs from rank 0 first at step %d, tensor %d, "
                 "element %zu of %zu",
                 differ.rank, differ.step, differ.tensor, differ.element,
                 differ.numel);
    row(t, same_result, 0, check, "%s%s",
        same_result ? "bit-identical on all ranks"
                    : "ranks hold different results",
        parted);
    snprintf(check, sizeof check, "%s: close to average", label);
    if (rtol == 0) /* error feedback: see check_error_feedback */
        row(t, isfinite(worst), 0, check,
            "max error %.3g of max |average|: finite; not judged per step "
            "(error feedback: see its row)",
            worst);
    else {
        char where[160] = "";
        if (!(worst <= rtol))
            snprintf(where, sizeof where,
                     "; the largest at step %d, tensor %d, element %zu of "
                     "%zu%s (rank %d)",
                     at.step, at.tensor, at.element, at.numel,
                     at.element + 1 == at.numel ? " (its last)"
                     : at.element == 0          ? " (its first)"
                                                : "",
                     t->rank);
        row(t, worst <= rtol, 0, check,
            "max error %.3g of max |average| (rtol %g, %s)%s", worst, rtol,
            rtol == t->rtol ? t->rtol_from : "half precision", where);
    }
}
