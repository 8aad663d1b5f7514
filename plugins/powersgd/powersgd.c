/* powersgd: PyTorch's powerSGD_hook and batched_powerSGD_hook
 * (docs/pytorch-semantics.md §2), step by step.  Built twice from this file:
 * powersgd.so with compress_tensor.c, and batched_powersgd.so with
 * compress_batched.c and PSGD_BATCHED defined (its name and options).
 *
 * Per bucket, after start_powerSGD_iter synchronised steps of plain
 * allreduce: add the error feedback, view each tensor as n x m, allreduce
 * the tensors that do not pass (n+m)*r*rate < n*m together (divided after
 * the sum), and for the others P = MQ, allreduce P, orthogonalise P,
 * Q = M^T P, allreduce Q, divide, M = PQ^T; the new error is input minus
 * result.  The batched variant treats the whole bucket as one zero-padded
 * s x s matrix (two allreduces).
 *
 * Compute is f32 through the host's services (OpenBLAS on CPU, cuBLAS,
 * cuSOLVER and CUDA kernels on GPU): the error feedback, P and Q live in
 * the bucket's memory, allocated with s->alloc and touched only through
 * services, so this one source runs on host and GPU buckets alike (it
 * needs ABI minor 1 for axpy, copy and zero).  A half-precision bucket
 * (under the fp16/bf16 wrapper) is widened to f32 for the arithmetic;
 * every allreduce still travels in the bucket's dtype, so the bytes on
 * the wire are PyTorch's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/plugin.h>

#include "psgd.h"
#include "psgd_cpu.h"

#ifdef PSGD_BATCHED
#define HOOK_DESC "PowerSGD on the whole bucket as one square matrix " \
                  "(PyTorch batched_powerSGD_hook), error feedback"
#else
#define HOOK_DESC "low-rank PowerSGD compression per tensor with error " \
                  "feedback and warm start (PyTorch powerSGD_hook)"
#endif

static const ddph_option_spec psgd_options[] = {
    {"matrix_approximation_rank", DDPH_OPT_INT, "1", 1, 4096,
     "rank r of the approximation (more: more accurate, more bytes)"},
    {"start_powerSGD_iter", DDPH_OPT_INT, "1000", 0, 1e15,
     "synchronised steps of plain allreduce before compression starts"},
    {"min_compression_rate", DDPH_OPT_REAL, "2", 0, 1e15,
     "compress a tensor only if (n+m)*r*rate < n*m"},
    {"use_error_feedback", DDPH_OPT_BOOL, "true", 0, 0,
     "add the previous step's compression error to the gradients"},
    {"warm_start", DDPH_OPT_BOOL, "true", 0, 0,
     "reuse the previous step's Q instead of a new random one"},
    {"orthogonalization_epsilon", DDPH_OPT_REAL, "0", 0, 1,
     "added to each column norm in Gram-Schmidt (0 = PyTorch's default)"},
    {"random_seed", DDPH_OPT_INT, "0", 0, 4294967295.0,
     "seed of the generator every rank draws Q's seeds from"},
    {"compression_stats_logging_frequency", DDPH_OPT_INT, "10000", 0, 1e15,
     "log compression statistics every this many steps (info level)"},
    {"batch_tensors_with_same_shape", DDPH_OPT_BOOL, "false", 0, 0,
     "accepted for PyTorch parity; results are the same either way"},
    {"q_init_dir", DDPH_OPT_STRING, "", 0, 0,
     "reproduce a PyTorch run: read each random Q from "
     "DIR/r{rank}_it{iter}_b{bucket}_qinit.f32"},
    {NULL, 0, NULL, 0, 0, NULL},
};

int psgd_grow(const ddph_services *s, void *pp, size_t *cap, size_t bytes)
{
    void **p = pp;
    if (bytes <= *cap)
        return 1;
    s->free(s, *p);
    *p = s->alloc(s, bytes);
    *cap = *p ? bytes : 0;
    if (!*p)
        s->set_error(s, "out of memory for %zu bytes of scratch", bytes);
    return *p != NULL;
}

/* n floats of device memory (at least one, so NULL means no memory). */
static float *dev_floats(const ddph_services *s, size_t n)
{
    float *p = s->alloc(s, (n ? n : 1) * sizeof(float));
    if (!p)
        s->set_error(s, "out of memory for %zu floats of PowerSGD state", n);
    return p;
}

