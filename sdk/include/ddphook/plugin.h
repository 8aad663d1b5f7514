/* ddphook/plugin.h: the communication-hook plugin ABI, version 1.
 *
 * A hook is a shared object loaded with dlopen.  It exports one entry
 * function per ABI major it supports:
 *
 *     const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor);
 *
 * The host (libddphook) tries the newest major it knows first.  The entry
 * function returns a pointer to a static table that stays valid until the
 * object is unloaded, or NULL to decline (e.g. host_minor is too old for a
 * member the plugin cannot do without).
 *
 * Versioning promise (docs/abi.md):
 *   - A minor version only appends: members at the end of the growable
 *     structs, and status codes, dtypes, option types and flags; every
 *     member added bumps the minor.  The growable structs carry their size:
 *     ddph_services, ddph_bucket, ddph_layout and ddph_step_info start with
 *     struct_size, ddph_plugin_api_v1 has it third (after abi_major and
 *     abi_minor).  A reader touches a member only if that size says it is
 *     there (DDPH_HAS_MEMBER).  No array of a growable struct is indexed
 *     across versions: ddph_layout.buckets is served at the size of the
 *     plugin's own minor, and bucket_list (1.5) holds pointers.
 *   - Frozen, never to change (they have no size and are handed out in
 *     arrays): ddph_option_spec, ddph_tensor_view, ddph_param_view and
 *     ddph_stat, and the value of every enum constant.
 *   - Anything else (reordering, changing a member's type or meaning) is a
 *     new major with a new entry symbol; the host keeps loading older majors
 *     it still supports through an adapter.
 *
 * A plugin never links libddphook: everything it needs from the host
 * (collectives, device operations, scratch memory, logging, its options)
 * comes through the ddph_services table handed to every call.
 */
#ifndef DDPHOOK_PLUGIN_H
#define DDPHOOK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/status.h>
#include <ddphook/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDPH_PLUGIN_ABI_MAJOR 1
#define DDPH_PLUGIN_ABI_MINOR 6

/* A hook's name (ddph_plugin_api_v1.name, and NAME in NAME.so and
 * [hook.NAME]): 1 to DDPH_PLUGIN_NAME_MAX letters, digits, '_' and '-'. */
#define DDPH_PLUGIN_NAME_MAX 64

/* Name of the entry symbol for ABI major 1. */
#define DDPH_PLUGIN_ENTRY_V1 "ddph_plugin_v1"

#if defined(__GNUC__)
#define DDPH_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DDPH_PLUGIN_EXPORT
#endif

/* ---- options -------------------------------------------------------------
 * A plugin declares its options in a table terminated by a member with
 * name == NULL.  The host parses [hook.NAME] keys from the job INI against
 * it, fills defaults, rejects unknown keys, wrong types and values outside
 * [min, max] (for INT and REAL), and hands the validated set to create().
 */
typedef enum ddph_option_type {
    DDPH_OPT_BOOL = 1,   /* true/false, yes/no, on/off, 1/0 */
    DDPH_OPT_INT = 2,    /* 64-bit signed integer */
    DDPH_OPT_REAL = 3,   /* double */
    DDPH_OPT_STRING = 4, /* free text */
} ddph_option_type;

typedef struct ddph_option_spec {
    const char *name;          /* lowercase key in [hook.NAME] */
    ddph_option_type type;
    const char *default_value; /* as it would be written in the INI */
    double min, max;           /* inclusive range for INT and REAL */
    const char *doc;           /* one line, shown by `ddphook describe` */
} ddph_option_spec;

typedef struct ddph_options ddph_options; /* opaque, owned by the host */

/* ---- groups --------------------------------------------------------------
 * A group is a set of ranks that communicate together: the world, the
 * ranks on this node, or a custom split.  Owned by the host; valid until the
 * hook instance is destroyed. */
typedef struct ddph_group ddph_group;

/* A nonblocking collective in flight (ABI minor 2); owned by the host. */
typedef struct ddph_request ddph_request;

/* ---- what a hook sees ---------------------------------------------------- */

/* One tensor inside a bucket or a model. */
typedef struct ddph_tensor_view {
    const char *name;     /* parameter name as registered */
    size_t offset;        /* first element inside the bucket buffer */
    size_t numel;         /* elements */
    int ndim;
    const int64_t *shape; /* ndim extents, row-major */
} ddph_tensor_view;

