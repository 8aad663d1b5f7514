/* module.c: the GPU backend module's one exported symbol, the table of
 * comm/gpu.h filled with backend_nccl.c's functions and device_cuda.c's
 * device table.
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

static struct ddph_group *world(ddph_gpu *g)
{
    return &g->world;
}

static const ddph_gpu_ops table = {
    .version = DDPH__GPU_MODULE_VERSION,
    .struct_size = sizeof(ddph_gpu_ops),
    .probe = ddph__nccl_probe,
    .init = ddph__nccl_init,
    .finalize = ddph__nccl_finalize,
    .stream = stream,
    .device = device,
    .world = world,
    .allreduce = ddph__nccl_allreduce,
    .allgather = ddph__nccl_allgather,
    .broadcast = ddph__nccl_broadcast,
    .reduce_scatter = ddph__nccl_reduce_scatter,
    .allgatherv = ddph__nccl_allgatherv,
    .alltoall = ddph__nccl_alltoall,
    .start_allreduce = ddph__nccl_start_allreduce,
    .start_allgather = ddph__nccl_start_allgather,
    .start_allgatherv = ddph__nccl_start_allgatherv,
    .start_alltoall = ddph__nccl_start_alltoall,
    .wait = ddph__nccl_wait,
    .idle = ddph__nccl_idle,
    .split = ddph__nccl_split,
    .intra_node = ddph__nccl_intra_node,
    .device_ops = &ddph__cuda_device_ops,
};

__attribute__((visibility("default"))) const ddph_gpu_ops *
ddph_gpu_module_v1(void)
{
    return &table;
}
