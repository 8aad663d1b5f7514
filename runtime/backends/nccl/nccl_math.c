/* nccl_math.c: the arithmetic of the GPU's device table (device_cuda.c's
 * ddph__cuda_device_ops; declared in backend_nccl.h):
 * casts, divides and Gram-Schmidt as CUDA kernels (cuda_ops.cu), GEMM and
 * axpy on cuBLAS, Householder QR on cuSOLVER, copies, top-k and int8, all
 * on the communication stream. */
#include "build-config.h"

#include "backends/nccl/backend_nccl.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backends/nccl/cuda_ops.h"
#include "backends/nccl/device_cuda.h"

#define STREAM(n) ((cudaStream_t)(n)->stream)

ddph_status ddph__nccl_cast(ddph_nccl *n, const void *src, ddph_dtype sdt,
                            void *dst, ddph_dtype ddt, size_t count,
                            double scale, ddph_err *err)
{
    /* To the same dtype: a copy, as on the CPU. */
    if (sdt == ddt && scale == 1.0)
        return src == dst ? DDPH_OK
                          : ddph__nccl_copy(n, dst, src,
                                            count * ddph__dtype_size(sdt),
                                            DDPH_COPY_DEVICE, err);
    int e = ddph__cuda_cast(src, sdt, dst, ddt, count, scale, n->stream);
    return e ? ddph__cuda_fail(err, e, "cast kernel") : DDPH_OK;
}

ddph_status ddph__nccl_divide(ddph_nccl *n, void *buf, ddph_dtype dtype,
                              size_t count, double divisor, ddph_err *err)
{
    int e = ddph__cuda_divide(buf, dtype, count, divisor, n->stream);
    return e ? ddph__cuda_fail(err, e, "divide kernel") : DDPH_OK;
}

/* cuBLAS and cuSOLVER count in int. */
static int fits_int(size_t v)
{
    return v <= (size_t)INT32_MAX;
}

ddph_status ddph__nccl_gemm(ddph_nccl *n, int ta, int tb, size_t m, size_t nn,
                            size_t k, float alpha, const float *a, size_t lda,
                            const float *b, size_t ldb, float beta, float *c,
                            size_t ldc, ddph_err *err)
{
    if (!fits_int(m) || !fits_int(nn) || !fits_int(k))
        return ddph__fail(err, DDPH_ERR_INVALID, "gemm: dimension too large");
    if (m == 0 || nn == 0)
        return DDPH_OK;
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. */
    cublasStatus_t s = cublasSgemm(
        (cublasHandle_t)n->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
        ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)nn, (int)m, (int)k, &alpha, b,
        (int)ldb, a, (int)lda, &beta, c, (int)ldc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return ddph__fail(err, DDPH_ERR_BACKEND, "cublasSgemm failed (%d)",
                          (int)s);
    return DDPH_OK;
}

/* Grows the QR scratch to `bytes` (its contents are not kept), in
 * stream order from the hooks' pool: no device-wide synchronisation, as
 * cudaFree/cudaMalloc would be; the old block goes back to the pool once
 * the work before it on the stream is done. */
static ddph_status grow_scratch(ddph_nccl *n, size_t bytes, ddph_err *err)
{
    if (bytes <= n->qr_scratch_cap)
        return DDPH_OK;
    void *pool = NULL;
    ddph_status st = ddph__cuda_pool(&pool, err);
    if (st != DDPH_OK)
        return st;
    if (n->qr_scratch)
        cudaFreeAsync(n->qr_scratch, STREAM(n));
    n->qr_scratch = NULL;
    n->qr_scratch_cap = 0;
    cudaError_t e = cudaMallocFromPoolAsync(&n->qr_scratch, bytes,
                                            (cudaMemPool_t)pool, STREAM(n));
    if (e != cudaSuccess) {
        n->qr_scratch = NULL;
        return ddph__cuda_fail(err, e, "orthogonalize: cudaMallocFromPoolAsync");
    }
    n->qr_scratch_cap = bytes;
    return DDPH_OK;
}

/* Row-major x (rows x cols) is column-major x^T: transposed into t
 * (column-major rows x cols), factored and expanded to Q in place by
 * cuSOLVER, and transposed back. */
