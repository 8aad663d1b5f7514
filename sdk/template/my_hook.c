/* my_hook: a ddphook hook to copy, rename and build.
 *
 * It averages gradients exactly as the built-in allreduce does, and shows
 * the patterns a real hook needs:
 *   - options declared in a schema and read in create;
 *   - state per bucket, keyed by bucket index (here: a moving average of
 *     each bucket's squared gradient norm);
 *   - an action once all buckets of a step are done (is_last: log the
 *     step's gradient norm every log_every steps);
 *   - save/load of the state, so a resumed job continues bit for bit;
 *   - statistics the trainer can query (ddph_model_hook_stats);
 *   - nonblocking collectives (ABI minor 2, option overlap): the bucket is
 *     reduced in two halves, the second half divided while the first is
 *     on the wire (driven by minor 4's progress between pieces of the
 *     division), with a blocking fallback on older hosts.
 *
 * Rename: change HOOK_NAME, the file name and the Makefile's target.  The
 * host finds the hook as <name>.so along [runtime] plugin_path, or by path:
 *   [hook]
 *   name = /path/to/my_hook.so
 * Test it: ddphook-plugin-test ./my_hook.so (and under mpiexec -n 2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>
#include <ddphook/plugin_util.h>

#define HOOK_NAME "my_hook"

/* ---- options: what [hook.my_hook] accepts ---------------------------------- */
static const ddph_option_spec my_options[] = {
    {"log_every", DDPH_OPT_INT, "100", 0, 1e9,
     "log the gradient norm every this many steps (0: never)"},
    {"ema", DDPH_OPT_REAL, "0.9", 0, 1,
     "weight of the past in the moving average of the norm"},
    {"overlap", DDPH_OPT_BOOL, "true", 0, 0,
     "reduce each bucket in two halves with nonblocking allreduces, "
     "dividing the second while the first travels"},
    {NULL, 0, NULL, 0, 0, NULL},
};

/* ---- state ------------------------------------------------------------------ */
typedef struct my_state {
    int64_t log_every;
    double ema;
    int overlap;
    uint64_t steps;     /* synchronised steps seen */
    double *sq_norm;    /* per bucket: moving average of ||g||^2 */
    int nbuckets;
    double step_sq;     /* sum over this step's buckets so far */
    double last_norm;   /* the last complete step's norm */
} my_state;

static ddph_status my_create(const ddph_services *s, const ddph_options *o,
                             void **state)
{
    my_state *st = calloc(1, sizeof *st);
    if (!st) {
        s->set_error(s, "out of memory");
        return DDPH_ERR_NOMEM;
    }
    st->log_every = s->opt_int(o, "log_every");
    st->ema = s->opt_real(o, "ema");
    st->overlap = s->opt_bool(o, "overlap");
    *state = st;
    return DDPH_OK;
}

static void my_destroy(const ddph_services *s, void *state)
{
    (void)s;
    my_state *st = state;
    if (st)
        free(st->sq_norm);
    free(st);
}

/* The slot of bucket `index`, grown on first sight. */
static double *bucket_slot(my_state *st, int index)
{
    if (index >= st->nbuckets) {
        double *n = realloc(st->sq_norm, (size_t)(index + 1) * sizeof *n);
        if (!n)
            return NULL;
        memset(n + st->nbuckets, 0,
               (size_t)(index + 1 - st->nbuckets) * sizeof *n);
        st->sq_norm = n;
        st->nbuckets = index + 1;
    }
    return &st->sq_norm[index];
}

/* Divides n elements at p by w in pieces, moving the outstanding
 * collectives along between pieces (minor 4's progress): MPI moves data
 * only inside MPI calls, so without it the first half would wait for the
 * blocking allreduce below before it travels. */
#define PIECE_ELEMENTS 65536
static ddph_status divide_progressing(const ddph_services *s, char *p,
                                      ddph_dtype dtype, size_t n, double w)
{
    int can_progress = DDPH_HAS_MEMBER(s, ddph_services, progress);
    size_t es = ddph_util_dtype_size(dtype);
    for (size_t done = 0; done < n; done += PIECE_ELEMENTS) {
        size_t piece = n - done < PIECE_ELEMENTS ? n - done : PIECE_ELEMENTS;
        ddph_status r = s->divide(s, p + done * es, dtype, piece, w);
        if (!r && can_progress)
            r = s->progress(s);
        if (r)
            return r;
    }
    return DDPH_OK;
}

/* The average of b across ranks: divide by the world size, then sum
 * (PyTorch's order).  With minor-2 services and `overlap`, in two halves:
 * the first half's allreduce travels while the second half is divided.
 * Between iallreduce and wait the hook must not touch that half. */
