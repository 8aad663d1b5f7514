/* nccl_init.c: the NCCL backend's communicators: the probe, the world's
 * (bootstrapped over the job backend's tables), splits, the ranks of a
 * host, and their end (backend_nccl.h). */
#include "build-config.h"

#include "backends/nccl/nccl_internal.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

ddph_status ddph__nccl_probe(ddph_err *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "no CUDA device on this machine (%s)",
                          e == cudaSuccess ? "0 devices"
                                           : cudaGetErrorString(e));
    return DDPH_OK;
}

/* A 63-bit digest of a GPU's UUID (0: unknown). */
static int64_t uuid_digest(const cudaUUID_t *u)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof u->bytes; i++) {
        h ^= (unsigned char)u->bytes[i];
        h *= 1099511628211ull;
    }
    return (int64_t)(h >> 1) | 1;
}

/* The GPU: this rank's index among the ranks of its host, modulo the
 * GPUs it sees (each rank may see only its own, CUDA_VISIBLE_DEVICES).
 * Collective: every rank's GPU UUID is gathered, and two ranks on one
 * GPU (more ranks on a host than GPUs) are an error on both, named here
 * rather than by NCCL's "Duplicate GPU detected" later. */
static ddph_status choose_device(ddph_nccl *n, int count, ddph_err *err)
{
    const ddph_gpu_job *job = &n->job;
    int size = ddph__ctl_world(job->control)->size;
    int rank = ddph__ctl_world(job->control)->rank;
    n->device = job->node_rank % count;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, n->device);
    int64_t *ids = calloc((size_t)size, sizeof *ids);
    if (!ids)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ids[rank] = e == cudaSuccess ? uuid_digest(&prop.uuid) : 0;
    /* An allgather as a sum: every rank fills only its own slot. */
    ddph_status st = ddph__ctl_allreduce_i64(job->control, ids, (size_t)size,
                                             DDPH_SUM, err);
    int other = -1;
    for (int r = 0; st == DDPH_OK && r < size && other < 0; r++)
        if (r != rank && ids[rank] != 0 && ids[r] == ids[rank])
            other = r;
    free(ids);
    if (st != DDPH_OK)
        return st;
    if (e != cudaSuccess)
        return ddph__cuda_fail(err, e, "cudaGetDeviceProperties");
    if (other >= 0)
        return ddph__fail(err, DDPH_ERR_BACKEND,
                          "rank %d and rank %d would share GPU %d of their "
                          "host (%d ranks there, %d GPUs visible to this "
                          "rank): NCCL needs a GPU of its own per rank; "
                          "start at most one rank per GPU, or give each "
                          "rank its own through CUDA_VISIBLE_DEVICES",
                          rank, other, n->device, job->node_size, count);
    return DDPH_OK;
}

/* The communication stream: non-blocking (no implicit waits on the legacy
 * stream) and of the highest priority, so that its collectives are
 * scheduled ahead of the trainer's backward kernels that overlap them. */
static cudaError_t comm_stream(cudaStream_t *s)
{
    int least = 0, greatest = 0;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess)
        greatest = 0;
    return cudaStreamCreateWithPriority(s, cudaStreamNonBlocking, greatest);
}

