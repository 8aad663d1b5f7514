/* backend_nccl.h: collectives on GPU memory over NCCL (backend = nccl).
 *
 * One GPU per rank, chosen by the rank's index among the ranks of its
 * host (an MPI shared-memory split).  The communicator is bootstrapped
 * through MPI (rank 0's ncclGetUniqueId broadcast).  Every communicator
 * is nonblocking, so its creation, splits and enqueues are settled
 * against timeout_s too.  Hooks run on one communication stream; each
 * collective is enqueued on it and polled against timeout_s
 * (cudaStreamQuery, ncclCommGetAsyncError), so a dead peer is reported
 * instead of hanging.  Part of the GPU backend module
 * (module.c gives the runtime these functions as comm/gpu.h's table,
 * the collectives as backends/comm.h's). */
#ifndef DDPH_BACKEND_NCCL_H
#define DDPH_BACKEND_NCCL_H

#include "backends/gpu.h"
#include "support/util.h"

/* This backend's group: comm.h's head (rank and size, read here by name),
 * the same ranks' host-memory group (the job's host table made it: the
 * splits mirror its splits) and their NCCL communicator. */
typedef struct ddph_nccl_group {
    union {
        struct ddph_group head; /* what the table hands out */
        struct {
            int rank, size;
        };
    };
    struct ddph_group *host; /* owned by the host table's backend */
    void *nccl;          /* ncclComm_t, NULL once aborted */
    struct ddph_nccl_group *next; /* splits */
} ddph_nccl_group;

/* The module's ddph_gpu. */
typedef struct ddph_gpu {
    ddph_nccl_group world;   /* nccl = the world communicator */
    void *stream;            /* cudaStream_t: the communication stream */
    void *blas;              /* cublasHandle_t on that stream */
    void *solver;            /* cusolverDnHandle_t on that stream */
    void *qr_scratch;        /* device scratch of orthogonalize's QR */
    size_t qr_scratch_cap;   /* bytes */
    /* Pinned: cuSOLVER's info word of the last QR, copied without a wait
     * and checked when the stream has drained (0: fine). */
    int *qr_info;
    int device;
    double timeout_s;
    ddph_nccl_group *groups; /* splits, freed at finalize */
    ddph_gpu_job job; /* the runtime's side */
} ddph_nccl;

/* DDPH_ERR_BACKEND: "WHAT failed: " and CUDA's text for error e. */
ddph_status ddph__cuda_fail(ddph_err *err, int e, const char *what);

/* Collective over the job's world; DDPH_ERR_UNSUPPORTED without a GPU.
 * Allocates *out. */
ddph_status ddph__nccl_init(const ddph_gpu_job *job, ddph_nccl **out,
                            ddph_err *err);
/* Whether this machine has a CUDA device (no collective: for checks). */
ddph_status ddph__nccl_probe(ddph_err *err);
/* abort: the job is broken (a peer died or failed): communicators are
 * aborted (ncclCommAbort), never destroyed, which could wait for peers.
 * Frees n. */
void ddph__nccl_finalize(ddph_nccl *n, int abort);

/* Nonblocking collectives: enqueued on the communication stream and not
 * waited for.  The stream runs everything in order, so waiting for one
 * is waiting for the stream (ddph__nccl_wait, against timeout_s), and
 * ddph__nccl_idle says whether all that was enqueued has finished: 1
 * finished, 0 still running, -1 failed (a CUDA error, or an asynchronous
 * error on any communicator): the wait then reports it at once. */
ddph_status ddph__nccl_start_allreduce(ddph_nccl *n, ddph_nccl_group *g,
                                       void *buf, size_t count,
                                       ddph_dtype dtype, ddph_redop op,
                                       ddph_err *err);
ddph_status ddph__nccl_start_allgather(ddph_nccl *n, ddph_nccl_group *g,
                                       const void *send, void *recv,
                                       size_t count, ddph_dtype dtype,
                                       ddph_err *err);
ddph_status ddph__nccl_start_allgatherv(ddph_nccl *n, ddph_nccl_group *g,
                                        const void *send, void *recv,
                                        const size_t *counts, ddph_dtype dtype,
                                        ddph_err *err);
ddph_status ddph__nccl_start_alltoall(ddph_nccl *n, ddph_nccl_group *g,
                                      const void *send, void *recv,
                                      size_t count, ddph_dtype dtype,
                                      ddph_err *err);
ddph_status ddph__nccl_wait(ddph_nccl *n, ddph_nccl_group *g,
                            const char *what, ddph_err *err);
int ddph__nccl_idle(ddph_nccl *n);
/* ncclCommSplit; the host side is split the same way. */
ddph_status ddph__nccl_split(ddph_nccl *n, ddph_nccl_group *parent,
                             int color, int key, ddph_nccl_group **out,
                             ddph_err *err);