/* The bucket handed to on_bucket.  `buffer` holds `numel` elements of
 * `dtype` on `device`: the trainer's local gradients on entry; the hook
 * leaves the average across ranks in it.  Under a wrapper (fp16, bf16) the
 * buffer is the low-precision copy and dtype says so; the host casts the
 * result back into the gradients.  Everything is owned by the host and
 * valid only during the call. */
typedef struct ddph_bucket {
    uint32_t struct_size;  /* sizeof(ddph_bucket) of the host */
    int index;             /* 0 .. count-1; launch order; stable */
    int count;             /* buckets in this model */
    int is_last;           /* index == count - 1: last bucket of the step */
    uint64_t iteration;    /* synchronised steps before this one */
    ddph_dtype dtype;
    ddph_device device;
    void *buffer;
    size_t numel;
    size_t ntensors;
    const ddph_tensor_view *tensors; /* in bucket order */
    const char *model;               /* model name */
    /* ABI 1.2, later (test with DDPH_HAS_MEMBER(b, ddph_bucket,
     * divided_by); older hosts' buckets end before it): the host has
     * already divided buffer by this (the world size), as `divide` would,
     * while copying the gradients in (DDPH_PLUGIN_DIVIDES_FIRST); 0 when
     * it has not. */
    double divided_by;
} ddph_bucket;

/* The buckets of a model as on_layout sees them (ABI minor 2): each
 * bucket as on_bucket will see it (dtype under the wrapper, tensors),
 * with buffer = NULL and iteration = 0.  Valid during the call.  Read
 * bucket i with ddph_util_layout_bucket (plugin_util.h), right on every
 * host. */
typedef struct ddph_layout {
    uint32_t struct_size;
    const char *model;
    int nbuckets;
    /* nbuckets buckets, index order, each of the size ddph_bucket has in
     * the minor the plugin was built with (ddph_plugin_api_v1.abi_minor;
     * its struct_size says so), so that `buckets[i]` stays right in a
     * plugin built before later minors appended to ddph_bucket.  Hosts
     * before 1.5 give their own size. */
    const ddph_bucket *buckets;
    /* ABI minor 5 (test with DDPH_HAS_MEMBER(layout, ddph_layout,
     * bucket_list); older hosts' layouts end before it): nbuckets pointers
     * to the buckets, index order, each of the host's own size. */
    const ddph_bucket *const *bucket_list;
} ddph_layout;

/* One parameter as on_step_end sees it: the trainer's parameter (weight)
 * memory registered with ddph_model_set_param_data (NULL if none). */
typedef struct ddph_param_view {
    const char *name;
    void *data;
    size_t numel;
    ddph_dtype dtype;
    ddph_device device;
} ddph_param_view;

/* Handed to on_step_end after the optimizer has stepped. */
typedef struct ddph_step_info {
    uint32_t struct_size;
    uint64_t step;         /* optimizer steps so far, this one included */
    uint64_t iteration;    /* synchronised steps so far, this one included */
    int synced;            /* this step synchronised gradients */
    size_t nparams;
    const ddph_param_view *params; /* registration order */
    const char *model;
} ddph_step_info;

/* Which memory each side of ddph_services.copy is in.  "Device" is the
 * services' device (ddph_services.device): GPU memory with backend = nccl,
 * host memory with backend = mpi (where all three kinds are a memcpy). */
typedef enum ddph_copy_kind {
    DDPH_COPY_DEVICE = 0,    /* device to device */
    DDPH_COPY_TO_HOST = 1,   /* device to host (malloc'd) memory */
    DDPH_COPY_FROM_HOST = 2, /* host memory to device */
} ddph_copy_kind;

/* Nonzero when the struct `ptr` points to (which starts with struct_size)
 * has `member`: test it before using a member added in a later minor, e.g.
 * DDPH_HAS_MEMBER(s, ddph_services, axpy). */
#define DDPH_HAS_MEMBER(ptr, type, member)                                  \
    ((ptr)->struct_size >=                                                  \
     offsetof(type, member) + sizeof(((type *)0)->member))

/* Byte sinks and sources for save/load of hook state. */
typedef ddph_status (*ddph_write_fn)(void *sink, const void *data, size_t n);
typedef ddph_status (*ddph_read_fn)(void *source, void *data, size_t n);