ddph_status ddph__nccl_init(const ddph_gpu_job *job, ddph_nccl **out,
                            ddph_err *err)
{
    ddph_nccl *n = calloc(1, sizeof *n);
    if (!n)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    n->job = *job;
    n->timeout_s = job->timeout_s;
    ddph_control control = job->control;
    const struct ddph_group *world = ddph__ctl_world(control);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    /* Every rank learns whether every rank has a GPU: no one waits alone. */
    int64_t have = e == cudaSuccess && count > 0;
    ddph_status st = ddph__ctl_allreduce_i64(control, &have, 1, DDPH_MIN, err);
    if (st == DDPH_OK && !have)
        st = ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                        "no CUDA device on %s rank (%s)",
                        e == cudaSuccess && count > 0 ? "another" : "this",
                        e == cudaSuccess ? "0 devices"
                                         : cudaGetErrorString(e));
    if (st != DDPH_OK) {
        free(n);
        return st;
    }
    /* Local set-up: a failure here is agreed on below, with rank 0's
     * ncclGetUniqueId, so that no rank waits in the broadcast alone.  The
     * caller's current device is its own (the trainer's): set back at the
     * end; the communication thread binds to n->device itself. */
    int caller_device = -1;
    if (cudaGetDevice(&caller_device) != cudaSuccess)
        caller_device = -1;
    st = choose_device(n, count, err);
    /* NCCL_COMM_BLOCKING=1 overrides config.blocking = 0: every call
     * would then block in NCCL, out of timeout_s's reach. */
    const char *blocking = getenv("NCCL_COMM_BLOCKING");
    if (st == DDPH_OK && blocking && atoi(blocking) != 0)
        st = ddph__fail(err, DDPH_ERR_INVALID,
                        "NCCL_COMM_BLOCKING=%s is set: it makes NCCL's "
                        "communicators blocking, which timeout_s cannot "
                        "bound; unset it (the nccl backend needs them "
                        "nonblocking)",
                        blocking);
    cudaStream_t s = NULL;
    cublasHandle_t h = NULL;
    cusolverDnHandle_t solver = NULL;
    if (st != DDPH_OK)
        ; /* agreed on below */
    else if ((e = cudaSetDevice(n->device)) != cudaSuccess)
        st = ddph__cuda_fail(err, e, "cudaSetDevice");
    else if ((e = comm_stream(&s)) != cudaSuccess)
        st = ddph__cuda_fail(err, e, "cudaStreamCreateWithPriority");
    n->stream = s;
    if (st == DDPH_OK && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cublasCreate failed");
    n->blas = h;
    /* Unset, cuBLAS would run on the legacy stream, out of the hooks'
     * order. */
    if (st == DDPH_OK && cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cublasSetStream failed");
    if (st == DDPH_OK && cusolverDnCreate(&solver) != CUSOLVER_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cusolverDnCreate failed");
    n->solver = solver;
    if (st == DDPH_OK &&
        cusolverDnSetStream(solver, s) != CUSOLVER_STATUS_SUCCESS)
        st = ddph__fail(err, DDPH_ERR_BACKEND, "cusolverDnSetStream failed");
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (st == DDPH_OK && world->rank == 0 &&
        (r = ncclGetUniqueId(&id)) != ncclSuccess)
        st = ddph__nccl_fail(err, r, "ncclGetUniqueId");
    int64_t ok = st == DDPH_OK;
    ddph_status agreed = ddph__ctl_allreduce_i64(control, &ok, 1, DDPH_MIN,
                                                 err);
    if (st == DDPH_OK && agreed != DDPH_OK)
        st = agreed;
    if (st == DDPH_OK && !ok)
        st = ddph__fail(err, DDPH_ERR_BACKEND,
                        "another rank failed to set up its GPU");
    if (st == DDPH_OK)
        st = ddph__ctl_bcast_bytes(control, &id, sizeof id, 0, err);
    ncclComm_t comm = NULL;
    if (st == DDPH_OK) {
        /* Nonblocking, so that a peer that never comes cannot hold this
         * rank in NCCL's bootstrap beyond timeout_s. */
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        r = ncclCommInitRankConfig(&comm, world->size, id, world->rank,
                                   &config);
        /* Even ncclSuccess may leave it connecting: asked until done. */
        st = ddph__nccl_settle(n, &comm, r == ncclSuccess ? ncclInProgress : r,
                    "ncclCommInitRank", ddph__now() + n->timeout_s, err);
    }
    if (caller_device >= 0 && caller_device != n->device)
        cudaSetDevice(caller_device);
    if (st != DDPH_OK) {
        ddph__nccl_finalize(n, 1);
        return st;
    }
    n->world.rank = world->rank;
    n->world.size = world->size;
    n->world.host = job->host.ops->world(job->host.self);
    n->world.nccl = comm;
    *out = n;
    return DDPH_OK;
}

/* Ends every communicator of n.  Not aborting: ncclCommFinalize on each
 * (nonblocking: it flushes their work), polled against timeout_s, then
 * ncclCommDestroy, which has nothing left to wait for; a communicator
 * that does not finalize in time (a peer gone mid-collective) is aborted
 * instead, so that teardown cannot block for ever. */
static void end_comms(ddph_nccl *n, int abort)
{
    double deadline = ddph__now() + n->timeout_s;
    /* Finalize all first: their peers finalize in whatever order. */
    for (ddph_nccl_group *g = &n->world; g; g = ddph__nccl_next_group(n, g)) {
        if (!g->nccl || abort)
            continue;
        ncclResult_t r = ncclCommFinalize((ncclComm_t)g->nccl);
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclCommAbort((ncclComm_t)g->nccl);
            g->nccl = NULL;
        }
    }
    for (ddph_nccl_group *g = &n->world; g; g = ddph__nccl_next_group(n, g)) {
        if (!g->nccl)
            continue;
        ncclComm_t c = (ncclComm_t)g->nccl;
        ddph_err ignored;
        if (abort || ddph__nccl_settle(n, &c, ncclInProgress, "ncclCommFinalize",
                            deadline, &ignored) != DDPH_OK) {
            if (c)
                ncclCommAbort(c);
        } else {
            ncclCommDestroy(c);
        }
        g->nccl = NULL;
    }
}

void ddph__nccl_finalize(ddph_nccl *n, int abort)
{
    end_comms(n, abort);
    for (ddph_nccl_group *g = n->groups, *next; g; g = next) {
        next = g->next;
        free(g);
    }
    if (n->blas)
        cublasDestroy((cublasHandle_t)n->blas);
    if (n->solver)
        cusolverDnDestroy((cusolverDnHandle_t)n->solver);
    /* In stream order: cudaFree would synchronise the device. */
    if (n->qr_scratch)
        cudaFreeAsync(n->qr_scratch, STREAM(n));
    if (n->qr_info)
        cudaFreeHost(n->qr_info);
    if (n->stream)
        cudaStreamDestroy(STREAM(n));
    free(n);
}

ddph_status ddph__nccl_split(ddph_nccl *n, ddph_nccl_group *parent, int color,
                             int key, ddph_nccl_group **out, ddph_err *err)
{
    const ddph_comm *host = &n->job.host;
    struct ddph_group *hg = NULL;
    ddph_status st =
        host->ops->split(host->self, parent->host, color, key, &hg, err);
    /* A negative colour leaves this rank without a group, but
     * ncclCommSplit is collective over the parent: it must still be
     * joined (with NCCL_SPLIT_NOCOLOR), or the other ranks wait in it for
     * ever.  Any other failure happened on every rank alike. */
    if (st != DDPH_OK && color >= 0)
        return st;
    ddph_err nerr;
    ddph_status nst = ddph__nccl_need_comm(parent, &nerr);
    ncclComm_t c = NULL;
    ddph_status split_st = DDPH_OK;
    if (nst == DDPH_OK) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t r = ncclCommSplit((ncclComm_t)parent->nccl,
                                       color < 0 ? NCCL_SPLIT_NOCOLOR : color,
                                       key, &c, &config);
        /* NCCL runs the child's init as a job of the parent (init.cc's
         * ncclCommInitChildComm, group.cc): the parent answers
         * ncclInProgress until the child has connected, and a failure of
         * the child is set on the parent for good, so that NCCL refuses
         * the parent's later calls.  A split that fails or stalls thus
         * costs the parent too: ddph__nccl_settle() aborts it (which stops the
         * child's init), and the half-made child NCCL wrote into c is
         * aborted as well, freeing it. */
        double deadline = ddph__now() + n->timeout_s;
        ncclComm_t pc = (ncclComm_t)parent->nccl;
        split_st = ddph__nccl_settle(n, &pc, r == ncclSuccess ? ncclInProgress : r,
                          "ncclCommSplit", deadline, &nerr);
        parent->nccl = pc;
        if (split_st != DDPH_OK && c) {
            ncclCommAbort(c);
            c = NULL;
        }
        if (split_st != DDPH_OK && !pc) {
            ddph_err why = nerr; /* not formatted into itself */
            ddph__fail(&nerr, split_st,
                       "%s; NCCL ties a split to its parent, so the "
                       "parent's communicator (a %d-rank group) was "
                       "aborted too, and collectives on it now fail",
                       why.msg, parent->size);
        }
        if (split_st == DDPH_OK && color >= 0 && !c)
            split_st = ddph__fail(&nerr, DDPH_ERR_BACKEND,
                                  "ncclCommSplit settled without giving "
                                  "this rank its communicator (colour %d)",
                                  color);
        /* Settled parent: the child is ready; asked once more all the
         * same, and only the child is aborted should it fail. */
        if (split_st == DDPH_OK && c)
            split_st = ddph__nccl_settle(n, &c, ncclInProgress,
                              "ncclCommSplit (the new communicator)",
                              deadline, &nerr);
    }
    if (color < 0) {
        if (c)
            ncclCommAbort(c); /* NCCL gives none; never used */
        return st; /* the MPI side's "no group" error */
    }
    if (nst != DDPH_OK)
        return ddph__fail(err, nst, "%s", nerr.msg);
    if (split_st != DDPH_OK)
        return ddph__fail(err, split_st, "%s", nerr.msg);
    ddph_nccl_group *g = calloc(1, sizeof *g);
    if (!g) {
        ncclCommAbort(c);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    g->rank = hg->rank;
    g->size = hg->size;
    g->host = hg; /* stays owned by the host backend's list */
    g->nccl = c;
    g->next = n->groups;
    n->groups = g;
    *out = g;
    return DDPH_OK;
}

ddph_status ddph__nccl_intra_node(ddph_nccl *n, ddph_nccl_group **out,
                                  ddph_err *err)
{
    const ddph_comm *host = &n->job.host;
    struct ddph_group *node;
    ddph_status st = host->ops->intra_node(host->self, &node, err);
    if (st != DDPH_OK)
        return st;
    /* The node's color: the world rank of its first rank. */
    int64_t leader = n->world.rank;
    st = host->ops->allreduce(host->self, node, &leader, 1, DDPH_I64,
                              DDPH_MIN, err);
    if (st != DDPH_OK)
        return st;
    return ddph__nccl_split(n, &n->world, (int)leader, n->world.rank, out,
                            err);
}

/* ---- comm.h's table: the functions above, with the ddph_nccl as state -- */