ddph_status ddph__nccl_intra_node(ddph_nccl *n, ddph_nccl_group **out,
                                  ddph_err *err);

/* The functions above as comm.h's table, whose state is the ddph_nccl
 * (module.c hands it to the runtime in ddph_gpu_ops.comm). */
extern const ddph_comm_ops ddph__nccl_comm_ops;

/* Device operations: enqueued on the communication stream, which orders
 * them with everything else a hook does; they return without waiting
 * (a launch error is reported at once, an execution error by the next
 * collective or copy).  Collectives and copies wait for the stream. */
ddph_status ddph__nccl_cast(ddph_nccl *n, const void *src, ddph_dtype sdt,
                            void *dst, ddph_dtype ddt, size_t count,
                            double scale, ddph_err *err);
ddph_status ddph__nccl_divide(ddph_nccl *n, void *buf, ddph_dtype dtype,
                              size_t count, double divisor, ddph_err *err);
ddph_status ddph__nccl_gemm(ddph_nccl *n, int ta, int tb, size_t m, size_t nn,
                            size_t k, float alpha, const float *a, size_t lda,
                            const float *b, size_t ldb, float beta, float *c,
                            size_t ldc, ddph_err *err);
/* On the device, as the CPU path does it: modified Gram-Schmidt (a CUDA
 * kernel) for cols <= 2, Householder QR (cuSOLVER geqrf + orgqr) above. */
ddph_status ddph__nccl_orthogonalize(ddph_nccl *n, float *x, size_t rows,
                                     size_t cols, double eps, ddph_err *err);
/* y += alpha * x (cuBLAS saxpy). */
ddph_status ddph__nccl_axpy(ddph_nccl *n, size_t count, float alpha,
                            const float *x, float *y, ddph_err *err);
/* cudaMemcpyAsync of `kind`; waited for when one side is host memory. */
ddph_status ddph__nccl_copy(ddph_nccl *n, void *dst, const void *src,
                            size_t bytes, ddph_copy_kind kind, ddph_err *err);
ddph_status ddph__nccl_zero(ddph_nccl *n, void *buf, size_t bytes,
                            ddph_err *err);
/* sparse_ops.h's operations on the GPU (cuda_ops.cu). */
ddph_status ddph__nccl_topk(ddph_nccl *n, const float *x, size_t count,
                            size_t k, float *values, int32_t *indices,
                            ddph_err *err);
ddph_status ddph__nccl_absmax(ddph_nccl *n, const float *x, size_t count,
                              float *out, ddph_err *err);
ddph_status ddph__nccl_gather(ddph_nccl *n, const float *x,
                              const int32_t *idx, size_t k, float *out,
                              ddph_err *err);
ddph_status ddph__nccl_scatter_add(ddph_nccl *n, float *y, const int32_t *idx,
                                   const float *v, size_t k, float alpha,
                                   ddph_err *err);
ddph_status ddph__nccl_quantize_int8(ddph_nccl *n, const float *x,
                                     size_t count, float scale, int8_t *q,
                                     ddph_err *err);
ddph_status ddph__nccl_dequantize_int8(ddph_nccl *n, const int8_t *q,
                                       size_t count, float scale, float beta,
                                       float *y, ddph_err *err);
ddph_status ddph__nccl_pack_signs(ddph_nccl *n, const float *x, size_t count,
                                  uint8_t *bits, ddph_err *err);
ddph_status ddph__nccl_unpack_signs(ddph_nccl *n, const uint8_t *bits,
                                    size_t count, size_t chunk,
                                    const float *scales, float beta, float *y,
                                    ddph_err *err);
ddph_status ddph__nccl_chunk_abs(ddph_nccl *n, const float *x, size_t count,
                                 size_t chunk, int want_max, float *out,
                                 ddph_err *err);
/* quant_ops.h's operations on the GPU (cuda_ops.cu), the CPU's bits. */
ddph_status ddph__nccl_round_stochastic(ddph_nccl *n, const float *x,
                                        size_t count, size_t chunk,
                                        const float *scales, int levels,
                                        uint64_t seed, int8_t *q,
                                        ddph_err *err);
ddph_status ddph__nccl_pack_bits(ddph_nccl *n, const int8_t *q, size_t count,
                                 int bits, uint8_t *packed, ddph_err *err);
ddph_status ddph__nccl_unpack_bits(ddph_nccl *n, const uint8_t *packed,
                                   size_t count, int bits, size_t chunk,
                                   const float *scales, int nmsg,
                                   size_t stride, float beta, float *y,
                                   ddph_err *err);

#endif