/* ---- host services ---------------------------------------------------------
 * Handed to every plugin call.  Collectives are blocking (minor 2 adds
 * nonblocking ones), in place where the signature has one buffer, and
 * honour the job's timeout_s (DDPH_ERR_TIMEOUT).
 * Buffers may be host or device memory according to the bucket's device;
 * the host picks MPI or NCCL accordingly.  Every rank of a group must call
 * the same collectives in the same order. */
typedef struct ddph_services ddph_services;
struct ddph_services {
    uint32_t struct_size; /* sizeof(ddph_services) of the host */
    uint32_t abi_minor;   /* DDPH_PLUGIN_ABI_MINOR of the host */
    int rank;             /* in the world */
    int world_size;
    ddph_group *world;

    /* Groups. */
    int (*group_rank)(const ddph_group *g);
    int (*group_size)(const ddph_group *g);
    /* Ranks sharing this node (MPI_COMM_TYPE_SHARED).  Collective. */
    ddph_status (*group_intra_node)(const ddph_services *s, ddph_group **out);
    /* Ranks of `parent` with the same color, ordered by key.  Collective
     * over parent. */
    ddph_status (*group_split)(const ddph_services *s, ddph_group *parent,
                               int color, int key, ddph_group **out);

    /* Collectives. */
    ddph_status (*allreduce)(const ddph_services *s, ddph_group *g, void *buf,
                             size_t count, ddph_dtype dtype, ddph_redop op);
    /* recv holds group_size * count elements, rank order. */
    ddph_status (*allgather)(const ddph_services *s, ddph_group *g,
                             const void *send, void *recv, size_t count,
                             ddph_dtype dtype);
    ddph_status (*broadcast)(const ddph_services *s, ddph_group *g, void *buf,
                             size_t count, ddph_dtype dtype, int root);
    /* send holds group_size * count elements; recv gets this rank's count. */
    ddph_status (*reduce_scatter)(const ddph_services *s, ddph_group *g,
                                  const void *send, void *recv, size_t count,
                                  ddph_dtype dtype, ddph_redop op);

    /* Device operations on bucket memory (CPU: SIMD; CUDA: kernels).  On
     * the GPU they are enqueued on native_stream and return without
     * waiting; collectives and copies to or from host memory wait, and the
     * stream keeps the order. */
    /* dst[i] = (dst_dtype)(src[i] * scale); round to nearest even; NaN stays
     * NaN.  src and dst may not overlap unless they are the same pointer
     * and dtype. */
    ddph_status (*cast)(const ddph_services *s, const void *src,
                        ddph_dtype src_dtype, void *dst, ddph_dtype dst_dtype,
                        size_t n, double scale);
    /* buf[i] /= divisor, computed as PyTorch's div_ does: in the buffer's
     * dtype, f16/bf16 through float and rounded once. */
    ddph_status (*divide)(const ddph_services *s, void *buf, ddph_dtype dtype,
                          size_t n, double divisor);
    /* Row-major single-precision C = alpha * op(A) op(B) + beta * C, with
     * op(X) = X or X^T; op(A) is m x k, op(B) is k x n. */
    ddph_status (*gemm)(const ddph_services *s, int trans_a, int trans_b,
                        size_t m, size_t n, size_t k, float alpha,
                        const float *a, size_t lda, const float *b,
                        size_t ldb, float beta, float *c, size_t ldc);
    /* Orthonormalises the `cols` columns of the row-major rows x cols
     * matrix x in place (cols <= rows): modified Gram-Schmidt with `eps`
     * added to each norm when cols <= 2, Householder QR otherwise. */
    ddph_status (*orthogonalize)(const ddph_services *s, float *x,
                                 size_t rows, size_t cols, double eps);

    /* Scratch memory on the bucket's device, aligned to 64 bytes. */
    void *(*alloc)(const ddph_services *s, size_t bytes);
    void (*free)(const ddph_services *s, void *p);

