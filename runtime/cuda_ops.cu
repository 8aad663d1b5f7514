// cuda_ops.cu: see cuda_ops.h.  Element-wise grid-stride kernels; every
// conversion to a half type rounds to nearest even (__float2half_rn,
// __float2bfloat16_rn), as the CPU path and PyTorch do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_ops.h"

namespace {

// ddph_dtype codes (ddphook/types.h).
enum { F32 = 0, F64 = 1, F16 = 2, BF16 = 3 };

__device__ double load(const void *p, int t, size_t i)
{
    switch (t) {
    case F32: return static_cast<const float *>(p)[i];
    case F64: return static_cast<const double *>(p)[i];
    case F16: return __half2float(static_cast<const __half *>(p)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    }
}

// Values reach the half types through float: exact for them, and the one
// rounding is float -> half.
__device__ void store(void *p, int t, size_t i, double v)
{
    switch (t) {
    case F32: static_cast<float *>(p)[i] = static_cast<float>(v); break;
    case F64: static_cast<double *>(p)[i] = v; break;
    case F16: static_cast<__half *>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    default:
        static_cast<__nv_bfloat16 *>(p)[i] =
            __float2bfloat16_rn(static_cast<float>(v));
        break;
    }
}

__global__ void cast_kernel(const void *src, int st, void *dst, int dt,
                            size_t n, float scale, bool via_float, double dscale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double v = load(src, st, i);
        v = via_float ? static_cast<double>(static_cast<float>(v) * scale)
                      : v * dscale;
        store(dst, dt, i, v);
    }
}

__global__ void divide_kernel(void *buf, int t, size_t n, float fd, double dd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (t == F64)
            static_cast<double *>(buf)[i] /= dd;
        else
            store(buf, t, i, static_cast<float>(load(buf, t, i)) / fd);
    }
}

__global__ void nonfinite_kernel(const void *buf, int t, size_t n,
                                 unsigned long long *first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(load(buf, t, i)))
            atomicMin(first, static_cast<unsigned long long>(i));
}

constexpr unsigned GS_THREADS = 512;

// Sum of one double per thread, returned to every thread of the block.
__device__ double block_sum(double v, double *part)
{
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = GS_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    double total = part[0];
    __syncthreads(); // part is reused by the next call
    return total;
}

// One block: column i is normalised, then removed from every later column.
// __fmul_rn keeps nvcc from fusing x - d * y into an FMA the CPU path does
// not use.
__global__ void gram_schmidt_kernel(float *x, size_t rows, size_t cols,
                                    float eps, bool add_eps)
{
    __shared__ double part[GS_THREADS];
    for (size_t i = 0; i < cols; i++) {
        double ss = 0;
        for (size_t r = threadIdx.x; r < rows; r += GS_THREADS) {
            double v = x[r * cols + i];
            ss += v * v;
        }
        float norm = static_cast<float>(sqrt(block_sum(ss, part)));
        float denom = add_eps ? norm + eps : norm;
        for (size_t r = threadIdx.x; r < rows; r += GS_THREADS)
            x[r * cols + i] /= denom;
        __syncthreads();
        for (size_t j = i + 1; j < cols; j++) {
            double dot = 0;
            for (size_t r = threadIdx.x; r < rows; r += GS_THREADS)
                dot += static_cast<double>(x[r * cols + i]) * x[r * cols + j];
            float d = static_cast<float>(block_sum(dot, part));
            for (size_t r = threadIdx.x; r < rows; r += GS_THREADS)
                x[r * cols + j] -= __fmul_rn(d, x[r * cols + i]);
            __syncthreads();
        }
    }
}

unsigned blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return b ? (b > 65535 ? 65535u : static_cast<unsigned>(b)) : 1u;
}

} // namespace

extern "C" int ddph__cuda_cast(const void *src, int src_dtype, void *dst,
                               int dst_dtype, size_t n, double scale,
                               void *stream)
{
    if (n == 0)
        return 0;
    bool via_float = src_dtype != F64 && dst_dtype != F64;
    cast_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        src, src_dtype, dst, dst_dtype, n, static_cast<float>(scale),
        via_float, scale);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_divide(void *buf, int dtype, size_t n, double divisor,
                                 void *stream)
{
    if (n == 0)
        return 0;
    divide_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        buf, dtype, n, static_cast<float>(divisor), divisor);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_gram_schmidt(float *x, size_t rows, size_t cols,
                                       double eps, void *stream)
{
    if (rows == 0 || cols == 0)
        return 0;
    gram_schmidt_kernel<<<1, GS_THREADS, 0, static_cast<cudaStream_t>(stream)>>>(
        x, rows, cols, static_cast<float>(eps), eps != 0);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_first_nonfinite(const void *buf, int dtype, size_t n,
                                          unsigned long long *first,
                                          void *stream)
{
    if (n == 0)
        return 0;
    nonfinite_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        buf, dtype, n, first);
    return static_cast<int>(cudaGetLastError());
}