static ddph_status householder_qr(ddph_nccl *n, float *x, size_t rows,
                                  size_t cols, ddph_err *err)
{
    if (!fits_int(rows * cols))
        return ddph__fail(err, DDPH_ERR_INVALID, "orthogonalize: too large");
    cusolverDnHandle_t solver = (cusolverDnHandle_t)n->solver;
    cublasHandle_t blas = (cublasHandle_t)n->blas;
    int m = (int)rows, k = (int)cols, lwork_qr = 0, lwork_q = 0;
    /* Scratch: the matrix t, tau and the info word first (the workspace
     * query wants real pointers), then the workspace, 256-byte aligned. */
    size_t head = (rows * cols + cols + 1 + 63) / 64 * 64; /* floats */
    ddph_status st = grow_scratch(n, head * sizeof(float), err);
    if (st != DDPH_OK)
        return st;
    float *t = n->qr_scratch, *tau = t + rows * cols;
    if (cusolverDnSgeqrf_bufferSize(solver, m, k, t, m, &lwork_qr) !=
            CUSOLVER_STATUS_SUCCESS ||
        cusolverDnSorgqr_bufferSize(solver, m, k, k, t, m, tau, &lwork_q) !=
            CUSOLVER_STATUS_SUCCESS)
        return ddph__fail(err, DDPH_ERR_BACKEND,
                          "orthogonalize: cuSOLVER workspace query failed");
    size_t lwork = (size_t)(lwork_qr > lwork_q ? lwork_qr : lwork_q);
    if ((st = grow_scratch(n, (head + lwork) * sizeof(float), err)) != DDPH_OK)
        return st;
    t = n->qr_scratch; /* may have moved */
    tau = t + rows * cols;
    int *info = (int *)(tau + cols);
    float *work = t + head;
    const float one = 1.0f, zero = 0.0f;
    /* beta = 0 still reads B (= t) in cuBLAS's in-place mode: no NaN there. */
    cudaError_t e = cudaMemsetAsync(t, 0, rows * cols * sizeof(float),
                                    STREAM(n));
    if (e != cudaSuccess)
        return ddph__cuda_fail(err, e, "orthogonalize: cudaMemsetAsync");
    if (cublasSgeam(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, k, &one, x, k, &zero,
                    t, m, t, m) != CUBLAS_STATUS_SUCCESS ||
        cusolverDnSgeqrf(solver, m, k, t, m, tau, work, (int)lwork, info) !=
            CUSOLVER_STATUS_SUCCESS ||
        cusolverDnSorgqr(solver, m, k, k, t, m, tau, work, (int)lwork, info) !=
            CUSOLVER_STATUS_SUCCESS ||
        cublasSgeam(blas, CUBLAS_OP_T, CUBLAS_OP_N, k, m, &one, t, m, &zero,
                    x, k, x, k) != CUBLAS_STATUS_SUCCESS)
        return ddph__fail(err, DDPH_ERR_BACKEND,
                          "orthogonalize: launching the QR failed");
    /* The info word goes to pinned memory without a wait (PowerSGD
     * orthogonalizes a matrix per bucket): checked when the stream has
     * drained (backend_nccl.c, qr_checked). */
    if (!n->qr_info) {
        void *pinned = NULL;
        e = cudaMallocHost(&pinned, sizeof(int));
        if (e != cudaSuccess)
            return ddph__cuda_fail(err, e, "orthogonalize: cudaMallocHost");
        n->qr_info = pinned;
        *n->qr_info = 0;
    }
    e = cudaMemcpyAsync(n->qr_info, info, sizeof(int), cudaMemcpyDeviceToHost,
                        STREAM(n));
    return e == cudaSuccess
               ? DDPH_OK
               : ddph__cuda_fail(err, e, "orthogonalize: cudaMemcpyAsync");
}

ddph_status ddph__nccl_orthogonalize(ddph_nccl *n, float *x, size_t rows,
                                     size_t cols, double eps, ddph_err *err)
{
    if (cols == 0 || rows == 0)
        return DDPH_OK;
    if (cols > rows)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "orthogonalize: %zu columns > %zu rows", cols, rows);
    if (cols > 2)
        return householder_qr(n, x, rows, cols, err);
    int e = ddph__cuda_gram_schmidt(x, rows, cols, eps, n->stream);
    return e ? ddph__cuda_fail(err, e, "Gram-Schmidt kernel") : DDPH_OK;
}

