/* fake_nccl.c: see fake_nccl.h.  One process, one thread: no collective
 * moves data; the fake only answers as the scripts say and counts. */
#include "fake_nccl.h"

#include <cublas_v2.h>
#include <cusolverDn.h>
#include <stdlib.h>
#include <string.h>

fake_script fake;
fake_record fake_seen;

struct ncclComm {
    int pending; /* ncclInProgress answers left (-1: for ever) */
    ncclResult_t settles;
    int ended;
};

/* Communicators are never freed: a test looks at them after an abort. */
#define MAX_COMMS 64
static struct ncclComm comms[MAX_COMMS];
static int ncomms;
static int stream_left;
static cudaError_t last_error;
static int stream_token, blas_token, solver_token;

void fake_reset(void)
{
    memset(&fake, 0, sizeof fake);
    memset(&fake_seen, 0, sizeof fake_seen);
    memset(comms, 0, sizeof comms);
    ncomms = 0;
    stream_left = 0;
    last_error = cudaSuccess;
    fake.device_count = 1;
    fake.unique_id = ncclSuccess;
    fake.returns = ncclSuccess;
    fake.settles = ncclSuccess;
    fake.stream_ends = cudaSuccess;
    fake.async_while_busy = ncclSuccess;
}

cudaError_t fake_peek_last_error(void) { return last_error; }

static ncclComm_t new_comm(void)
{
    if (ncomms == MAX_COMMS)
        abort();
    struct ncclComm *c = &comms[ncomms++];
    c->pending = fake.pending;
    c->settles = fake.settles;
    return c;
}

/* An enqueue: the stream is busy as scripted; a returned ncclInProgress
 * leaves the communicator pending. */
static ncclResult_t enqueue(ncclComm_t comm)
{
    if (!comm || comm->ended)
        abort(); /* the backend must never use an ended communicator */
    fake_seen.enqueues++;
    stream_left = fake.stream_busy;
    if (fake.returns == ncclInProgress) {
        comm->pending = fake.pending;
        comm->settles = fake.settles;
    }
    return fake.returns;
}

/* ---- CUDA runtime ------------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "some CUDA error";
    }
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = fake.device_count;
    return fake.device_count ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) { return cudaSuccess; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    *s = (cudaStream_t)(void *)&stream_token;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) { return cudaSuccess; }

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    fake_seen.stream_polls++;
    if (stream_left != 0) {
        if (stream_left > 0)
            stream_left--;
        last_error = cudaErrorNotReady; /* CUDA keeps it as the last error */
        return cudaErrorNotReady;
    }
    if (fake.stream_ends != cudaSuccess)
        last_error = fake.stream_ends;
    return fake.stream_ends;
}

cudaError_t cudaFree(void *p) { return cudaSuccess; }

/* ---- cuBLAS and cuSOLVER handles ------------------------------------ */

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = (cublasHandle_t)(void *)&blas_token;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    return CUBLAS_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *h)
{
    *h = (cusolverDnHandle_t)(void *)&solver_token;
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h)
{
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s)
{
    return CUSOLVER_STATUS_SUCCESS;
}

/* ---- NCCL ------------------------------------------------------------- */

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclSystemError: return "unhandled system error";
    default: return "some NCCL error";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 7, sizeof *id);
    return fake.unique_id;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    fake_seen.inits++;
    fake_seen.init_blocking = config->blocking;
    *comm = new_comm();
    return fake.returns;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config)
{
    if (!comm || comm->ended)
        abort();
    fake_seen.splits++;
    fake_seen.split_color = color;
    fake_seen.split_blocking = config->blocking;
    /* NCCL gives a rank that joins no communicator none. */
    *newcomm = color == NCCL_SPLIT_NOCOLOR ? NULL : new_comm();
    if (!*newcomm && fake.returns == ncclInProgress) {
        comm->pending = fake.pending;
        comm->settles = fake.settles;
    }
    return fake.returns;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    if (!comm || comm->ended)
        abort();
    fake_seen.async_polls++;
    if (comm->pending != 0) {
        if (comm->pending > 0)
            comm->pending--;
        *async = ncclInProgress;
    } else if (stream_left != 0) {
        *async = fake.async_while_busy;
    } else {
        *async = comm->settles;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm || comm->ended)
        abort();
    comm->ended = 1;
    fake_seen.aborts++;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm || comm->ended)
        abort();
    comm->ended = 1;
    fake_seen.destroys++;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s)
{
    return enqueue(comm);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t s)
{
    return enqueue(comm);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t s)
{
    return enqueue(comm);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s)
{
    return enqueue(comm);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, cudaStream_t s)
{
    return enqueue(comm);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t s)
{
    return enqueue(comm);
}

/* Inside a group the calls above return ncclSuccess in NCCL; the fake
 * keeps the scripted answer for the group's end.  (nccl.h declares these
 * two without a prototype.) */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }

ncclResult_t ncclGroupEnd(void) { return fake.returns; }
