/* plan_calib.c: see plan_calib.h. */
#include "build-config.h"

#include "plan_calib.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "cli/bench_common.h"
#include "device/cpu_ops.h"
#include "device/sparse_ops.h"
#include "cli/text_file.h"
#include "support/util.h"

#define MAGIC "ddphook-plan-calibration 2"
#define MAX_FILE_BYTES ((size_t)1 << 20)
#define MAX_HOOKS 4096

static int name_ok(const char *s)
{
    return text_hook_name_ok(s, sizeof((plan_calib_hook *)0)->name);
}

/* A value of the file: finite, in [0, most]. */
static int value(const char *s, double most, double *out)
{
    return text_number(s, 0, most, out);
}

uint64_t plan_hash(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    if (h == 0)
        h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

const plan_calib_hook *plan_calib_find(const plan_calib *c, const char *name,
                                       uint64_t key)
{
    for (int i = 0; i < c->nhooks; i++)
        if (c->hooks[i].key == key && strcmp(c->hooks[i].name, name) == 0)
            return &c->hooks[i];
    return NULL;
}

int plan_calib_put(plan_calib *c, const char *name, uint64_t key,
                   double seconds, plan_conditions at)
{
    if (!name_ok(name))
        return 0;
    plan_calib_hook *h = (plan_calib_hook *)plan_calib_find(c, name, key);
    if (!h) {
        if (c->nhooks == MAX_HOOKS)
            return 0;
        if (c->nhooks == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            plan_calib_hook *g = realloc(c->hooks, (size_t)cap * sizeof *g);
            if (!g)
                return 0;
            c->hooks = g;
            c->cap = cap;
        }
        h = &c->hooks[c->nhooks++];
        snprintf(h->name, sizeof h->name, "%s", name);
        h->key = key;
    }
    h->seconds = seconds;
    h->at = at;
    return 1;
}

plan_conditions plan_conditions_now(void)
{
    plan_conditions at = {-1, (int)sysconf(_SC_NPROCESSORS_ONLN)};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &at.load) != 1)
            at.load = -1;
        fclose(f);
    }
    return at;
}

int plan_conditions_busy(plan_conditions at, double busy_load)
{
    return at.load >= 0 && at.load >= busy_load * (at.cpus > 0 ? at.cpus : 1);
}

/* LOAD CPUS of a line: a load in [0, 1e6] (-1: unknown), CPUs >= 1. */
static int conditions(const char *load, const char *cpus, plan_conditions *at)
{
    double l, n;
    if (!load || !cpus || !value(cpus, 1e6, &n) || n < 1 || n != floor(n))
        return 0;
    if (strcmp(load, "-1") == 0)
        l = -1;
    else if (!value(load, 1e6, &l))
        return 0;
    *at = (plan_conditions){l, (int)n};
    return 1;
}

void plan_calib_free(plan_calib *c)
{
    free(c->hooks);
    memset(c, 0, sizeof *c);
}

typedef struct reading {
    plan_calib *c;
    int ended;   /* the end line was read */
    int seen[3]; /* add_f32, add_half, scatter */
} reading;

/* One line of the file (NUL-terminated, without its newline). */
static int parse_line(void *ctx, char *line, char *why, size_t cap)
{
    reading *r = ctx;
    plan_calib *c = r->c;
    int *ended = &r->ended, *seen = r->seen;
    char *save = NULL, *word = strtok_r(line, " ", &save);
    char *a = word ? strtok_r(NULL, " ", &save) : NULL;
    char *b = a ? strtok_r(NULL, " ", &save) : NULL;
    char *d = b ? strtok_r(NULL, " ", &save) : NULL;
    char *load = d ? strtok_r(NULL, " ", &save) : NULL;
    char *cpus = load ? strtok_r(NULL, " ", &save) : NULL;
    char *extra = cpus ? strtok_r(NULL, " ", &save) : NULL;
    plan_conditions at;
    double v;
    if (!word) {
        snprintf(why, cap, "empty line");
        return 0;
    }
    if (*ended) {
        snprintf(why, cap, "text after the end line");
        return 0;
    }
    if (strcmp(word, "conditions") == 0) {
        if (!conditions(a, b, &at) || d) {
            snprintf(why, cap, "want: conditions LOAD CPUS (the load average "
                     "and CPUs the machine's sums were measured at)");
            return 0;
        }
        c->machine_at = at;
        return 1;
    }
    if (strcmp(word, "add_f32") == 0 || strcmp(word, "add_half") == 0 ||
        strcmp(word, "scatter") == 0) {
        if (!a || b || !value(a, 1, &v)) {
            snprintf(why, cap, "%s takes one number in [0, 1]", word);
            return 0;
        }
        if (word[0] == 's')
            c->scatter = v;
        else if (word[4] == 'f')
            c->add_f32 = v;
        else
            c->add_half = v;
        seen[word[0] == 's' ? 2 : word[4] == 'f' ? 0 : 1] = 1;
        return 1;
    }
    if (strcmp(word, "hook") == 0) {
        char *end;
        errno = 0;
        uint64_t key = b && strlen(b) == 16 ? strtoull(b, &end, 16) : 0;
        if (!a || !b || !d || extra || !name_ok(a) || strlen(b) != 16 ||
            errno || *end || !value(d, 1e6, &v) ||
            !conditions(load, cpus, &at)) {
            snprintf(why, cap, "want: hook NAME KEY SECONDS LOAD CPUS (a hook "
                     "name, 16 hex digits, seconds in [0, 1e6], the load "
                     "average and CPUs it was measured at)");
            return 0;
        }
        if (!plan_calib_put(c, a, key, v, at)) {
            snprintf(why, cap, "more than %d hook lines", MAX_HOOKS);
            return 0;
        }
        return 1;
    }
    if (strcmp(word, "end") == 0) {
        if (!a || b || !value(a, MAX_HOOKS, &v) || v != c->nhooks) {
            snprintf(why, cap, "the end line counts %s hook lines where the "
                     "file has %d", a ? a : "no", c->nhooks);
            return 0;
        }
        *ended = 1;
        return 1;
    }
    snprintf(why, cap, "unknown line '%.40s'", word);
    return 0;
}

