/* gpu.h: the GPU backend (backend = nccl) as a table of operations.
 *
 * The collectives on GPU memory (NCCL) and the device operations (CUDA
 * kernels, cuBLAS, cuSOLVER) live in a module, <pkglibdir>/backends/
 * nccl.so, loaded with dlopen the first time a job asks for
 * backend = nccl.  libddphook.so itself links no CUDA library, so a CPU
 * trainer built on a machine with CUDA starts on one without.
 *
 * The module exports one symbol, ddph_gpu_module_v1, returning its table.
 * What the module needs of the runtime (the host side of its bootstrap and
 * splits, failure notices, the lane's activity clock) it is given as a
 * ddph_gpu_job when a context starts it. */
#ifndef DDPH_COMM_GPU_H
#define DDPH_COMM_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "backends/comm.h"
#include "device/device.h"
#include "support/util.h"

/* Bumped when the table or the host struct changes in any way: the
 * module is built from the same tree as the library, and a different
 * version is refused. */
#define DDPH__GPU_MODULE_VERSION 6

/* The module's state for one context (struct defined by the module). */
typedef struct ddph_gpu ddph_gpu;

/* What a context gives the module when it starts it: the job's control
 * plane (faults, the bootstrap's small collectives, the world) and the
 * host-memory collectives (comm.h's table: the groups that the module's
 * NCCL communicators mirror), both through comm.h's neutral tables. */
typedef struct ddph_gpu_job {
    ddph_control control;
    ddph_comm host;
    double timeout_s;
    int node_rank, node_size; /* this rank among the ranks of its host */
    /* The calling lane's activity clock (util.h): a bounded wait. */
    void (*activity_touch)(void);
} ddph_gpu_job;

typedef struct ddph_gpu_ops {
    uint32_t version; /* DDPH__GPU_MODULE_VERSION */
    uint32_t struct_size;

    /* ---- the backend: see comm/nccl/backend_nccl.h ---- */
    /* Whether this machine has a CUDA device (no collective). */
    ddph_status (*probe)(ddph_err *err);
    /* Collective over job->control's world; DDPH_ERR_UNSUPPORTED on every
     * rank when a rank has no GPU. */
    ddph_status (*init)(const ddph_gpu_job *job, ddph_gpu **out,
                        ddph_err *err);
    /* abort: communicators are aborted, never destroyed (which could
     * wait for dead peers).  Frees g. */
    void (*finalize)(ddph_gpu *g, int abort);
    void *(*stream)(ddph_gpu *g); /* the hooks' cudaStream_t */
    int (*device)(ddph_gpu *g);   /* this rank's GPU */
    /* The collectives on GPU memory (comm.h's table; its state is the
     * ddph_gpu): the world is the job's world with its NCCL
     * communicator, the nonblocking ones are enqueued on the stream. */
    const ddph_comm_ops *comm;

    /* ---- arithmetic, memory and ordering on the GPU: device_ops.h's
     * table (the module's state is its struct ddph_gpu) ---- */
    const ddph_dev_ops *device_ops;
} ddph_gpu_ops;

/* The module's entry symbol. */
typedef const ddph_gpu_ops *(*ddph_gpu_module_fn)(void);
const ddph_gpu_ops *ddph_gpu_module_v1(void);
#define DDPH__GPU_MODULE_SYMBOL "ddph_gpu_module_v1"

#endif
