/* nccl_internal.h: what the files of the NCCL backend share and no other
 * module uses (backend_nccl.c: the collectives; nccl_init.c: the
 * communicators' start, splits and end). */
#ifndef DDPH_NCCL_INTERNAL_H
#define DDPH_NCCL_INTERNAL_H

#include <nccl.h>

#include "backends/nccl/backend_nccl.h"

#define STREAM(n) ((cudaStream_t)(n)->stream)

/* An NCCL error r from `what`, as a status and message. */
ddph_status ddph__nccl_fail(ddph_err *err, ncclResult_t r, const char *what);

/* Every communicator is nonblocking (config.blocking = 0): an NCCL call
 * may return ncclInProgress, and the communicator then works in the
 * background until ncclCommGetAsyncError says ncclSuccess (or an error);
 * no other call may be made on it before.  This waits for that, against
 * `deadline`, watching the job's failure notices; at the deadline, or on
 * a peer's failure, the communicator is aborted (ncclCommAbort does not
 * wait for peers).  *comm is set to NULL when it was aborted. */
ddph_status ddph__nccl_settle(ddph_nccl *n, ncclComm_t *comm, ncclResult_t r,
                              const char *what, double deadline,
                              ddph_err *err);

/* Every group of n with a communicator: the world, then the splits
 * (g NULL: the first). */
ddph_nccl_group *ddph__nccl_next_group(ddph_nccl *n, ddph_nccl_group *g);

/* DDPH_OK when g still has its communicator (not aborted). */
ddph_status ddph__nccl_need_comm(ddph_nccl_group *g, ddph_err *err);

#endif