static ddph_status psgd_create(const ddph_services *s, const ddph_options *o,
                               void **state)
{
    psgd *st = calloc(1, sizeof *st);
    if (!st) {
        s->set_error(s, "out of memory");
        return DDPH_ERR_NOMEM;
    }
    st->rank = (size_t)s->opt_int(o, "matrix_approximation_rank");
    st->start_iter = (uint64_t)s->opt_int(o, "start_powerSGD_iter");
    st->min_rate = s->opt_real(o, "min_compression_rate");
    st->use_ef = s->opt_bool(o, "use_error_feedback");
    st->warm_start = s->opt_bool(o, "warm_start");
    st->eps = s->opt_real(o, "orthogonalization_epsilon");
    int64_t every = s->opt_int(o, "compression_stats_logging_frequency");
    st->log_every = every < 1 ? 1 : (uint64_t)every;
    const char *dir = s->opt_string(o, "q_init_dir");
    if (dir && *dir && (st->qinit_dir = malloc(strlen(dir) + 1)))
        memcpy(st->qinit_dir, dir, strlen(dir) + 1);
    mt_seed(&st->rng, (uint32_t)s->opt_int(o, "random_seed"));
    /* PyTorch's rule: the bucket rebuild after the first step changes the
     * buckets the error and Q memories are keyed by. */
    if ((st->use_ef || st->warm_start) && st->start_iter <= 1) {
        free(st);
        s->set_error(s, "start_powerSGD_iter = %llu: it must be > 1 when "
                        "use_error_feedback or warm_start is on (PyTorch "
                        "raises the same ValueError)",
                     (unsigned long long)s->opt_int(o, "start_powerSGD_iter"));
        return DDPH_ERR_OPTION;
    }
    *state = st;
    return DDPH_OK;
}

static void psgd_destroy(const ddph_services *s, void *state)
{
    psgd *st = state;
    if (!st)
        return;
    for (int i = 0; i < st->nbuckets; i++) {
        s->free(s, st->buckets[i].error);
        s->free(s, st->buckets[i].p);
        s->free(s, st->buckets[i].q);
    }
    free(st->buckets);
    free(st->host_q);
    s->free(s, st->work);
    s->free(s, st->flat);
    s->free(s, st->wire);
    s->free(s, st->qt);
    free(st->mats);
    free(st->q_groups);
    free(st->qinit_dir);
    free(st);
}

psgd_bucket *psgd_bucket_memory(const ddph_services *s, psgd *st, int index)
{
    if (index >= st->nbuckets) {
        psgd_bucket *b = realloc(st->buckets, (size_t)(index + 1) * sizeof *b);
        if (!b) {
            s->set_error(s, "out of memory");
            return NULL;
        }
        memset(b + st->nbuckets, 0,
               (size_t)(index + 1 - st->nbuckets) * sizeof *b);
        st->buckets = b;
        st->nbuckets = index + 1;
    }
    return &st->buckets[index];
}

/* maybe_increase_iter: the counter advances once per synchronised step. */
static void step_done(psgd *st, const ddph_bucket *b)
{
    if (b->is_last)
        st->iter++;
}

/* Allreduce (sum) of f32 values, carried in the bucket's dtype. */
ddph_status psgd_allreduce_as(psgd *st, const ddph_services *s, float *v,
                              size_t n, ddph_dtype wire)
{
    if (wire == DDPH_F32)
        return s->allreduce(s, s->world, v, n, DDPH_F32, DDPH_SUM);
    if (!psgd_grow(s, &st->wire, &st->wire_cap, n * 2 + 2))
        return DDPH_ERR_NOMEM;
    ddph_status r = s->cast(s, v, DDPH_F32, st->wire, wire, n, 1.0);
    if (!r)
        r = s->allreduce(s, s->world, st->wire, n, wire, DDPH_SUM);
    if (!r)
        r = s->cast(s, st->wire, wire, v, DDPH_F32, n, 1.0);
    return r;
}

/* Error feedback, PyTorch's order: M = in + error.  M is built in the
 * error memory itself, block by block just before the GEMM that reads it
 * (so the block is still in cache); the compression writes its result
 * into in, and the new error M - result is left in the error memory: no
 * copy of the input is kept.  Without error feedback M is in.
 *
 * The error memory of n floats; *fresh says it was just made, and then
 * holds zeros (PyTorch's first error), so that M = in there. */
ddph_status psgd_error_memory(const ddph_services *s, psgd_bucket *pb, size_t n,
                              int *fresh)
{
    *fresh = 0;
    if (pb->error && pb->nerror == n)
        return DDPH_OK;
    s->free(s, pb->error);
    pb->error = dev_floats(s, n);
    pb->nerror = pb->error ? n : 0;
    if (!pb->error)
        return DDPH_ERR_NOMEM;
    *fresh = 1;
    return s->zero(s, pb->error, n * sizeof(float));
}

/* m[i] = in[i] + m[i] for i < n, m being the error memory (a copy when it
 * is fresh: the same values, one read fewer). */