ddph_status ddph__nccl_axpy(ddph_nccl *n, size_t count, float alpha,
                            const float *x, float *y, ddph_err *err)
{
    const size_t chunk = (size_t)1 << 30;
    for (size_t at = 0; at < count; at += chunk) {
        size_t len = count - at < chunk ? count - at : chunk;
        cublasStatus_t s = cublasSaxpy((cublasHandle_t)n->blas, (int)len,
                                       &alpha, x + at, 1, y + at, 1);
        if (s != CUBLAS_STATUS_SUCCESS)
            return ddph__fail(err, DDPH_ERR_BACKEND, "cublasSaxpy failed (%d)",
                              (int)s);
    }
    return DDPH_OK;
}

ddph_status ddph__nccl_copy(ddph_nccl *n, void *dst, const void *src,
                            size_t bytes, ddph_copy_kind kind, ddph_err *err)
{
    if (!bytes)
        return DDPH_OK;
    enum cudaMemcpyKind k = kind == DDPH_COPY_TO_HOST ? cudaMemcpyDeviceToHost
                            : kind == DDPH_COPY_FROM_HOST
                                ? cudaMemcpyHostToDevice
                                : cudaMemcpyDeviceToDevice;
    /* To or from pageable host memory, cudaMemcpyAsync returns only
     * when the copy is done (or staged), behind whatever the stream runs:
     * that work is waited for first, against timeout_s, so that a stuck
     * collective is reported instead of holding the copy for ever. */
    if (k != cudaMemcpyDeviceToDevice) {
        ddph_status st = ddph__nccl_wait(n, NULL, "copy (the work before it)",
                                         err);
        if (st != DDPH_OK)
            return st;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, STREAM(n));
    if (e != cudaSuccess)
        return ddph__cuda_fail(err, e, "cudaMemcpyAsync");
    /* Host memory is the caller's to reuse or read once this returns. */
    return k == cudaMemcpyDeviceToDevice ? DDPH_OK
                                         : ddph__nccl_wait(n, NULL, "copy", err);
}

ddph_status ddph__nccl_zero(ddph_nccl *n, void *buf, size_t bytes,
                            ddph_err *err)
{
    if (!bytes)
        return DDPH_OK;
    cudaError_t e = cudaMemsetAsync(buf, 0, bytes, STREAM(n));
    return e ? ddph__cuda_fail(err, e, "cudaMemsetAsync") : DDPH_OK;
}

/* ---- sparse and quantized hooks --------------------------------------- */

/* topk is enqueued like the element-wise operations (its selection stays
 * on the device).  absmax's result is host memory (the services define
 * it so: plugin.h), so it waits for the stream, the one device operation
 * that does: first the work before it, against timeout_s, so that only
 * its own kernel is waited for without a deadline.  A hook that needs
 * the maximum only on the device calls chunk_abs_max with one chunk,
 * enqueued (int8 does).  Their scratch comes from the module's pool. */
ddph_status ddph__nccl_topk(ddph_nccl *n, const float *x, size_t count,
                            size_t k, float *values, int32_t *indices,
                            ddph_err *err)
{
    void *pool = NULL;
    ddph_status st = ddph__cuda_pool(&pool, err);
    if (st != DDPH_OK)
        return st;
    int e = ddph__cuda_topk(x, count, k, values, indices, pool, n->stream);
    return e ? ddph__cuda_fail(err, e, "topk kernels") : DDPH_OK;
}

ddph_status ddph__nccl_absmax(ddph_nccl *n, const float *x, size_t count,
                              float *out, ddph_err *err)
{
    void *pool = NULL;
    ddph_status st = ddph__cuda_pool(&pool, err);
    if (st == DDPH_OK)
        st = ddph__nccl_wait(n, NULL, "absmax (the work before it)", err);
    if (st != DDPH_OK)
        return st;
    int e = ddph__cuda_absmax(x, count, out, pool, n->stream);
    return e ? ddph__cuda_fail(err, e, "absmax kernel") : DDPH_OK;
}

