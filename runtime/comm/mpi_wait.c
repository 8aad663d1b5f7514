/* mpi_wait.c: waits bounded by timeout_s (mpi_internal.h). */
#include "build-config.h"

#include "comm/mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Polls reqs until all complete, the job breaks (a peer's notice, or
 * another thread's failure) or timeout_s passes after `start` (when the
 * collective began: a nonblocking one may be waited for later).  MPICH
 * moves data only inside MPI calls, so a wait must keep testing; but a
 * thread that tests without pause takes the core that the trainer's
 * backward pass needs (the communication thread waits on one bucket while
 * backward computes the next), that the kernel's network stack needs to
 * move the bytes, and on an oversubscribed host that the other ranks
 * need.  So a wait spins for SPIN_US (a collective on shared memory or a
 * fast link usually ends within it), then sleeps between tests, each
 * pause 1/PAUSE_FRACTION of the time waited so far, between PAUSE_MIN_US
 * and PAUSE_MAX_US: a wait ends at most about 1/PAUSE_FRACTION later than
 * its collective, and a long one costs a few thousand wake-ups a second.
 * The sockets keep the link busy between tests (PAUSE_MAX_US of a
 * 10 Gbit/s link is 250 KB, less than a TCP socket's buffer).  GPT example,
 * 2 simulated hosts at 100 Mbit/s: docs/performance.md, "Overlap". */
#define SPIN_US 100.0
#define PAUSE_MIN_US 10.0
#define PAUSE_MAX_US 200.0
#define PAUSE_FRACTION 16.0
#define CHECK_POLLS 256 /* while spinning, look for faults this often */

/* The pause after a test that found the requests still running, `waited`
 * seconds into the wait: 0 while spinning. */
static double pause_us(double waited)
{
    double us = waited * 1e6;
    if (us < SPIN_US)
        return 0;
    us /= PAUSE_FRACTION;
    return us < PAUSE_MIN_US ? PAUSE_MIN_US : us > PAUSE_MAX_US ? PAUSE_MAX_US : us;
}

/* MPI_Testall, one request at a time (a completed one becomes
 * MPI_REQUEST_NULL, which tests as done). */
int ddph__mpi_test_all(int n, MPI_Request *reqs, int *done)
{
    *done = 1;
    for (int i = 0; i < n; i++) {
        int flag = 0, rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return rc;
        *done &= flag;
    }
    return MPI_SUCCESS;
}

ddph_status ddph__mpi_wait_timed_all(ddph_mpi *m, int n, MPI_Request *reqs,
                                  double start, const char *what,
                                  ddph_err *err)
{
    double deadline = start + m->timeout_s, began = ddph__now();
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        int rc = ddph__mpi_test_all(n, reqs, &done);
        if (rc != MPI_SUCCESS)
            return ddph__mpi_failed(m, err, rc, what);
        if (done)
            return DDPH_OK;
        double now = ddph__now(), pause = pause_us(now - began);
        if (pause == 0 && polls % CHECK_POLLS != CHECK_POLLS - 1)
            continue;
        ddph__activity_touch(); /* a bounded wait, not a stuck hook */
        ddph_status st = ddph__mpi_collective_fault(m, err);
        if (st == DDPH_OK)
            st = m->wait_poll ? m->wait_poll(reqs, err) : DDPH_OK;
        if (st != DDPH_OK)
            return st;
        if (now > deadline)
            return ddph__mpi_timed_out(m, what, "", err);
        if (pause > 0) {
            struct timespec ts = {0, (long)(pause * 1e3)};
            nanosleep(&ts, NULL);
        }
    }
}

ddph_status ddph__mpi_wait_timed(ddph_mpi *m, MPI_Request *req, const char *what,
                              ddph_err *err)
{
    return ddph__mpi_wait_timed_all(m, 1, req, ddph__now(), what, err);
}
