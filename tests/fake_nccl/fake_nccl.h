/* fake_nccl.h: a stand-in for the CUDA runtime, cuBLAS, cuSOLVER and
 * NCCL calls the nccl backend makes, so that its logic is tested on
 * machines without a GPU.  The real headers give every signature; the
 * test links tests/fake_nccl/fake_nccl.c instead of the real libraries.
 *
 * It behaves like NCCL where the backend depends on it: several ranks
 * (threads of one process, each naming its rank with fake_set_rank) move
 * real data, in host memory, for every collective the backend uses
 * (allreduce, allgather, broadcast, reduce-scatter, send/recv); the GPU
 * is asynchronous (fake_cuda.c): a stream's work (copies, memsets,
 * kernels, collectives) runs only when the stream is synchronised or
 * queried, or when a stream that waits for an event recorded after it
 * runs, so a missing event wait reads stale data; a collective runs
 * when every rank of its communicator has enqueued it, and until then
 * each rank's stream answers cudaErrorNotReady, left as the thread's
 * last error as CUDA does; a thread has a current device, streams and
 * events belong to the device current at their making, and a kernel
 * launch or an event record on another device's stream fails ("invalid
 * resource handle"), as CUDA does; memory from cudaMalloc and pools
 * is known to cudaPointerGetAttributes by device; MAX and MIN on floats are
 * fmaxf and fminf (a NaN is dropped); f16 and bf16 sum in float,
 * rounded to the type after each rank; a communicator is ready when every
 * rank has joined it; ncclCommSplit runs the child's init as a job of
 * the parent, as NCCL does: the parent answers ncclInProgress until the
 * child has connected, then the child is delivered, a failed one too,
 * and its failure is set on the parent for good; aborting a parent
 * whose split is under way delivers the half-made child; a communicator
 * with an error answers it to every later call; every enqueue outside a
 * group on a nonblocking communicator of 2+ ranks answers
 * ncclInProgress (NCCL >= 2.23); an error inside a group is set on the
 * group's nonblocking communicators; calls inside
 * a group may answer ncclInProgress, and ncclGroupEnd on a nonblocking
 * communicator does, leaving it to be settled; a scripted asynchronous
 * error strikes in the middle of a collective (it then never completes);
 * ncclCommDestroy without ncclCommFinalize blocks while the
 * communicator's work is unfinished; a call on a communicator that is
 * ended, or not settled, stops the test (abort); a call on a
 * communicator while another thread is inside one on it is counted
 * (NCCL forbids it: concurrent_calls).  What a real GPU does
 * is tested by tests/gpu. */
#ifndef DDPH_FAKE_NCCL_H
#define DDPH_FAKE_NCCL_H

#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define FAKE_MAX_RANKS 8

/* How the fake answers; fake_reset() sets a working GPU per rank. */
typedef struct fake_script {
    int device_count; /* cudaGetDeviceCount, on every rank */
    /* Nonzero: every rank is on one host and sees the same GPUs (their
     * UUIDs are the same); 0: each rank's GPUs are its own. */
    int one_host;
    ncclResult_t unique_id; /* ncclGetUniqueId's answer */
    /* ncclCommInitRankConfig, ncclCommSplit, ncclGroupEnd and every
     * enqueue outside a group return `returns`; when it is
     * ncclInProgress the communicator then answers ncclInProgress to
     * ncclCommGetAsyncError `pending` more times (-1: for ever) and
     * `settles` after (once ready). */
    ncclResult_t returns;
    int pending;
    ncclResult_t settles;
    /* Nonzero: a lone nonblocking enqueue on 2+ ranks stays
     * ncclInProgress for ever (its group thread stuck, as in a run-time
     * connect to a peer that is gone). */
    int enqueue_stalls;
    /* Every call inside a group answers this (ncclSuccess by default;
     * NCCL may answer ncclInProgress there). */
    ncclResult_t in_group;
    /* New communicators of a split: ncclInProgress this many polls (-1:
     * for ever, a child that never connects), then child_settles. */
    int child_pending;
    ncclResult_t child_settles;
    /* cudaStreamQuery: cudaErrorNotReady `stream_busy` more times after
     * each enqueue (-1: for ever), then `stream_ends`.  While busy,
     * ncclCommGetAsyncError answers `async_while_busy` (when not
     * ncclSuccess). */
    int stream_busy;
    cudaError_t stream_ends;
    ncclResult_t async_while_busy;
    /* Nonzero: the fail_op-th collective (from 1) enqueued on the
     * fail_comm-th communicator made (from 0, in creation order across
     * ranks' cliques: 0 is the first init) strikes `fail_with` on every
     * rank of that communicator as soon as one rank enqueued it; it never
     * completes. */
    int fail_op;
    int fail_comm;
    ncclResult_t fail_with;
} fake_script;

/* What one rank's backend did. */
typedef struct fake_record {
    int inits, splits, enqueues, aborts, destroys, finalizes;
    int destroy_unfinalized; /* ncclCommDestroy before a finalize settled */
    int init_blocking;  /* config.blocking of the last init */
    int split_blocking; /* of the last split */
    int split_color;    /* the colour of the last ncclCommSplit */
    int async_polls;
    int stream_polls;
    int stream_priority; /* of the last stream created */
    /* Calls made while another thread was inside one on the same
     * communicator (NCCL forbids it): 0 unless the backend did. */
    int concurrent_calls;
} fake_record;

extern fake_script fake;
extern fake_record fake_seen[FAKE_MAX_RANKS];

void fake_reset(void);
/* The calling thread is this rank (0 unless set). */
void fake_set_rank(int rank);
/* The thread's last CUDA error as the fake holds it, without clearing. */
cudaError_t fake_peek_last_error(void);
/* Whether communicator c was ended (aborted or destroyed). */
int fake_comm_ended(ncclComm_t c);
/* How many threads are inside an NCCL call on c now. */
int fake_comm_in_call(ncclComm_t c);
/* Whether it was aborted (not destroyed). */
int fake_comm_aborted(ncclComm_t c);
/* How many communicators made for this rank (its inits, its share of
 * splits, half-made ones included) are not yet ended: 0 after a clean
 * teardown, or one leaked. */
int fake_live_comms(int rank);

/* IEEE half <-> float, as the fake sums f16 (and the tests check them). */
float fake_f16_to_float(uint16_t h);
uint16_t fake_float_to_f16(float f);

#endif
