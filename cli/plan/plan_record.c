/* plan_record.c: see plan_record.h. */
#include "build-config.h"

#include "plan_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cpu_ops.h"
#include "plugin/hook.h"
#include "support/config.h"

/* The recording communicator: one world of `size` ranks, this one rank
 * 0, and the calls of the bucket being run. */
typedef struct recorder {
    struct ddph_group world;
    const void *bucket;   /* the buffer on_bucket was handed */
    size_t bucket_bytes;
    plan_rec_bucket *into; /* NULL outside on_bucket */
    int failed;
} recorder;

static ddph_status note(recorder *r, plan_rec_kind kind, size_t count,
                        ddph_dtype dtype, int op, const void *buf,
                        ddph_err *e)
{
    plan_rec_bucket *b = r->into;
    if (!b) /* outside a bucket (on_step_end): not a bucket's cost */
        return DDPH_OK;
    plan_rec_call *calls = realloc(b->calls, (size_t)(b->ncalls + 1) *
                                                 sizeof *calls);
    if (!calls) {
        r->failed = 1;
        return ddph__fail(e, DDPH_ERR_NOMEM, "out of memory");
    }
    size_t es = ddph__dtype_size(dtype);
    calls[b->ncalls++] = (plan_rec_call){
        .kind = kind,
        .count = count,
        .elem_bytes = es,
        .half = dtype == DDPH_F16 || dtype == DDPH_BF16,
        .sum = op == DDPH_SUM,
        .whole_bucket = kind == PLAN_REC_ALLREDUCE && buf == r->bucket &&
                        count * es == r->bucket_bytes,
    };
    b->calls = calls;
    return DDPH_OK;
}

static struct ddph_group *rec_world(void *self)
{
    return &((recorder *)self)->world;
}

static ddph_status rec_split(void *self, struct ddph_group *parent, int color,
                             int key, struct ddph_group **out, ddph_err *err)
{
    (void)self, (void)parent, (void)color, (void)key, (void)out;
    return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                      "`ddphook plan` prices hooks on the world group only: "
                      "this hook splits it");
}

static ddph_status rec_intra(void *self, struct ddph_group **out,
                             ddph_err *err)
{
    return rec_split(self, NULL, 0, 0, out, err);
}

/* Each rank of the faked world holds what this one holds: a sum leaves
 * the buffer as it is (the hooks divide it by W after: smaller values,
 * the same work), a gather repeats this rank's part. */
static ddph_status rec_allreduce(void *self, struct ddph_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, ddph_redop op,
                                 ddph_err *err)
{
    (void)g;
    return note(self, PLAN_REC_ALLREDUCE, count, dtype, (int)op, buf, err);
}

static void repeat(const void *send, void *recv, size_t bytes, int times)
{
    for (int i = 0; i < times; i++)
        if ((char *)recv + (size_t)i * bytes != send)
            memmove((char *)recv + (size_t)i * bytes, send, bytes);
}

static ddph_status rec_allgather(void *self, struct ddph_group *g,
                                 const void *send, void *recv, size_t count,
                                 ddph_dtype dtype, ddph_err *err)
{
    repeat(send, recv, count * ddph__dtype_size(dtype), g->size);
    return note(self, PLAN_REC_ALLGATHER, count, dtype, -1, send, err);
}

static ddph_status rec_allgatherv(void *self, struct ddph_group *g,
                                  const void *send, void *recv,
                                  const size_t *counts, ddph_dtype dtype,
                                  ddph_err *err)
{
    size_t es = ddph__dtype_size(dtype), at = 0, most = 0;
    for (int i = 0; i < g->size; i++) {
        size_t n = counts[i] < counts[0] ? counts[i] : counts[0];
        if (i)
            memmove((char *)recv + at * es, send, n * es);
        else if ((char *)recv != send)
            memmove(recv, send, n * es);
        at += counts[i];
        most = counts[i] > most ? counts[i] : most;
    }
    return note(self, PLAN_REC_ALLGATHERV, most, dtype, -1, send, err);
}

static ddph_status rec_alltoall(void *self, struct ddph_group *g,
                                const void *send, void *recv, size_t count,
                                ddph_dtype dtype, ddph_err *err)
{
    if (recv != send)
        memmove(recv, send, count * (size_t)g->size * ddph__dtype_size(dtype));
    return note(self, PLAN_REC_ALLTOALL, count, dtype, -1, send, err);
}

static ddph_status rec_broadcast(void *self, struct ddph_group *g, void *buf,
                                 size_t count, ddph_dtype dtype, int root,
                                 ddph_err *err)
{
    (void)g, (void)root;
    return note(self, PLAN_REC_BROADCAST, count, dtype, -1, buf, err);
}

static ddph_status rec_reduce_scatter(void *self, struct ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_redop op, ddph_err *err)
{
    (void)g;
    if (recv != send)
        memmove(recv, send, count * ddph__dtype_size(dtype));
    return note(self, PLAN_REC_REDUCE_SCATTER, count, dtype, (int)op, send,
                err);
}

