/* device_cuda.h: the CUDA memory operations device/device.c calls
 * (device_cuda.c), handed to the runtime in the GPU module's table. */
#ifndef DDPH_DEVICE_CUDA_H
#define DDPH_DEVICE_CUDA_H

#include "device/device.h"

extern const ddph_dev_cuda_ops ddph__cuda_memory;

/* The hooks' private memory pool of the current device (a cudaMemPool_t
 * that keeps what is freed), made on first use.  Stream-ordered
 * allocations from it (cudaMallocFromPoolAsync) synchronise nothing. */
ddph_status ddph__cuda_pool(void **out, ddph_err *err);

#endif
