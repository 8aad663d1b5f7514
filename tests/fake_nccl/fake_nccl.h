/* fake_nccl.h: a scripted stand-in for the CUDA runtime, cuBLAS,
 * cuSOLVER and NCCL calls the nccl backend makes, so that its logic
 * (nonblocking communicators settled against timeout_s, aborts, the
 * error text, sticky "not ready" errors, split colours) is tested on
 * machines without a GPU.  The real headers give every signature; the
 * test links tests/fake_nccl/fake_nccl.c instead of the real libraries.
 * What a real GPU does is tested by tests/gpu. */
#ifndef DDPH_FAKE_NCCL_H
#define DDPH_FAKE_NCCL_H

#include <cuda_runtime.h>
#include <nccl.h>

/* How the fake answers; fake_reset() sets a working GPU. */
typedef struct fake_script {
    int device_count;           /* cudaGetDeviceCount */
    ncclResult_t unique_id;     /* ncclGetUniqueId's answer */
    /* ncclCommInitRankConfig, ncclCommSplit and every enqueue return
     * `returns`; the communicator then answers ncclInProgress to
     * ncclCommGetAsyncError `pending` times (-1: for ever) and `settles`
     * after. */
    ncclResult_t returns;
    int pending;
    ncclResult_t settles;
    /* cudaStreamQuery: cudaErrorNotReady `stream_busy` times (-1: for
     * ever), leaving it as the thread's last error as CUDA does, then
     * `stream_ends`.  While busy, ncclCommGetAsyncError answers
     * `async_while_busy`. */
    int stream_busy;
    cudaError_t stream_ends;
    ncclResult_t async_while_busy;
} fake_script;

/* What the backend did. */
typedef struct fake_record {
    int inits, splits, enqueues, aborts, destroys;
    int init_blocking;  /* config.blocking of the last init */
    int split_blocking; /* of the last split */
    int split_color;    /* the colour of the last ncclCommSplit */
    int async_polls;
    int stream_polls;
} fake_record;

extern fake_script fake;
extern fake_record fake_seen;

void fake_reset(void);
/* The thread's last CUDA error as the fake holds it, without clearing. */
cudaError_t fake_peek_last_error(void);

#endif