/* The nonblocking ones complete when they start. */
static ddph_status rec_start_allreduce(void *self, struct ddph_group *g,
                                       void *buf, size_t count,
                                       ddph_dtype dtype, ddph_redop op,
                                       ddph_comm_op *out, ddph_err *err)
{
    return out->done = rec_allreduce(self, g, buf, count, dtype, op, err);
}

static ddph_status rec_start_allgather(void *self, struct ddph_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_comm_op *out, ddph_err *err)
{
    return out->done = rec_allgather(self, g, send, recv, count, dtype, err);
}

static ddph_status rec_start_allgatherv(void *self, struct ddph_group *g,
                                        const void *send, void *recv,
                                        const size_t *counts, ddph_dtype dtype,
                                        ddph_comm_op *out, ddph_err *err)
{
    return out->done = rec_allgatherv(self, g, send, recv, counts, dtype, err);
}

static ddph_status rec_start_alltoall(void *self, struct ddph_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_comm_op *out, ddph_err *err)
{
    return out->done = rec_alltoall(self, g, send, recv, count, dtype, err);
}

static ddph_status rec_wait(void *self, ddph_comm_op *op, ddph_err *err)
{
    (void)self, (void)err;
    return op->done;
}

static ddph_status rec_test(void *self, ddph_comm_op *op, int *done,
                            ddph_err *err)
{
    (void)self, (void)err;
    *done = 1;
    return op->done;
}

static ddph_status rec_progress(void *self, ddph_comm_op *op, ddph_err *err)
{
    (void)self, (void)err;
    return op->done;
}

static const ddph_comm_ops recorder_ops = {
    .name = "plan-recorder",
    .world = rec_world,
    .split = rec_split,
    .intra_node = rec_intra,
    .allreduce = rec_allreduce,
    .allgather = rec_allgather,
    .allgatherv = rec_allgatherv,
    .broadcast = rec_broadcast,
    .reduce_scatter = rec_reduce_scatter,
    .alltoall = rec_alltoall,
    .start_allreduce = rec_start_allreduce,
    .start_allgather = rec_start_allgather,
    .start_allgatherv = rec_start_allgatherv,
    .start_alltoall = rec_start_alltoall,
    .wait = rec_wait,
    .test = rec_test,
    .progress = rec_progress,
};

/* Gradients a dry run can work on: small, varied, reproducible. */
static void fill(void *buf, ddph_dtype dtype, size_t n, uint32_t seed)
{
    float *f = malloc(n * sizeof *f);
    if (!f)
        return;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    ddph_err e;
    if (dtype == DDPH_F32)
        memcpy(buf, f, n * sizeof *f);
    else if (ddph__cpu_cast(f, DDPH_F32, buf, dtype, n, 1.0, &e) != DDPH_OK)
        memset(buf, 0, n * ddph__dtype_size(dtype));
    free(f);
}

static void free_buckets(plan_rec_bucket *b, int n)
{
    for (int i = 0; b && i < n; i++)
        free(b[i].calls);
    free(b);
}

void plan_recording_free(plan_recording *r)
{
    free_buckets(r->buckets, r->nbuckets);
    r->buckets = NULL;
    r->nbuckets = 0;
}

/* The views of the model's tensors, bucket by bucket. */
static ddph_tensor_view *make_views(const plan_rec_model *m)
{
    ddph_tensor_view *v = calloc((size_t)m->ntensors + 1, sizeof *v);
    for (int b = 0; v && b < m->nbuckets; b++) {
        size_t at = 0;
        for (int j = m->first[b]; j < m->first[b] + m->count[b]; j++) {
            size_t n = 1;
            for (int d = 0; d < m->ndim[j]; d++)
                n *= (size_t)m->shapes[j][d];
            v[j] = (ddph_tensor_view){m->names[j], at, n, m->ndim[j],
                                      m->shapes[j]};
            at += n;
        }
    }
    return v;
}

/* One step: every bucket in launch order, then the step's end. */
static ddph_status dry_step(ddph_hook *h, recorder *r,
                            const plan_rec_model *m, ddph_tensor_view *views,
                            ddph_dtype store, double divided_by, void *buffer,
                            uint64_t it, plan_rec_bucket *into, ddph_err *e)
{
    size_t es = ddph__dtype_size(store);
    for (int b = 0; b < m->nbuckets; b++) {
        fill(buffer, store, m->numel[b], (uint32_t)(b * 7919 + it));
        ddph_bucket bk = {
            .struct_size = sizeof bk,
            .index = b,
            .count = m->nbuckets,
            .is_last = b == m->nbuckets - 1,
            .iteration = it,
            .dtype = store,
            .device = DDPH_CPU,
            .buffer = buffer,
            .numel = m->numel[b],
            .ntensors = (size_t)m->count[b],
            .tensors = views + m->first[b],
            .model = "plan",
            .divided_by = divided_by,
        };
        r->bucket = buffer;
        r->bucket_bytes = m->numel[b] * es;
        r->into = &into[b];
        uint64_t sent = 0, received = 0;
        ddph_status st = ddph__hook_on_bucket(h, &bk, NULL, &sent, &received,
                                              e);
        r->into = NULL;
        into[b].sent_bytes = (double)sent;
        if (st != DDPH_OK)
            return st;
    }
    ddph_step_info info = {.struct_size = sizeof info, .step = it + 1,
                           .iteration = it + 1, .synced = 1,
                           .model = "plan"};
    return ddph__hook_on_step_end(h, &info, e);
}

