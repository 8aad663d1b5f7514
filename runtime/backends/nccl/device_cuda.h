/* device_cuda.h: device_ops.h's table on the GPU (device_cuda.c): the
 * arithmetic of nccl_math.c and the memory, copies and events of
 * device_cuda.c, handed to the runtime in the GPU module's table. */
#ifndef DDPH_DEVICE_CUDA_H
#define DDPH_DEVICE_CUDA_H

#include "device/device_ops.h"

extern const ddph_dev_ops ddph__cuda_device_ops;

/* The rank's GPU: every operation of the table that allocates, makes an
 * event or enqueues on a stream makes it current for its duration, from
 * whichever thread calls (module.c sets it when the backend starts). */
void ddph__cuda_set_home(int device);

/* The hooks' private memory pool of the rank's GPU (a cudaMemPool_t
 * that keeps what is freed), made on first use.  Stream-ordered
 * allocations from it (cudaMallocFromPoolAsync) synchronise nothing. */
ddph_status ddph__cuda_pool(void **out, ddph_err *err);

#endif
