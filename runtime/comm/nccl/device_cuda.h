/* device_cuda.h: device_ops.h's table on the GPU (device_cuda.c): the
 * arithmetic of nccl_math.c and the memory, copies and events of
 * device_cuda.c, handed to the runtime in the GPU module's table. */
#ifndef DDPH_DEVICE_CUDA_H
#define DDPH_DEVICE_CUDA_H

#include "device/device_ops.h"

extern const ddph_dev_ops ddph__cuda_device_ops;

/* The hooks' private memory pool of the current device (a cudaMemPool_t
 * that keeps what is freed), made on first use.  Stream-ordered
 * allocations from it (cudaMallocFromPoolAsync) synchronise nothing. */
ddph_status ddph__cuda_pool(void **out, ddph_err *err);

#endif
