/* mpich_finalize.c: an LD_PRELOAD library that keeps MPICH 3.4 to 4.1's
 * MPI_Finalize from hanging over UCX's TCP transport.
 *
 * Those MPICH versions close every UCX endpoint in MPI_Finalize with
 * ucp_disconnect_nb (a flush, then a close) and wait for the closes, and
 * only then enter a PMI barrier.  UCX's TCP transport flushes an endpoint
 * that has sent anything by a zero-length PUT that the peer must
 * acknowledge from its own progress loop; a peer whose closes have all
 * completed already waits in the PMI barrier, reading its PMI socket, and
 * never does.  The job then hangs with one rank spinning in
 * ucp_worker_progress.  MPICH 4.2 enters the barrier first and does not
 * wait in one afterwards.
 *
 * Inside MPI_Finalize, every operation of a correct MPI program has
 * completed, so no endpoint carries anything a peer still needs: this
 * library answers MPICH's disconnects as done without starting them, and
 * ucp_worker_destroy, after the PMI barrier that every rank now reaches,
 * closes the endpoints without a flush.  Outside MPI_Finalize,
 * ucp_disconnect_nb is UCX's own.  Nothing is linked: both real functions
 * are found at run time, so hydra's own processes can load it too.
 *
 *   mpiexec -genv LD_PRELOAD <pkglibdir>/preload/mpich-finalize.so ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucp/api/ucp.h>

/* Lets ddph_open tell that this library is loaded (it then does not warn). */
extern const int ddph_mpich_finalize_preloaded;
const int ddph_mpich_finalize_preloaded = 1;

static atomic_int finalizing;

static void *next_symbol(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL) {
        fprintf(stderr, "mpich-finalize.so: %s not found after this library: %s\n",
                name, dlerror());
        abort();
    }
    return fn;
}

int MPI_Finalize(void)
{
    int (*real_finalize)(void) = (int (*)(void))next_symbol("PMPI_Finalize");
    atomic_store(&finalizing, 1);
    int rc = real_finalize();
    atomic_store(&finalizing, 0);
    return rc;
}

ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep)
{
    if (atomic_load(&finalizing))
        return UCS_STATUS_PTR(UCS_OK);
    ucs_status_ptr_t (*real_disconnect)(ucp_ep_h) =
        (ucs_status_ptr_t (*)(ucp_ep_h))next_symbol("ucp_disconnect_nb");
    return real_disconnect(ep);
}
