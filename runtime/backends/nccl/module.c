/* module.c: the GPU backend module's one exported symbol, the table of
 * comm/gpu.h: backend_nccl.c's functions, its collectives table
 * (comm/comm.h) and device_cuda.c's device table.
 * Built as <pkglibdir>/backends/nccl.so; the runtime loads it when a job
 * says backend = nccl (plugin/gpu_module.c). */
#include "build-config.h"

#include "backends/gpu.h"
#include "backends/nccl/backend_nccl.h"
#include "backends/nccl/device_cuda.h"

static void *stream(ddph_gpu *g)
{
    return g->stream;
}

static int device(ddph_gpu *g)
{
    return g->device;
}

/* The backend, and the device table told the rank's GPU. */
static ddph_status init(const ddph_gpu_job *job, ddph_gpu **out,
                        ddph_err *err)
{
    ddph_status st = ddph__nccl_init(job, out, err);
    if (st == DDPH_OK)
        ddph__cuda_set_home((*out)->device);
    return st;
}

static const ddph_gpu_ops table = {
    .version = DDPH__GPU_MODULE_VERSION,
    .struct_size = sizeof(ddph_gpu_ops),
    .probe = ddph__nccl_probe,
    .init = init,
    .finalize = ddph__nccl_finalize,
    .stream = stream,
    .device = device,
    .comm = &ddph__nccl_comm_ops,
    .device_ops = &ddph__cuda_device_ops,
};

__attribute__((visibility("default"))) const ddph_gpu_ops *
ddph_gpu_module_v1(void)
{
    return &table;
}
