/* device_cuda.h: the CUDA memory operations device/device.c calls
 * (device_cuda.c), handed to the runtime in the GPU module's table. */
#ifndef DDPH_DEVICE_CUDA_H
#define DDPH_DEVICE_CUDA_H

#include "device/device.h"

extern const ddph_dev_cuda_ops ddph__cuda_memory;

#endif
