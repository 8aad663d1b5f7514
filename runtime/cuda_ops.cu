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