ddph_status psgd_add_error(const ddph_services *s, int fresh, const float *in,
                           float *m, size_t n)
{
    return fresh ? s->copy(s, m, in, n * sizeof(float), DDPH_COPY_DEVICE)
                 : s->axpy(s, n, 1.0f, in, m);
}

/* Rows of an n x m f32 matrix per block of the passes that stream it: on
 * the CPU about 256 KiB (the error feedback writes a block, the GEMM reads
 * it from cache, and the result is written beside its new error); on a
 * GPU the whole matrix, one launch per operation. */
size_t psgd_block_rows(const ddph_services *s, size_t n, size_t m)
{
    if (s->device != DDPH_CPU || m == 0 || n == 0)
        return n ? n : 1;
    size_t rows = ((size_t)256 << 10) / (m * sizeof(float));
    return rows < 1 ? 1 : rows < n ? rows : n;
}

/* dst (cols x rows) = src (rows x cols) transposed. */
static void transpose(const float *src, size_t rows, size_t cols, float *dst)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            dst[j * rows + i] = src[i * cols + j];
}

/* q = M^T p for an n x m matrix M and p of n x r.  On the CPU computed
 * as its transpose p^T M into st->qt and transposed into q: OpenBLAS
 * streams M row by row that way (18 ms instead of 24 ms for GPT-2's
 * 50257 x 768 embedding at rank 4, one process alone). */
ddph_status psgd_back_project(psgd *st, const ddph_services *s, size_t n,
                              size_t m, size_t r, const float *mm,
                              const float *p, float *q)
{
    if (s->device != DDPH_CPU)
        return s->gemm(s, 1, 0, m, r, n, 1.0f, mm, m, p, r, 0.0f, q, r);
    if (!psgd_grow(s, &st->qt, &st->qt_cap, m * r * sizeof(float)))
        return DDPH_ERR_NOMEM;
    ddph_status ret =
        s->gemm(s, 1, 0, r, m, n, 1.0f, p, r, mm, m, 0.0f, st->qt, m);
    if (!ret)
        transpose(st->qt, r, m, q);
    return ret;
}

/* The fused CPU sweep (psgd_cpu.h) serves every rank on the CPU: its
 * result is the same bits on every rank, which OpenBLAS's is not. */
int psgd_fused(const ddph_services *s)
{
    return s->device == DDPH_CPU;
}

/* The result P Q^T of an n x m matrix (p: n x r, q: m x r) into out, and
 * with err the new error M - result in err, M's memory.  On the CPU one
 * sweep; otherwise by blocks of rows, the new error computed beside each
 * while it is in cache. */
ddph_status psgd_reconstruct(psgd *st, const ddph_services *s, size_t n,
                             size_t m, size_t r, const float *p, const float *q,
                             float *out, float *err)
{
    if (psgd_fused(s)) {
        if (!psgd_grow(s, &st->qt, &st->qt_cap, m * r * sizeof(float)))
            return DDPH_ERR_NOMEM;
        psgd_cpu_pack(m, r, q, st->qt);
        psgd_cpu_reconstruct(n, m, r, p, st->qt, out, err);
        return DDPH_OK;
    }
    size_t rows = psgd_block_rows(s, n, m);
    ddph_status ret = DDPH_OK;
    for (size_t j = 0; j < n && !ret; j += rows) {
        size_t h = rows < n - j ? rows : n - j;
        ret = s->gemm(s, 0, 1, h, m, r, 1.0f, p + j * r, r, q, r, 0.0f,
                      out + j * m, m);
        if (!ret && err)
            ret = s->axpy(s, h * m, -1.0f, out + j * m, err + j * m);
    }
    return ret;
}

/* New P and Q memories of np and nq floats (the old ones are freed). */
ddph_status psgd_new_pq(const ddph_services *s, psgd_bucket *pb, size_t np,
                        size_t nq)
{
    s->free(s, pb->p);
    s->free(s, pb->q);
    pb->p = dev_floats(s, np);
    pb->q = dev_floats(s, nq);
    pb->np = np;
    pb->nq = nq;
    if (pb->p && pb->q)
        return DDPH_OK;
    s->free(s, pb->p);
    s->free(s, pb->q);
    pb->p = pb->q = NULL; /* no half-made memory to warm-start from */
    return DDPH_ERR_NOMEM;
}

/* Without warm start, P and Q do not outlive the step. */
void psgd_drop_pq(const ddph_services *s, psgd *st, psgd_bucket *pb)
{
    if (st->warm_start)
        return;
    s->free(s, pb->p);
    s->free(s, pb->q);
    pb->p = pb->q = NULL;
}

/* Fills host memory q[0..sum of groups): one seed drawn as PyTorch draws
 * it, then torch.randn for each group in turn, or PyTorch's own Q from
 * q_init_dir. */
