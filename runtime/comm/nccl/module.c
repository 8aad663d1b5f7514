/* module.c: the GPU backend module's one exported symbol, the table of
 * comm/gpu.h filled with backend_nccl.c's and device_cuda.c's functions.
 * Built as <pkglibdir>/backends/nccl.so; the runtime loads it when a job
 * says backend = nccl (plugin/gpu_module.c). */
#include "build-config.h"

#include "comm/gpu.h"
#include "comm/nccl/backend_nccl.h"
#include "comm/nccl/device_cuda.h"

static void *stream(ddph_gpu *g)
{
    return g->stream;
}

static int device(ddph_gpu *g)
{
    return g->device;
}

static const ddph_gpu_ops table = {
    .version = DDPH__GPU_MODULE_VERSION,
    .struct_size = sizeof(ddph_gpu_ops),
    .probe = ddph__nccl_probe,
    .init = ddph__nccl_init,
    .finalize = ddph__nccl_finalize,
    .stream = stream,
    .device = device,
    .comm = &ddph__nccl_comm_ops,
    .cast = ddph__nccl_cast,
    .divide = ddph__nccl_divide,
    .gemm = ddph__nccl_gemm,
    .orthogonalize = ddph__nccl_orthogonalize,
    .axpy = ddph__nccl_axpy,
    .copy = ddph__nccl_copy,
    .zero = ddph__nccl_zero,
    .topk = ddph__nccl_topk,
    .absmax = ddph__nccl_absmax,
    .gather = ddph__nccl_gather,
    .scatter_add = ddph__nccl_scatter_add,
    .quantize_int8 = ddph__nccl_quantize_int8,
    .dequantize_int8 = ddph__nccl_dequantize_int8,
    .pack_signs = ddph__nccl_pack_signs,
    .unpack_signs = ddph__nccl_unpack_signs,
    .chunk_abs = ddph__nccl_chunk_abs,
    .memory = &ddph__cuda_memory,
};

__attribute__((visibility("default"))) const ddph_gpu_ops *
ddph_gpu_module_v1(void)
{
    return &table;
}