static ddph_status run_steps(ddph_hook *h, recorder *r,
                             const plan_rec_model *m, int world,
                             plan_recording *out, ddph_err *e)
{
    ddph_dtype store = ddph__hook_bucket_dtype(h, DDPH_F32);
    double divided_by =
        ddph__hook_divides_first(h, store) ? (double)world : 0;
    size_t most = 1;
    for (int b = 0; b < m->nbuckets; b++)
        most = m->numel[b] > most ? m->numel[b] : most;
    ddph_tensor_view *views = make_views(m);
    ddph_bucket *lay = calloc((size_t)m->nbuckets + 1, sizeof *lay);
    void *buffer = malloc(most * ddph__dtype_size(store) + 64);
    ddph_status st = views && lay && buffer
                         ? DDPH_OK
                         : ddph__fail(e, DDPH_ERR_NOMEM, "out of memory");
    for (int b = 0; st == DDPH_OK && b < m->nbuckets; b++)
        lay[b] = (ddph_bucket){.struct_size = sizeof *lay, .index = b,
                               .count = m->nbuckets,
                               .is_last = b == m->nbuckets - 1,
                               .dtype = ddph__hook_wire_dtype(h, store),
                               .device = DDPH_CPU, .numel = m->numel[b],
                               .ntensors = (size_t)m->count[b],
                               .tensors = views + m->first[b],
                               .model = "plan", .divided_by = divided_by};
    ddph_layout layout = {.struct_size = sizeof layout, .model = "plan",
                          .nbuckets = m->nbuckets, .buckets = lay};
    if (st == DDPH_OK)
        st = ddph__hook_on_layout(h, &layout, e);
    for (int s = 0; st == DDPH_OK && s < PLAN_DRY_STEPS; s++) {
        plan_rec_bucket *into = calloc((size_t)m->nbuckets + 1, sizeof *into);
        if (!into) {
            st = ddph__fail(e, DDPH_ERR_NOMEM, "out of memory");
            break;
        }
        st = dry_step(h, r, m, views, store, divided_by, buffer, (uint64_t)s,
                      into, e);
        free_buckets(out->buckets, out->nbuckets);
        out->buckets = into;
        out->nbuckets = m->nbuckets;
    }
    free(buffer);
    free(lay);
    free(views);
    return st;
}

int plan_record(const char *hook, const char *plugin_path,
                const bench_options *opts, int psgd_rank, int world,
                const plan_rec_model *model, plan_recording *out, char *msg,
                size_t cap)
{
    memset(out, 0, sizeof *out);
    if (world > PLAN_DRY_MAX_WORLD) {
        snprintf(msg, cap, "hook '%s': a dry run fakes at most %d ranks, "
                 "not %d (price a collective with --collective instead)",
                 hook, PLAN_DRY_MAX_WORLD, world);
        return 0;
    }
    char path[256];
    if (!bench_write_job(path, sizeof path, 0, "", plugin_path, hook,
                         psgd_rank, opts)) {
        snprintf(msg, cap, "cannot write a job file in $TMPDIR");
        return 0;
    }
    ddph_config cfg;
    ddph_err e;
    ddph_logger log;
    ddph__logger_init(&log);
    log.level = DDPH_LOG_ERROR;
    recorder r = {.world = {.rank = 0, .size = world}};
    ddph_hook *h = NULL;
    ddph_status st = ddph__config_load(path, &cfg, &e);
    unlink(path);
    if (st != DDPH_OK) {
        snprintf(msg, cap, "%s", e.msg);
        return 0;
    }
    ddph_comm comm = {&recorder_ops, &r};
    st = ddph__hook_create(&cfg, cfg.hook_name, 0, cfg.wrapper, "plan", comm,
                           NULL, NULL, &log, &h, &e);
    if (st == DDPH_OK) {
        snprintf(out->hook_name, sizeof out->hook_name, "%s",
                 h->plugin->api.name);
        st = run_steps(h, &r, model, world, out, &e);
        ddph__hook_destroy(h);
    }
    ddph__config_free(&cfg);
    if (st != DDPH_OK) {
        /* The job file is ours, not the user's: an option it refuses
         * came from --option. */
        const char *why = e.msg;
        if (strncmp(why, path, strlen(path)) == 0) {
            why += strlen(path);
            why += strspn(why, ":0123456789 ");
        }
        snprintf(msg, cap, "hook '%s' on a dry run at %d ranks: %s%s", hook,
                 world, why == e.msg ? "" : "--option: ", why);
        plan_recording_free(out);
        return 0;
    }
    return 1;
}