    /* Logging through the host's logger (prefix: hook name and rank). */
    void (*log)(const ddph_services *s, ddph_log_level level, const char *fmt,
                ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    /* Sets the message that goes with the error status the plugin is about
     * to return; the host adds hook name, bucket and rank. */
    void (*set_error)(const ddph_services *s, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;

    /* Validated options (only names from the plugin's schema). */
    int (*opt_bool)(const ddph_options *o, const char *name);
    int64_t (*opt_int)(const ddph_options *o, const char *name);
    double (*opt_real)(const ddph_options *o, const char *name);
    const char *(*opt_string)(const ddph_options *o, const char *name);

    /* The native stream (cudaStream_t) for CUDA buckets, else NULL. */
    void *native_stream;

    void *host; /* private to the host */

    /* ---- ABI minor 1 (check with DDPH_HAS_MEMBER before use) ----------
     * What a hook needs to keep per-bucket state in the bucket's memory
     * (PowerSGD's error feedback, P and Q) without touching it from the
     * CPU, so that one source runs on host and GPU buckets alike. */
    /* The device every buffer handed to these services is on: DDPH_CUDA
     * with backend = nccl, else DDPH_CPU.  alloc() returns memory here. */
    ddph_device device;
    /* y[i] += alpha * x[i] for i < n, in f32 (BLAS saxpy; cuBLAS on GPU). */
    ddph_status (*axpy)(const ddph_services *s, size_t n, float alpha,
                        const float *x, float *y);
    /* Copies `bytes` bytes; `kind` says which side is host memory.  The
     * two ranges may not overlap.  A copy to or from host memory is done
     * when it returns; a device-to-device copy is ordered on the stream
     * like the device operations. */
    ddph_status (*copy)(const ddph_services *s, void *dst, const void *src,
                        size_t bytes, ddph_copy_kind kind);
    /* Sets `bytes` bytes of device memory to zero. */
    ddph_status (*zero)(const ddph_services *s, void *buf, size_t bytes);

    /* ---- ABI minor 2 (check with DDPH_HAS_MEMBER before use) ----------
     * Integer and byte dtypes (DDPH_I32, DDPH_I64, DDPH_U8, DDPH_I8) are
     * accepted by every collective, with SUM, MAX and MIN; the cast and
     * arithmetic services stay floating point. */

    /* Variable counts: rank r contributes counts[r] elements (send holds
     * counts[group_rank]); recv gets them all one after the other, in rank
     * order (sum of counts elements).  counts has group_size entries and
     * is the same on every rank. */
    ddph_status (*allgatherv)(const ddph_services *s, ddph_group *g,
                              const void *send, void *recv,
                              const size_t *counts, ddph_dtype dtype);
    /* send and recv hold group_size blocks of count elements: block r of
     * send goes to rank r, block r of recv came from rank r. */
    ddph_status (*alltoall)(const ddph_services *s, ddph_group *g,
                            const void *send, void *recv, size_t count,
                            ddph_dtype dtype);

    /* Nonblocking collectives.  i* starts the collective, as its blocking
     * twin would, and returns at once with a request in *req; wait()
     * blocks until it completed, test() says whether it has.  Until then
     * the hook must not read or write the collective's buffers (nor free
     * them); everything else is allowed: device operations, blocking
     * collectives, other nonblocking ones (several may be outstanding and
     * be waited for in any order), as long as every rank of the group
     * starts the same collectives in the same order.  A request must
     * complete within timeout_s of its start: wait (or test) then returns
     * DDPH_ERR_TIMEOUT, or a peer's failure, and the request is ended all
     * the same.  A request belongs to the call that started it (on_bucket,
     * on_step_end): the host waits for any the hook left outstanding and
     * fails that call with DDPH_ERR_STATE. */
    ddph_status (*iallreduce)(const ddph_services *s, ddph_group *g,
                              void *buf, size_t count, ddph_dtype dtype,
                              ddph_redop op, ddph_request **req);
    ddph_status (*iallgather)(const ddph_services *s, ddph_group *g,
                              const void *send, void *recv, size_t count,
                              ddph_dtype dtype, ddph_request **req);
    ddph_status (*iallgatherv)(const ddph_services *s, ddph_group *g,
                               const void *send, void *recv,
                               const size_t *counts, ddph_dtype dtype,
                               ddph_request **req);
    ddph_status (*ialltoall)(const ddph_services *s, ddph_group *g,
                             const void *send, void *recv, size_t count,
                             ddph_dtype dtype, ddph_request **req);
    /* Ends the request: DDPH_OK when the collective completed, else its
     * error.  req is invalid afterwards. */
    ddph_status (*wait)(const ddph_services *s, ddph_request *req);
    /* *done = 1 and the request is ended when it completed (or failed:
     * the status says so); *done = 0 while it runs. */
    ddph_status (*test)(const ddph_services *s, ddph_request *req,
                        int *done);

    /* Device operations of sparse and quantized hooks, f32, on the
     * services' device (CPU or CUDA: the same definitions on both). */
    /* The k elements of x[0..n) with the largest |x|; ties at the k-th
     * magnitude are taken from the lowest index up.  Their indices go
     * to `indices` in ascending order and their values to `values`
     * (either may be NULL).  k <= n <= INT32_MAX. */
    ddph_status (*topk)(const ddph_services *s, const float *x, size_t n,
                        size_t k, float *values, int32_t *indices);
    /* out[j] = x[idx[j]] for j < k. */
    ddph_status (*gather)(const ddph_services *s, const float *x,
                          const int32_t *idx, size_t k, float *out);
    /* y[idx[j]] += alpha * v[j] for j < k.  With repeated indices the
     * additions happen in an unspecified order on the GPU: give each call
     * distinct indices when the result must be reproducible. */
    ddph_status (*scatter_add)(const ddph_services *s, float *y,
                               const int32_t *idx, const float *v, size_t k,
                               float alpha);
    /* *out (host memory) = max |x[i]|; 0 when n = 0; NaN if any is NaN. */
    ddph_status (*absmax)(const ddph_services *s, const float *x, size_t n,
                          float *out);
    /* q[i] = clamp(rint(x[i] * inv), -127, 127), inv = 1 / scale rounded
     * to f32, round half to even; a NaN becomes 0.  scale > 0. */
    ddph_status (*quantize_int8)(const ddph_services *s, const float *x,
                                 size_t n, float scale, int8_t *q);
    /* y[i] = beta * y[i] + scale * q[i]; with beta = 0, y is only
     * written. */
    ddph_status (*dequantize_int8)(const ddph_services *s, const int8_t *q,
                                   size_t n, float scale, float beta,
                                   float *y);

    /* ---- ABI minor 4 (check with DDPH_HAS_MEMBER before use) ---------- */
    /* Moves the call's outstanding nonblocking collectives along.  MPI
     * moves data only inside MPI calls: between starting a collective and
     * waiting for it, a hook that computes for a while should call this
     * every so often (every few hundred microseconds of work) so that the
     * transfer overlaps the work.  Ends no request (wait or test still
     * must); returns the first failure among them, or DDPH_ERR_TIMEOUT
     * past one's timeout_s.  On the GPU (NCCL progresses by itself) it
     * only checks for failures. */
    ddph_status (*progress)(const ddph_services *s);

    /* Device operations of sign and per-chunk compressors (minor 4), f32,
     * on the services' device, with the same definitions on CPU and CUDA.
     * Chunks: elements [j * chunk, (j + 1) * chunk), the last one short;
     * ceil(n / chunk) of them; chunk >= 1.  Outputs in device memory. */
    /* Bit i % 8 of bits[i / 8] = the sign bit of x[i] (1 for negative
     * numbers, -0 and a NaN whose sign bit is set); ceil(n / 8) bytes, the
     * unused bits of the last one 0. */
    ddph_status (*pack_signs)(const ddph_services *s, const float *x,
                              size_t n, uint8_t *bits);
    /* y[i] = beta * y[i] + (bit i ? -1 : +1) * scales[i / chunk]; with
     * beta = 0, y is only written. */
    ddph_status (*unpack_signs)(const ddph_services *s, const uint8_t *bits,
                                size_t n, size_t chunk, const float *scales,
                                float beta, float *y);
    /* out[j] = sum of |x[i]| over chunk j, accumulated in double and
     * rounded to f32 (CPU and CUDA sum in different orders: they agree to
     * within 1 ulp). */
    ddph_status (*chunk_abs_sum)(const ddph_services *s, const float *x,
                                 size_t n, size_t chunk, float *out);
    /* out[j] = max |x[i]| over chunk j, compared as the bits of |x| (a
     * NaN ranks above +Inf, so a chunk holding one gives a NaN). */
    ddph_status (*chunk_abs_max)(const ddph_services *s, const float *x,
                                 size_t n, size_t chunk, float *out);

    /* ---- ABI minor 6 (check with DDPH_HAS_MEMBER before use) ----------
     * Device operations of quantizing compressors (QSGD, TernGrad), f32,
     * on the services' device, chunks as above.  Each element's result is
     * defined on its own, the same bits on every path, so that a rank can
     * recompute the codes another sent, CPU and CUDA ranks alike.  A
     * device without them returns DDPH_ERR_UNSUPPORTED, naming the call
     * (docs/plugin-guide.md). */
    /* q[i] = x[i] / scales[i / chunk] rounded at random to one of the two
     * integers around it, up with probability its fraction (so that
     * q[i] * scale is x[i] on average), clamped to [-levels, levels]:
     *   v = x[i] * inv (inv = 1 / scale rounded to f32), lo = floor(v),
     *   q[i] = lo + (u < v - lo), in f32,
     * u in [0, 1) being 24 bits of a hash of (seed, i): the same seed and
     * index give the same draw on every rank, run and device (mix in the
     * rank, bucket and iteration for independent draws).  A NaN gives 0,
     * an infinity +-levels, a chunk whose scale is not positive and finite
     * zeros.  1 <= levels <= 127; n < 2^32. */
    ddph_status (*round_stochastic)(const ddph_services *s, const float *x,
                                    size_t n, size_t chunk,
                                    const float *scales, int levels,
                                    uint64_t seed, int8_t *q);
    /* Codes of `bits` (2 or 4) bits, element i in bits [i * bits % 8,
     * + bits) of packed[i * bits / 8]: the low bits of q[i]'s two's
     * complement, so a q in [-2^(bits-1), 2^(bits-1)) comes back unchanged
     * (levels 1 for 2 bits, up to 7 for 4); ceil(n * bits / 8) bytes, the
     * unused bits of the last one 0. */
    ddph_status (*pack_bits)(const ddph_services *s, const int8_t *q,
                             size_t n, int bits, uint8_t *packed);
    /* The sum of `count` messages' codes, each times its chunk's scale:
     * y[i] = beta * y[i] + code_0(i) * scales_0[i / chunk]
     *        + code_1(i) * scales_1[i / chunk] + ...,
     * each code sign-extended, each operation in f32 and the terms added
     * in message order (so every rank that unpacks the same messages gets
     * the same bits; a NaN, from a NaN or infinite y, beta or scale, is a
     * NaN on every path, its sign and payload not the same); with beta = 0, y is only written, once whatever the
     * count.  Message r's codes are r * stride bytes after packed, its
     * scales r * stride bytes after scales (one gathered buffer of equal
     * messages: stride is a message's size, a multiple of 4 when
     * count > 1).  count = 1 unpacks one message (stride unused). */
    ddph_status (*unpack_bits)(const ddph_services *s, const uint8_t *packed,
                               size_t n, int bits, size_t chunk,
                               const float *scales, int count, size_t stride,
                               float beta, float *y);
};

/* ---- the plugin table ------------------------------------------------------ */
typedef struct ddph_plugin_api_v1 {
    uint32_t abi_major;   /* DDPH_PLUGIN_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /* DDPH_PLUGIN_ABI_MINOR the plugin was built with */
    uint32_t struct_size; /* sizeof(ddph_plugin_api_v1) the plugin was built with */

    const char *name;        /* required: DDPH_PLUGIN_NAME_MAX's rule */
    const char *version;     /* required: the plugin's own version */
    const char *description; /* required: one line */
    const ddph_option_spec *options; /* may be NULL: no options */

    /* Required.  Creates one hook instance for one model.  *state may be
     * left NULL by a stateless hook. */
    ddph_status (*create)(const ddph_services *s, const ddph_options *opts,
                          void **state);
    /* Required.  Frees what create made; accepts a NULL state. */
    void (*destroy)(const ddph_services *s, void *state);
    /* Required.  Reduces bucket->buffer in place across s->world and leaves
     * the average there.  Called on the host's communication thread, once
     * per bucket per synchronised step, in bucket index order. */
    ddph_status (*on_bucket)(void *state, const ddph_bucket *bucket,
                             const ddph_services *s);
    /* Optional.  Called after the optimizer on every step, with the
     * parameters (e.g. for periodic model averaging). */
    ddph_status (*on_step_end)(void *state, const ddph_step_info *info,
                               const ddph_services *s);
    /* Optional, in pairs.  Writes / reads the instance's state so that a
     * resumed job continues bit for bit. */
    ddph_status (*save)(void *state, const ddph_services *s,
                        ddph_write_fn write, void *sink);
    ddph_status (*load)(void *state, const ddph_services *s,
                        ddph_read_fn read, void *source);
    /* Optional.  Writes up to `max` statistics into out and returns how
     * many the hook has (call with max = 0 to count).  Called on the
     * trainer's thread between steps. */
    size_t (*stats)(void *state, ddph_stat *out, size_t max);

    /* ---- ABI minor 2 (a host reads it only when struct_size covers it;
     * an older plugin's table ends before it, and reads as 0) ----------- */
    /* DDPH_PLUGIN_* flags: what the plugin allows the host to do. */
    uint32_t flags;
    /* Optional.  The model's buckets, once, after create and before the
     * first on_bucket, on the trainer's thread, so that per-bucket state
     * can be allocated up front.  Collectives are allowed (every rank gets
     * the same layout).  A failure fails ddph_model_finalize. */
    ddph_status (*on_layout)(void *state, const ddph_layout *layout,
                             const ddph_services *s);

    /* ---- ABI minor 3 ---------------------------------------------------- */
    /* How far one step's result may be from the exact average of the
     * ranks' buckets, relative to the largest |average| (e.g. 2e-3 for a
     * hook that sends f16): what ddphook-plugin-test checks when it is not
     * given --rtol.  0 (or an older table): exact up to f32 rounding. */
    double tolerance;
} ddph_plugin_api_v1;

/* flags: on_bucket may run for different buckets of one model at the same
 * time, on different host threads ("lanes", [runtime] lanes), each call
 * with a services table of its own whose `world` is a communicator of the
 * lane's own (a duplicate of the world: the same ranks in the same order).
 * The hook must then keep no state that two buckets share unguarded (a
 * stateless hook such as allreduce, or state per bucket index), and every
 * collective of a call must go to that call's s->world or to groups made
 * from it.  Without the flag the host runs one bucket at a time, in index
 * order, on one thread (as in minor 1). */
#define DDPH_PLUGIN_CONCURRENT_BUCKETS (1u << 0)

/* flags: the hook sends its buckets in f16 (or bf16) and takes buckets of
 * that dtype as they are.  Where the host copies gradients into buckets
 * (gradient_as_bucket_view = false, host memory) it then keeps the bucket
 * in that dtype: each gradient is cast straight into it (round to nearest
 * even, as `cast` does) and the result is cast straight back, one pass each
 * way instead of a copy and a cast.  The results are the same bits as the
 * hook casting the bucket itself.  The hook sees it in b->dtype, and must
 * still take buckets of any float dtype: views, GPU buckets, a wrapper of
 * the other half type and older minor-2 hosts (which ignore bits they do
 * not know) hand it the gradients' own dtype.  Both bits set: neither. */
#define DDPH_PLUGIN_BUCKETS_F16 (1u << 1)
#define DDPH_PLUGIN_BUCKETS_BF16 (1u << 2)

/* flags: on_bucket starts by dividing the bucket by the world size (in the
 * bucket's dtype, with `divide`), as PyTorch's allreduce and fp16 hooks do.
 * Where the host copies gradients into buckets it then does that division
 * while it copies (or casts) them in, while they are in cache, and sets
 * b->divided_by to the world size; the hook divides only when
 * b->divided_by is 0 or absent (older hosts, views, GPU buckets). */
#define DDPH_PLUGIN_DIVIDES_FIRST (1u << 3)

/* flags (ABI minor 4): with its default options the hook keeps what it did
 * not send as error feedback and sends it later, so that its results
 * summed over steps track the summed exact averages: the difference stays
 * bounded by what the ranks hold back, however many steps pass.
 * ddphook-plugin-test then judges it on those sums (docs/plugin-guide.md)
 * rather than on each step's distance from the average. */
#define DDPH_PLUGIN_ERROR_FEEDBACK (1u << 4)

typedef const ddph_plugin_api_v1 *(*ddph_plugin_entry_v1)(uint32_t host_minor);

/* The entry point every v1 plugin defines (and the host looks up). */
DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor);

#ifdef __cplusplus
}
#endif
#endif /* DDPHOOK_PLUGIN_H */