static ddph_status average(const my_state *st, const ddph_bucket *b,
                           const ddph_services *s)
{
    double w = (double)s->world_size;
    if (!st->overlap || !DDPH_HAS_MEMBER(s, ddph_services, iallreduce) ||
        b->numel < 2) {
        ddph_status r = s->divide(s, b->buffer, b->dtype, b->numel, w);
        return r ? r
                 : s->allreduce(s, s->world, b->buffer, b->numel, b->dtype,
                                DDPH_SUM);
    }
    size_t half = b->numel / 2;
    /* Element size from the dtype, for the second half's address. */
    size_t es = ddph_util_dtype_size(b->dtype);
    char *second = (char *)b->buffer + half * es;
    ddph_request *first = NULL;
    ddph_status r = s->divide(s, b->buffer, b->dtype, half, w);
    if (!r)
        r = s->iallreduce(s, s->world, b->buffer, half, b->dtype, DDPH_SUM,
                          &first);
    if (r)
        return r;
    /* Overlapped with the first half's allreduce. */
    r = divide_progressing(s, second, b->dtype, b->numel - half, w);
    if (!r)
        r = s->allreduce(s, s->world, second, b->numel - half, b->dtype,
                         DDPH_SUM);
    /* Every started request is waited for, even after an error. */
    ddph_status done = s->wait(s, first);
    return r ? r : done;
}

/* ---- the hook: called once per bucket per synchronised step ----------------- */
static ddph_status my_on_bucket(void *state, const ddph_bucket *b,
                                const ddph_services *s)
{
    my_state *st = state;
    /* 1. Reduce. */
    ddph_status r = average(st, b, s);
    if (r != DDPH_OK)
        return r; /* the service has set the message */

    /* 2. Per-bucket state, keyed by the bucket's index. */
    double *slot = bucket_slot(st, b->index);
    if (!slot) {
        s->set_error(s, "out of memory");
        return DDPH_ERR_NOMEM;
    }
    double sq = 0;
    const float *g = NULL;
    float *host_copy = NULL;
    if (b->dtype == DDPH_F32 && b->device == DDPH_CPU) { /* host memory */
        g = b->buffer;
    } else if (b->dtype == DDPH_F32 &&
               DDPH_HAS_MEMBER(s, ddph_services, copy)) {
        /* GPU memory (backend = nccl): never read it from the CPU; copy it
         * to the host first (a service of ABI minor 1, hence the test). */
        host_copy = malloc(b->numel * sizeof *host_copy + 1);
        if (!host_copy) {
            s->set_error(s, "out of memory");
            return DDPH_ERR_NOMEM;
        }
        r = s->copy(s, host_copy, b->buffer, b->numel * sizeof *host_copy,
                    DDPH_COPY_TO_HOST);
        if (r) {
            free(host_copy);
            return r;
        }
        g = host_copy;
    }
    for (size_t i = 0; g && i < b->numel; i++)
        sq += (double)g[i] * g[i];
    free(host_copy);
    *slot = st->ema * *slot + (1 - st->ema) * sq;
    st->step_sq += sq;

    /* 3. Once all buckets of the step are done. */
    if (b->is_last) {
        st->last_norm = sqrt(st->step_sq);
        st->step_sq = 0;
        st->steps++;
        if (st->log_every > 0 && st->steps % (uint64_t)st->log_every == 0 &&
            s->rank == 0)
            s->log(s, DDPH_LOG_INFO, "step %llu: gradient norm %.6g",
                   (unsigned long long)st->steps, st->last_norm);
    }
    return DDPH_OK;
}

/* ---- save / load: everything that shapes later results ---------------------- */
static ddph_status my_save(void *state, const ddph_services *s,
                           ddph_write_fn write, void *sink)
{
    (void)s;
    my_state *st = state;
    int32_t n = st->nbuckets;
    ddph_status r = write(sink, &st->steps, sizeof st->steps);
    if (!r)
        r = write(sink, &st->last_norm, sizeof st->last_norm);
    if (!r)
        r = write(sink, &n, sizeof n);
    if (!r && n)
        r = write(sink, st->sq_norm, (size_t)n * sizeof *st->sq_norm);
    return r;
}

static ddph_status my_load(void *state, const ddph_services *s,
                           ddph_read_fn read, void *source)
{
    my_state *st = state;
    int32_t n = 0;
    ddph_status r = read(source, &st->steps, sizeof st->steps);
    if (!r)
        r = read(source, &st->last_norm, sizeof st->last_norm);
    if (!r)
        r = read(source, &n, sizeof n);
    if (!r && (n < 0 || n > 1000000)) {
        s->set_error(s, "corrupt state: %d buckets", (int)n);
        return DDPH_ERR_IO;
    }
    if (!r && n && !bucket_slot(st, n - 1))
        return DDPH_ERR_NOMEM;
    if (!r && n)
        r = read(source, st->sq_norm, (size_t)n * sizeof *st->sq_norm);
    return r;
}

static size_t my_stats(void *state, ddph_stat *out, size_t max)
{
    my_state *st = state;
    ddph_stat all[] = {{"grad_norm", st->last_norm},
                       {"steps", (double)st->steps}};
    for (size_t i = 0; i < 2 && i < max; i++)
        out[i] = all[i];
    return 2;
}

/* ---- the table the host reads ----------------------------------------------- */
static const ddph_plugin_api_v1 my_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = HOOK_NAME,
    .version = "0.1.0",
    .description = "allreduce that logs the gradient norm (template)",
    .options = my_options,
    .create = my_create,
    .destroy = my_destroy,
    .on_bucket = my_on_bucket,
    .save = my_save,
    .load = my_load,
    .stats = my_stats,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor; /* minor-1 services are tested before use */
    return &my_plugin;
}
