// cuda_ops.cu: see cuda_ops.h.  Element-wise grid-stride kernels; every
// conversion to a half type rounds to nearest even (__float2half_rn,
// __float2bfloat16_rn), as the CPU path and PyTorch do, and gives a NaN
// the CPU path's bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "backends/nccl/cuda_ops.h"
#include "device/quant_element.h"

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
    case F16: {
        // A NaN becomes the CPU path's (and c10::Half's) quiet NaN with its
        // sign, 0x7E00, not CUDA's 0x7FFF.
        float f = static_cast<float>(v);
        static_cast<__half *>(p)[i] =
            isnan(f) ? __ushort_as_half(signbit(f) ? 0xFE00 : 0x7E00)
                     : __float2half_rn(f);
        break;
    }
    default: {
        // ...and c10::BFloat16's 0x7FC0.
        float f = static_cast<float>(v);
        static_cast<__nv_bfloat16 *>(p)[i] =
            isnan(f) ? __ushort_as_bfloat16(0x7FC0) : __float2bfloat16_rn(f);
        break;
    }
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


// ---- sparse and quantized hooks (sparse_ops.h has the definitions) ------

__device__ unsigned magnitude_key(float x)
{
    return __float_as_uint(x) & 0x7fffffffu;
}

// Top-k's radix select, a byte of the keys at a time from the top, as
// the CPU path does, kept on the device: no round trip to the host.
struct TopkState {
    unsigned prefix, mask;   // the bytes chosen so far
    unsigned long long want; // keys still to take at the prefix (the
                             // keys above it are all taken)
};

__global__ void topk_init_kernel(TopkState *s, unsigned long long k)
{
    s->prefix = 0;
    s->mask = 0;
    s->want = k;
}

// Histogram of one byte of the keys whose higher bytes equal the prefix.
__global__ void key_histogram_kernel(const float *x, size_t n,
                                     const TopkState *s, int shift,
                                     unsigned long long *hist)
{
    __shared__ unsigned local[256];
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    unsigned prefix = s->prefix, mask = s->mask;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned key = magnitude_key(x[i]);
        if ((key & mask) == prefix)
            atomicAdd(&local[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b])
            atomicAdd(&hist[b], static_cast<unsigned long long>(local[b]));
}

// The byte at `shift` of the k-th largest key (one thread: 256 steps).
__global__ void topk_choose_byte_kernel(const unsigned long long *hist,
                                        int shift, TopkState *s)
{
    unsigned long long want = s->want;
    int byte = 255;
    for (; byte > 0 && hist[byte] < want; byte--)
        want -= hist[byte];
    s->want = want;
    s->prefix |= static_cast<unsigned>(byte) << shift;
    s->mask |= 0xffu << shift;
}

// 1 where the key is the threshold's (the prefix, now all four bytes).
__global__ void topk_ties_kernel(const float *x, size_t n, const TopkState *s,
                                 int *tie)
{
    unsigned t = s->prefix;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        tie[i] = magnitude_key(x[i]) == t;
}

// Whether index i is chosen: its key is above the threshold, or equal to
// it and among the first `want` such (tie_rank: an exclusive scan of the
// ties), so that exactly k are chosen, the lowest indices among ties.
struct TopkChosen {
    const float *x;
    const int *tie_rank;
    const TopkState *s;
    __device__ bool operator()(int i) const
    {
        unsigned key = magnitude_key(x[i]), t = s->prefix;
        return key > t ||
               (key == t && static_cast<unsigned long long>(tie_rank[i]) < s->want);
    }
};

__global__ void gather_kernel(const float *x, const int *idx, size_t k,
                              float *out)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k;
         j += (size_t)gridDim.x * blockDim.x)
        out[j] = x[idx[j]];
}

__global__ void scatter_add_kernel(float *y, const int *idx, const float *v,
                                   size_t k, float alpha)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k;
         j += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&y[idx[j]], alpha == 1.0f ? v[j] : __fmul_rn(alpha, v[j]));
}

