/* tester_faults.c: heap growth, state, failures injected into the
 * collectives, buckets kept past their call (tester.h). */
#include "build-config.h"

#include "tester.h"

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

static long long heap_in_use(void)
{
#ifdef HAVE_MALLINFO2
    struct mallinfo2 mi = mallinfo2();
    return (long long)mi.uordblks + (long long)mi.hblkhd;
#else
    return 0; /* not measured: heap_unmeasured says why */
#endif
}

/* Why the heap rows cannot judge here, or NULL. */
static const char *heap_unmeasured(void)
{
#ifdef HAVE_MALLINFO2
    return getenv(UNDER_VALGRIND) ? "not under valgrind (its leak check "
                                    "instead)"
                                  : NULL;
#else
    return "this build has no mallinfo2 (glibc 2.33+): --valgrind checks "
           "leaks";
#endif
}

/* One repetition (a step, a load); 0 when it failed, why said. */
typedef int (*heap_repeat)(void *arg, int k, char *why, size_t whylen);

/* The heap's growth a repetition over each of two windows of `repeats`
 * after `warmup` unmeasured ones, in per[]; 0 when a repetition failed. */
static int heap_growth(heap_repeat once, void *arg, int warmup, int repeats,
                       double per[2], char *why, size_t whylen)
{
    long long at[3] = {0, 0, 0};
    for (int k = 0; k < warmup + 2 * repeats; k++) {
        if (k >= warmup && (k - warmup) % repeats == 0)
            at[(k - warmup) / repeats] = heap_in_use();
        if (!once(arg, k, why, whylen))
            return 0;
    }
    at[2] = heap_in_use();
    per[0] = (double)(at[1] - at[0]) / repeats;
    per[1] = (double)(at[2] - at[1]) / repeats;
    return 1;
}

/* A heap row: steady when one of the two windows grew by HEAP_SLACK bytes
 * a repetition or less.  unit: "step"; over: "steps"; leak: the words of
 * a failure. */
static void heap_row(tester *t, const char *check, int ok, const char *why,
                     const double per[2], int repeats, const char *unit,
                     const char *over, const char *leak)
{
    const char *skip = heap_unmeasured();
    if (skip) {
        row(t, 1, 1, check, "%s", skip);
        return;
    }
    if (!ok) {
        row(t, 0, 0, check, "%s", why);
        return;
    }
    int steady = per[0] <= HEAP_SLACK || per[1] <= HEAP_SLACK;
    row(t, steady, 0, check,
        "rank %d: %+.0f then %+.0f bytes a %s over 2 x %d %s (at most %d in "
        "one of them)%s%s",
        t->rank, per[0], per[1], unit, repeats, over, HEAP_SLACK,
        steady ? "" : ": ", steady ? "" : leak);
}

typedef struct heap_steps {
    tester *t;
    run *r;
} heap_steps;

static int heap_step(void *arg, int k, char *why, size_t whylen)
{
    heap_steps *h = arg;
    return run_step(h->r, k, why, whylen, h->t->rank);
}