ddph_status ddph__nccl_gather(ddph_nccl *n, const float *x,
                              const int32_t *idx, size_t k, float *out,
                              ddph_err *err)
{
    int e = ddph__cuda_gather(x, idx, k, out, n->stream);
    return e ? ddph__cuda_fail(err, e, "gather kernel") : DDPH_OK;
}

ddph_status ddph__nccl_scatter_add(ddph_nccl *n, float *y, const int32_t *idx,
                                   const float *v, size_t k, float alpha,
                                   ddph_err *err)
{
    int e = ddph__cuda_scatter_add(y, idx, v, k, alpha, n->stream);
    return e ? ddph__cuda_fail(err, e, "scatter_add kernel") : DDPH_OK;
}

ddph_status ddph__nccl_quantize_int8(ddph_nccl *n, const float *x,
                                     size_t count, float scale, int8_t *q,
                                     ddph_err *err)
{
    int e = ddph__cuda_quantize_int8(x, count, scale, (signed char *)q,
                                     n->stream);
    return e ? ddph__cuda_fail(err, e, "quantize kernel") : DDPH_OK;
}

ddph_status ddph__nccl_dequantize_int8(ddph_nccl *n, const int8_t *q,
                                       size_t count, float scale, float beta,
                                       float *y, ddph_err *err)
{
    int e = ddph__cuda_dequantize_int8((const signed char *)q, count, scale,
                                       beta, y, n->stream);
    return e ? ddph__cuda_fail(err, e, "dequantize kernel") : DDPH_OK;
}

ddph_status ddph__nccl_pack_signs(ddph_nccl *n, const float *x, size_t count,
                                  uint8_t *bits, ddph_err *err)
{
    int e = ddph__cuda_pack_signs(x, count, bits, n->stream);
    return e ? ddph__cuda_fail(err, e, "pack_signs kernel") : DDPH_OK;
}

ddph_status ddph__nccl_unpack_signs(ddph_nccl *n, const uint8_t *bits,
                                    size_t count, size_t chunk,
                                    const float *scales, float beta, float *y,
                                    ddph_err *err)
{
    int e = ddph__cuda_unpack_signs(bits, count, chunk, scales, beta, y,
                                    n->stream);
    return e ? ddph__cuda_fail(err, e, "unpack_signs kernel") : DDPH_OK;
}

ddph_status ddph__nccl_chunk_abs(ddph_nccl *n, const float *x, size_t count,
                                 size_t chunk, int want_max, float *out,
                                 ddph_err *err)
{
    int e = ddph__cuda_chunk_abs(x, count, chunk, want_max, out, n->stream);
    return e ? ddph__cuda_fail(err, e, want_max ? "chunk_abs_max kernel"
                                                : "chunk_abs_sum kernel")
             : DDPH_OK;
}

ddph_status ddph__nccl_round_stochastic(ddph_nccl *n, const float *x,
                                        size_t count, size_t chunk,
                                        const float *scales, int levels,
                                        uint64_t seed, int8_t *q,
                                        ddph_err *err)
{
    int e = ddph__cuda_round_stochastic(x, count, chunk, scales, levels, seed,
                                        (signed char *)q, n->stream);
    return e ? ddph__cuda_fail(err, e, "round_stochastic kernel") : DDPH_OK;
}

ddph_status ddph__nccl_pack_bits(ddph_nccl *n, const int8_t *q, size_t count,
                                 int bits, uint8_t *packed, ddph_err *err)
{
    int e = ddph__cuda_pack_bits((const signed char *)q, count, bits, packed,
                                 n->stream);
    return e ? ddph__cuda_fail(err, e, "pack_bits kernel") : DDPH_OK;
}

ddph_status ddph__nccl_unpack_bits(ddph_nccl *n, const uint8_t *packed,
                                   size_t count, int bits, size_t chunk,
                                   const float *scales, int nmsg,
                                   size_t stride, float beta, float *y,
                                   ddph_err *err)
{
    int e = ddph__cuda_unpack_bits(packed, count, bits, chunk, scales, nmsg,
                                   stride, beta, y, n->stream);
    return e ? ddph__cuda_fail(err, e, "unpack_bits kernel") : DDPH_OK;
}