static ddph_status host_random_q(psgd *st, const ddph_services *s, int bucket,
                                 float *q, const size_t *groups,
                                 size_t ngroups, size_t n)
{
    uint32_t seed = mt_randint(&st->rng, 1000000000u);
    if (!st->qinit_dir) {
        torch_gen g;
        torch_gen_seed(&g, seed);
        for (size_t i = 0, at = 0; i < ngroups; at += groups[i++])
            torch_randn(&g, q + at, groups[i]);
        return DDPH_OK;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/r%d_it%llu_b%d_qinit.f32", st->qinit_dir,
             s->rank, (unsigned long long)st->iter, bucket);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(q, sizeof(float), n, f) : 0;
    int extra = f && fgetc(f) != EOF;
    if (f)
        fclose(f);
    if (got != n || extra) {
        s->set_error(s, "q_init_dir: %s: %s (need exactly %zu floats)", path,
                     f ? "wrong size" : "cannot open", n);
        return DDPH_ERR_IO;
    }
    return DDPH_OK;
}

/* A new random Q in device memory q: drawn on the host, copied over. */
ddph_status psgd_random_q(psgd *st, const ddph_services *s, int bucket,
                          float *q, const size_t *groups, size_t ngroups)
{
    size_t n = 0;
    for (size_t i = 0; i < ngroups; i++)
        n += groups[i];
    if (n > st->host_q_cap) {
        float *h = realloc(st->host_q, n * sizeof *h);
        if (!h) {
            s->set_error(s, "out of memory for a random Q of %zu floats", n);
            return DDPH_ERR_NOMEM;
        }
        st->host_q = h;
        st->host_q_cap = n;
    }
    ddph_status r =
        host_random_q(st, s, bucket, st->host_q, groups, ngroups, n);
    return r ? r : s->copy(s, q, st->host_q, n * sizeof(float),
                           DDPH_COPY_FROM_HOST);
}

static ddph_status vanilla(psgd *st, const ddph_bucket *b,
                           const ddph_services *s)
{
    step_done(st, b);
    ddph_status r = s->divide(s, b->buffer, b->dtype, b->numel,
                              (double)s->world_size);
    return r ? r : s->allreduce(s, s->world, b->buffer, b->numel, b->dtype,
                                DDPH_SUM);
}

static void maybe_report(psgd *st, const ddph_bucket *b, const ddph_services *s)
{
    if (!b->is_last || st->iter < st->next_stats_report)
        return;
    s->log(s, DDPH_LOG_INFO,
           "compression stats: iter %llu, rate %.2f, elements %.0f before, "
           "%.0f after",
           (unsigned long long)st->iter,
           st->after > 0 ? st->before / st->after : 0.0, st->before,
           st->after);
    st->next_stats_report += st->log_every;
}


static ddph_status psgd_on_bucket(void *state, const ddph_bucket *b,
                                  const ddph_services *s)
{
    psgd *st = state;
    if (st->iter < st->start_iter)
        return vanilla(st, b, s);
    maybe_report(st, b, s);
    ddph_status r;
    if (b->dtype == DDPH_F32) {
        r = psgd_compress(st, b, s, b->buffer);
    } else if (b->dtype == DDPH_F16 || b->dtype == DDPH_BF16) {
        if (!psgd_grow(s, &st->work, &st->work_cap,
                       b->numel * sizeof(float) + 4))
            return DDPH_ERR_NOMEM;
        r = s->cast(s, b->buffer, b->dtype, st->work, DDPH_F32, b->numel, 1.0);
        if (!r)
            r = psgd_compress(st, b, s, st->work);
        if (!r)
            r = s->cast(s, st->work, DDPH_F32, b->buffer, b->dtype, b->numel,
                        1.0);
    } else {
        s->set_error(s, "%s buckets are not supported: the arithmetic here "
                        "is f32, and f32, f16 and bf16 buckets are",
                     b->dtype == DDPH_F64 ? "f64" : "unknown-dtype");
        return DDPH_ERR_UNSUPPORTED;
    }
    if (!r)
        step_done(st, b);
    return r;
}

static const ddph_plugin_api_v1 psgd_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = HOOK_NAME,
    .version = "1.0.0",
    .description = HOOK_DESC,
    .options = psgd_options,
    .create = psgd_create,
    .destroy = psgd_destroy,
    .on_bucket = psgd_on_bucket,
    .save = psgd_save,
    .load = psgd_load,
    .stats = psgd_stats,
    /* What it does not send this step goes out later (error feedback). */
    .flags = DDPH_PLUGIN_ERROR_FEEDBACK,
};

/* Declines hosts older than ABI minor 1: the state lives in the bucket's
 * memory and needs the axpy, copy and zero services. */
DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    return host_minor >= 1 ? &psgd_plugin : NULL;
}