static int complete(void *ctx, char *why, size_t cap)
{
    if (((reading *)ctx)->ended)
        return 1;
    snprintf(why, cap, "no end line: truncated");
    return 0;
}

int plan_calib_load(const char *path, plan_calib *c, char *msg, size_t cap)
{
    memset(c, 0, sizeof *c);
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT)
        return 0;
    reading r = {c, 0, {0, 0, 0}};
    if (!text_file_read(path, MAX_FILE_BYTES, "calibration file", MAGIC, "",
                        parse_line, complete, &r, msg, cap)) {
        size_t n = strlen(msg);
        snprintf(msg + n, cap - n, " (remove the file to measure again)");
        plan_calib_free(c);
        return -1;
    }
    c->have_machine = r.seen[0] && r.seen[1] && r.seen[2];
    return 1;
}

int plan_calib_save(const char *path, const plan_calib *c, char *msg,
                    size_t cap)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(msg, cap, "out of memory");
        return 0;
    }
    fprintf(f, MAGIC "\n");
    if (c->have_machine)
        fprintf(f, "conditions %.3g %d\nadd_f32 %.17g\nadd_half %.17g\n"
                   "scatter %.17g\n",
                c->machine_at.load, c->machine_at.cpus, c->add_f32,
                c->add_half, c->scatter);
    for (int i = 0; i < c->nhooks; i++)
        fprintf(f, "hook %s %016" PRIx64 " %.17g %.3g %d\n", c->hooks[i].name,
                c->hooks[i].key, c->hooks[i].seconds, c->hooks[i].at.load,
                c->hooks[i].at.cpus);
    fprintf(f, "end %d\n", c->nhooks);
    return text_file_commit(f, &text, &len, path, "calibration file", msg,
                            cap);
}

/* Median seconds of `repeats` runs of fn(arg). */
static double timed(void (*fn)(void *), void *arg, int repeats)
{
    double t[9];
    for (int r = 0; r < repeats; r++) {
        double t0 = ddph__now();
        fn(arg);
        t[r] = ddph__now() - t0;
    }
    return bench_median(t, repeats);
}

typedef struct machine_work {
    void *a, *b;
    float *y, *v;
    int32_t *idx;
    size_t n, k;
    ddph_dtype dtype;
} machine_work;

static void run_add(void *arg)
{
    machine_work *w = arg;
    ddph__cpu_add(w->a, w->b, w->dtype, w->n);
}

static void run_scatter(void *arg)
{
    machine_work *w = arg;
    ddph__cpu_scatter_add(w->y, w->idx, w->v, w->k, 1.0f);
}

void plan_calib_measure_machine(plan_calib *c)
{
    /* 16 MiB of f32: past the caches, as a bucket is. */
    machine_work w = {.n = (size_t)4 << 20, .k = (size_t)1 << 20};
    w.a = calloc(w.n, 4);
    w.b = calloc(w.n, 4);
    w.y = calloc(w.n, 4);
    w.v = calloc(w.k, 4);
    w.idx = malloc(w.k * sizeof *w.idx);
    if (!w.a || !w.b || !w.y || !w.v || !w.idx) {
        c->have_machine = 0;
        goto out;
    }
    uint64_t x = 88172645463325252ull;
    for (size_t j = 0; j < w.k; j++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.idx[j] = (int32_t)(x % w.n);
        w.v[j] = 1.0f;
    }
    c->machine_at = plan_conditions_now();
    w.dtype = DDPH_F32;
    c->add_f32 = timed(run_add, &w, 5) / ((double)w.n * 4);
    w.dtype = DDPH_F16;
    c->add_half = timed(run_add, &w, 5) / ((double)w.n * 2);
    c->scatter = timed(run_scatter, &w, 5) / (double)w.k;
    c->have_machine = 1;
out:
    free(w.a);
    free(w.b);
    free(w.y);
    free(w.v);
    free(w.idx);
}