// The largest key: |x| of finite values and Inf keep their order as
// unsigned bits, and a NaN's bits are above +Inf's.  A block's largest is
// reduced in shared memory, then one atomic a block (blockDim.x is 256).
__global__ void absmax_kernel(const float *x, size_t n, unsigned *best)
{
    __shared__ unsigned block_best[256];
    unsigned m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        m = max(m, magnitude_key(x[i]));
    block_best[threadIdx.x] = m;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            block_best[threadIdx.x] =
                max(block_best[threadIdx.x], block_best[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicMax(best, block_best[0]);
}

__global__ void quantize_kernel(const float *x, size_t n, float inv,
                                signed char *q)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        /* NaN is 0, as on the CPU: tested before the clamp, because
         * fmaxf(NaN, -127) is -127. */
        float v = rintf(__fmul_rn(x[i], inv));
        q[i] = isnan(v) ? 0
                        : static_cast<signed char>(
                              fminf(fmaxf(v, -127.0f), 127.0f));
    }
}

__global__ void dequantize_kernel(const signed char *q, size_t n, float scale,
                                  float beta, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float d = __fmul_rn(scale, static_cast<float>(q[i]));
        y[i] = beta == 0.0f ? d : __fadd_rn(__fmul_rn(beta, y[i]), d);
    }
}

// sign_ops.h: one thread a byte of signs.
__global__ void pack_signs_kernel(const float *x, size_t n, unsigned char *bits)
{
    size_t nbytes = (n + 7) / 8;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < nbytes;
         j += (size_t)gridDim.x * blockDim.x) {
        unsigned b = 0;
        for (unsigned k = 0; k < 8 && j * 8 + k < n; k++)
            b |= (__float_as_uint(x[j * 8 + k]) >> 31) << k;
        bits[j] = static_cast<unsigned char>(b);
    }
}

__global__ void unpack_signs_kernel(const unsigned char *bits, size_t n,
                                    size_t chunk, const float *scales,
                                    float beta, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = scales[i / chunk];
        float d = (bits[i >> 3] >> (i & 7)) & 1u ? -s : s;
        y[i] = beta == 0.0f ? d : __fadd_rn(__fmul_rn(beta, y[i]), d);
    }
}

// One block a chunk (grid-stride over chunks): the sum of |x| in double,
// or the largest magnitude key, reduced in shared memory.
__global__ void chunk_abs_kernel(const float *x, size_t n, size_t chunk,
                                 size_t nchunks, bool want_max, float *out)
{
    __shared__ double sums[256];
    __shared__ unsigned keys[256];
    for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        size_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;
        double sum = 0;
        unsigned key = 0;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            sum += fabs(static_cast<double>(x[i]));
            key = max(key, magnitude_key(x[i]));
        }
        sums[threadIdx.x] = sum;
        keys[threadIdx.x] = key;
        __syncthreads();
        for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) {
                sums[threadIdx.x] += sums[threadIdx.x + half];
                keys[threadIdx.x] = max(keys[threadIdx.x], keys[threadIdx.x + half]);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0)
            out[c] = want_max ? __uint_as_float(keys[0])
                              : static_cast<float>(sums[0]);
        __syncthreads(); // sums/keys are reused for the next chunk
    }
}

// quant_ops.h's operations (ABI minor 6): each element computed by
// quant_element.h's functions, the very code of the CPU's portable loops
// (its float operations __fmul_rn and friends here), so the codes are
// the CPU's bits.
__global__ void round_stochastic_kernel(const float *x, size_t n, size_t chunk,
                                        const float *scales, float top,
                                        uint64_t seed, int8_t *q)
{
    uint32_t key = ddph__quant_key(seed);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = scales[i / chunk];
        q[i] = ddph__quant_scale_usable(s)
                   ? ddph__quant_round_one(x[i], ddph__quant_inverse(s), top,
                                           key, static_cast<uint32_t>(i))
                   : 0;
    }
}