void check_heap(tester *t)
{
    const char *check = "heap steady over steps";
    char why[512] = "";
    double per[2] = {0, 0};
    int ok = 1;
    if (!heap_unmeasured()) {
        run r;
        heap_steps h = {t, &r};
        ok = run_open(t, &r, &realistic, "none", why, sizeof why) &&
             heap_growth(heap_step, &h, HEAP_WARMUP, HEAP_STEPS, per, why,
                         sizeof why);
        run_close(&r);
    }
    heap_row(t, check, ok, why, per, HEAP_STEPS, "step", "steps",
             "a leak every step (--valgrind shows where)");
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

/* A trainer loads a checkpoint once a job, but a hook's load can run
 * many times in a long-lived process (a retried resume, a rollback), and
 * a leak there is missed by the steps' heap row.  The saved state is
 * loaded into one instance LOAD_WARMUP times, then over two windows of
 * LOAD_REPEATS loads: growth in both, more than HEAP_SLACK bytes a load,
 * is a leak (as in check_heap). */
#define LOAD_WARMUP 2
#define LOAD_REPEATS 8

typedef struct state_load {
    run *r;
    const char *state;
} state_load;

static int heap_load(void *arg, int k, char *why, size_t whylen)
{
    state_load *l = arg;
    (void)k;
    if (ddph_state_load(l->r->ctx, l->state) == DDPH_OK)
        return 1;
    snprintf(why, whylen, "%s", ddph_last_error(l->r->ctx));
    return 0;
}

void check_save_load(tester *t)
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
    int same = ok, loads_ok = 0;
    double per_load[2] = {0, 0};
    char load_why[512] = "the round trip failed";
    if (ok && (ok = run_open(t, &b, &realistic, "none", why, sizeof why))) {
        if (ddph_state_load(b.ctx, state) != DDPH_OK) {
            snprintf(why, sizeof why, "%s", ddph_last_error(b.ctx));
            ok = 0;
        }
        for (int s = half; ok && s < t->steps; s++) {
            ok = run_step(&b, s, why, sizeof why, t->rank);
            same &= ok && checksum(&b) == want[s - half];
        }
        state_load l = {&b, state};
#ifdef HAVE_MALLINFO2 /* under valgrind too: its leak check sees them */
        loads_ok = ok && heap_growth(heap_load, &l, LOAD_WARMUP, LOAD_REPEATS,
                                     per_load, load_why, sizeof load_why);
#else
        (void)l, (void)heap_load;
        loads_ok = ok;
#endif
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
    heap_row(t, "heap steady over state loads", loads_ok, load_why,
             per_load, LOAD_REPEATS, "load", "loads of the saved state",
             "load leaks (--valgrind shows where)");
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

/* Bytes of a known pattern on each side of a probe bucket: a write
 * past either end lands in a trainer's other gradients, or the next
 * bucket's, where the runtime's buckets are one block (undetected there
 * on one rank, and on more as another check's wrong numbers). */
#define GUARD_BYTES 256
#define GUARD_BYTE 0xa5

/* Where the guards around a bucket of n floats at buf were written: 0
 * nowhere, -1 before its start, 1 past its end. */
static int guard_hit(const float *buf, size_t n)
{
    const unsigned char *before = (const unsigned char *)buf - GUARD_BYTES,
                        *after = (const unsigned char *)(buf + n);
    for (size_t i = 0; i < GUARD_BYTES; i++) {
        if (before[i] != GUARD_BYTE)
            return -1;
        if (after[i] != GUARD_BYTE)
            return 1;
    }
    return 0;
}

/* A bucket's buffer is the hook's only during its call (plugin.h): each
 * call here gets a fresh buffer, every one kept alive to the end, and
 * the results must still be what the calls returned after all of them
 * (a hook that keeps the pointer and writes through it later corrupts
 * a trainer's gradients, or the next bucket's).  Each buffer sits between
 * guards, checked after each call: the hook writes inside its bucket
 * only. */
void check_buffer_kept(tester *t, ddph_comm comm, const ddph_logger *log)
{
    const char *check = "buckets untouched after their call";
    char why[512] = "";
    unsigned char *block[PROBE_STEPS] = {0};
    float *buf[PROBE_STEPS] = {0}, *seen[PROBE_STEPS] = {0};
    ddph_tensor_view v[PROBE_STEPS][PROBE_TENSORS];
    ddph_bucket b[PROBE_STEPS];
    int ok = 1, changed = -1, outside = 0, outside_at = 0;
    for (int k = 0; k < PROBE_STEPS && ok; k++) {
        block[k] = malloc(PROBE_ELEMENTS * sizeof(float) + 2 * GUARD_BYTES);
        seen[k] = malloc(PROBE_ELEMENTS * sizeof(float));
        ok = block[k] && seen[k];
        if (!ok)
            break;
        memset(block[k], GUARD_BYTE,
               PROBE_ELEMENTS * sizeof(float) + 2 * GUARD_BYTES);
        buf[k] = (float *)(void *)(block[k] + GUARD_BYTES);
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
        if (ok && !outside && (outside = guard_hit(buf[k], PROBE_ELEMENTS)))
            outside_at = k + 1;
    }
    ddph__hook_destroy(h);
    for (int k = 0; k < PROBE_STEPS && ok && changed < 0; k++)
        if (memcmp(seen[k], buf[k], PROBE_ELEMENTS * sizeof(float)) != 0)
            changed = k;
    for (int k = 0; k < PROBE_STEPS; k++) {
        free(block[k]);
        free(seen[k]);
    }
    const char *inside = "writes inside its bucket only";
    if (ok && outside)
        row(t, 0, 0, inside,
            "call %d wrote %s its bucket (where a trainer's other "
            "gradients, or the next bucket's, are)",
            outside_at, outside < 0 ? "before the start of" : "past the end of");
    else if (ok)
        row(t, 1, 0, inside, "%d calls: none wrote in the %d bytes before "
                             "or after its bucket",
            PROBE_STEPS, GUARD_BYTES);
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

void check_error_path(tester *t, ddph_comm comm, const ddph_logger *log)
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