// One thread a byte of codes.
__global__ void pack_bits_kernel(const int8_t *q, size_t n, unsigned bits,
                                 uint8_t *out)
{
    size_t per = 8u / bits, nbytes = (n + per - 1) / per;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < nbytes;
         j += (size_t)gridDim.x * blockDim.x)
        out[j] = ddph__quant_pack_byte(q, n, j, bits);
}

// Every message summed in a thread's registers, y written once.
__global__ void unpack_bits_kernel(const uint8_t *packed, size_t n,
                                   unsigned bits, size_t chunk,
                                   const float *scales, int nmsg,
                                   size_t stride, float beta, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = ddph__quant_sum_one(packed, scales, nmsg, stride, i,
                                   i / chunk, bits, beta,
                                   beta == 0.0f ? 0.0f : y[i]);
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

// Up to COPY_BATCH copies in one launch, their table passed by value
// (1.5 KiB of the 4 KiB of kernel parameters): blockIdx.y picks the copy,
// the blocks along x stride over its bytes, 16 at a time where source,
// destination and length allow it.
constexpr int COPY_BATCH = 64;
struct copy_table {
    const char *src[COPY_BATCH];
    char *dst[COPY_BATCH];
    size_t bytes[COPY_BATCH];
};

__global__ void copy_batch_kernel(copy_table t)
{
    const char *src = t.src[blockIdx.y];
    char *dst = t.dst[blockIdx.y];
    size_t bytes = t.bytes[blockIdx.y];
    size_t at = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    if (((reinterpret_cast<size_t>(src) | reinterpret_cast<size_t>(dst) |
          bytes) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        for (size_t i = at; i < bytes / 16; i += stride)
            d[i] = s[i];
    } else {
        for (size_t i = at; i < bytes; i += stride)
            dst[i] = src[i];
    }
}

extern "C" int ddph__cuda_copy_batch(void *const *dst, const void *const *src,
                                     const size_t *bytes, size_t n,
                                     void *stream)
{
    for (size_t first = 0; first < n; first += COPY_BATCH) {
        copy_table t;
        size_t m = n - first < COPY_BATCH ? n - first : COPY_BATCH, most = 0;
        for (size_t j = 0; j < m; j++) {
            t.src[j] = static_cast<const char *>(src[first + j]);
            t.dst[j] = static_cast<char *>(dst[first + j]);
            t.bytes[j] = bytes[first + j];
            most = bytes[first + j] > most ? bytes[first + j] : most;
        }
        if (most == 0)
            continue;
        dim3 grid(blocks_for((most + 15) / 16), static_cast<unsigned>(m));
        copy_batch_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(t);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return static_cast<int>(e);
    }
    return 0;
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

// Bytes rounded up to a multiple of 256: the scratch's pieces stay
// aligned for any type.
static size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Scratch of top-k and absmax, stream-ordered, from the pool the caller
// gives (the module's own, device_cuda.c's ddph__cuda_pool: it keeps
// what is freed, and the device's default pool, the trainer's, is left
// alone).
static cudaError_t scratch_alloc(void **p, size_t bytes, void *pool,
                                 cudaStream_t st)
{
    return cudaMallocFromPoolAsync(p, bytes, static_cast<cudaMemPool_t>(pool),
                                   st);
}

extern "C" int ddph__cuda_topk(const float *x, size_t n, size_t k,
                               float *values, int *indices, void *pool,
                               void *stream)
{
    if (k == 0)
        return 0;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int count = static_cast<int>(n); // n <= INT32_MAX (ddph__topk_check)
    thrust::counting_iterator<int> index(0);
    // CUB's scratch sizes (computed on the host, nothing enqueued).
    size_t scan_bytes = 0, select_bytes = 0;
    cudaError_t e = cub::DeviceScan::ExclusiveSum(
        nullptr, scan_bytes, static_cast<int *>(nullptr), count, st);
    if (e == cudaSuccess)
        e = cub::DeviceSelect::If(nullptr, select_bytes, index,
                                  static_cast<int *>(nullptr),
                                  static_cast<int *>(nullptr), count,
                                  TopkChosen{}, st);
    if (e != cudaSuccess)
        return static_cast<int>(e);
    // One stream-ordered allocation for everything: histogram, state,
    // the count CUB writes, the ties' ranks, indices when the caller
    // wants values only, and CUB's scratch.
    size_t hist_at = 0;
    size_t state_at = hist_at + aligned(256 * sizeof(unsigned long long));
    size_t selected_at = state_at + aligned(sizeof(TopkState));
    size_t ties_at = selected_at + aligned(sizeof(int));
    size_t idx_at = ties_at + aligned(n * sizeof(int));
    size_t cub_at = idx_at + (indices ? 0 : aligned(k * sizeof(int)));
    size_t cub_bytes = scan_bytes > select_bytes ? scan_bytes : select_bytes;
    char *scratch = nullptr;
    e = scratch_alloc(reinterpret_cast<void **>(&scratch), cub_at + cub_bytes,
                      pool, st);
    if (e != cudaSuccess)
        return static_cast<int>(e);
    auto *hist = reinterpret_cast<unsigned long long *>(scratch + hist_at);
    auto *state = reinterpret_cast<TopkState *>(scratch + state_at);
    auto *selected = reinterpret_cast<int *>(scratch + selected_at);
    auto *ties = reinterpret_cast<int *>(scratch + ties_at);
    int *idx = indices ? indices : reinterpret_cast<int *>(scratch + idx_at);
    void *cub_scratch = scratch + cub_at;
    topk_init_kernel<<<1, 1, 0, st>>>(state, k);
    e = cudaGetLastError();
    for (int shift = 24; shift >= 0 && e == cudaSuccess; shift -= 8) {
        e = cudaMemsetAsync(hist, 0, 256 * sizeof *hist, st);
        if (e != cudaSuccess)
            break;
        key_histogram_kernel<<<blocks_for(n), 256, 0, st>>>(x, n, state, shift,
                                                           hist);
        topk_choose_byte_kernel<<<1, 1, 0, st>>>(hist, shift, state);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        topk_ties_kernel<<<blocks_for(n), 256, 0, st>>>(x, n, state, ties);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cub::DeviceScan::ExclusiveSum(cub_scratch, scan_bytes, ties, count,
                                          st);
    // Stable: the chosen indices come out in ascending order, as the CPU
    // path gives them; exactly k of them.
    if (e == cudaSuccess)
        e = cub::DeviceSelect::If(cub_scratch, select_bytes, index, idx,
                                  selected, count,
                                  TopkChosen{x, ties, state}, st);
    if (e == cudaSuccess && values) {
        gather_kernel<<<blocks_for(k), 256, 0, st>>>(x, idx, k, values);
        e = cudaGetLastError();
    }
    cudaFreeAsync(scratch, st);
    return static_cast<int>(e);
}

extern "C" int ddph__cuda_gather(const float *x, const int *idx, size_t k,
                                 float *out, void *stream)
{
    if (k == 0)
        return 0;
    gather_kernel<<<blocks_for(k), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        x, idx, k, out);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_scatter_add(float *y, const int *idx, const float *v,
                                      size_t k, float alpha, void *stream)
{
    if (k == 0)
        return 0;
    scatter_add_kernel<<<blocks_for(k), 256, 0,
                         static_cast<cudaStream_t>(stream)>>>(y, idx, v, k,
                                                              alpha);
    return static_cast<int>(cudaGetLastError());
}

// The result is host memory (the services' absmax): the one wait on the
// host left among these operations, for the copy out of its word.
extern "C" int ddph__cuda_absmax(const float *x, size_t n, float *out,
                                 void *pool, void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    unsigned *best = nullptr, host = 0;
    cudaError_t e = scratch_alloc(reinterpret_cast<void **>(&best),
                                  sizeof host, pool, st);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(best, 0, sizeof host, st);
    if (e == cudaSuccess && n) {
        absmax_kernel<<<blocks_for(n), 256, 0, st>>>(x, n, best);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess &&
        (e = cudaMemcpyAsync(&host, best, sizeof host, cudaMemcpyDeviceToHost,
                             st)) == cudaSuccess)
        e = cudaStreamSynchronize(st);
    if (best)
        cudaFreeAsync(best, st);
    float f;
    memcpy(&f, &host, sizeof f);
    *out = f;
    return static_cast<int>(e);
}

extern "C" int ddph__cuda_quantize_int8(const float *x, size_t n, float scale,
                                        signed char *q, void *stream)
{
    if (n == 0)
        return 0;
    // The reciprocal rounded to f32 once, as the CPU path computes it.
    quantize_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        x, n, 1.0f / scale, q);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_dequantize_int8(const signed char *q, size_t n,
                                          float scale, float beta, float *y,
                                          void *stream)
{
    if (n == 0)
        return 0;
    dequantize_kernel<<<blocks_for(n), 256, 0,
                        static_cast<cudaStream_t>(stream)>>>(q, n, scale, beta,
                                                             y);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_pack_signs(const float *x, size_t n,
                                     unsigned char *bits, void *stream)
{
    if (n == 0)
        return 0;
    pack_signs_kernel<<<blocks_for((n + 7) / 8), 256, 0,
                        static_cast<cudaStream_t>(stream)>>>(x, n, bits);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_unpack_signs(const unsigned char *bits, size_t n,
                                       size_t chunk, const float *scales,
                                       float beta, float *y, void *stream)
{
    if (n == 0)
        return 0;
    unpack_signs_kernel<<<blocks_for(n), 256, 0,
                          static_cast<cudaStream_t>(stream)>>>(bits, n, chunk,
                                                               scales, beta, y);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_chunk_abs(const float *x, size_t n, size_t chunk,
                                    int want_max, float *out, void *stream)
{
    size_t nchunks = chunk ? (n + chunk - 1) / chunk : 0;
    if (nchunks == 0)
        return 0;
    unsigned blocks = nchunks > 65535 ? 65535u : static_cast<unsigned>(nchunks);
    chunk_abs_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        x, n, chunk, nchunks, want_max != 0, out);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_round_stochastic(const float *x, size_t n,
                                           size_t chunk, const float *scales,
                                           int levels, uint64_t seed,
                                           signed char *q, void *stream)
{
    if (n == 0)
        return 0;
    round_stochastic_kernel<<<blocks_for(n), 256, 0,
                              static_cast<cudaStream_t>(stream)>>>(
        x, n, chunk, scales, static_cast<float>(levels), seed,
        reinterpret_cast<int8_t *>(q));
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_pack_bits(const signed char *q, size_t n, int bits,
                                    unsigned char *packed, void *stream)
{
    if (n == 0)
        return 0;
    size_t per = 8 / static_cast<size_t>(bits);
    pack_bits_kernel<<<blocks_for((n + per - 1) / per), 256, 0,
                       static_cast<cudaStream_t>(stream)>>>(
        reinterpret_cast<const int8_t *>(q), n, static_cast<unsigned>(bits),
        packed);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int ddph__cuda_unpack_bits(const unsigned char *packed, size_t n,
                                      int bits, size_t chunk,
                                      const float *scales, int nmsg,
                                      size_t stride, float beta, float *y,
                                      void *stream)
{
    if (n == 0)
        return 0;
    unpack_bits_kernel<<<blocks_for(n), 256, 0,
                         static_cast<cudaStream_t>(stream)>>>(
        packed, n, static_cast<unsigned>(bits), chunk, scales, nmsg, stride,
        beta, y);
    return static_cast<int>(cudaGetLastError());
}
