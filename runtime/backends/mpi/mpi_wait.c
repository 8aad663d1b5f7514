/* mpi_wait.c: waits bounded by timeout_s (mpi_internal.h). */
#include "build-config.h"

#include "backends/mpi/mpi_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Polls reqs until all complete, the job breaks (a peer's notice, or
 * another thread's failure) or timeout_s passes after `start` (when the
 * collective began: a nonblocking one may be waited for later).  MPICH
 * moves data only inside MPI calls, so for the first SPIN_S seconds of a
 * wait the loop tests without pause, as MPICH's own blocking calls do;
 * after that (a slow or dead peer) it sleeps between tests so that a
 * waiting rank does not burn a core.  After YIELD_POLLS tests the spin
 * yields the core after each one: this rank's trainer thread (copying the
 * next bucket in, or a finished one back) or another rank of an
 * oversubscribed host then runs while MPI waits on a peer.  GPT-2 with
 * copies on 2 ranks and 2 cores: 188-215 -> 156-163 ms a step; 2 hosts x
 * 2 ranks: 1.90 -> 1.58 s (notes/performance-history.md, "Yielding while
 * waiting").  Sleeping between tests from the first 100 us on instead was
 * slower: GPT example, 2 simulated hosts at 100 Mbit/s, 0.402 against
 * 0.347 s a step (docs/performance.md, "Overlap with the backward pass").
 * The yield is for a machine whose cores are all wanted: where fewer
 * threads are runnable than it has cores (a rank whose trainer waits in
 * ddph_step_wait, on a host with a core for each rank), a yield only
 * delays the next poll, and MPICH's TCP transport sends no more data
 * until then.  So the loop yields only while the machine has more
 * runnable threads than cores (cores_wanted).  The GPT example's seven
 * buckets on 2 simulated hosts at 100 Mbit/s (`ddphook bench hooks
 * --shapes`): 0.81-0.89x of the raw MPI loop yielding on every poll,
 * 1.00x spinning. */
#define SPIN_S 0.25
#define YIELD_POLLS 256

/* Whether this machine has more runnable threads than online cores
 * (/proc/loadavg's fourth field, which counts the caller), read at most
 * every READ_EVERY_US by all threads together; where it cannot be read,
 * it is taken to have. */
#define READ_EVERY_US 2000
static int cores_wanted(double now)
{
    static atomic_long online;        /* sysconf reads a file: once */
    static atomic_llong read_at_us;   /* when the answer below was read */
    static atomic_int wanted = 1;
    long long now_us = (long long)(now * 1e6);
    if (now_us - atomic_load_explicit(&read_at_us, memory_order_relaxed) <
        READ_EVERY_US)
        return atomic_load_explicit(&wanted, memory_order_relaxed);
    atomic_store_explicit(&read_at_us, now_us, memory_order_relaxed);
    long cores = atomic_load_explicit(&online, memory_order_relaxed);
    if (cores == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cores = n > 0 ? n : 1;
        atomic_store_explicit(&online, cores, memory_order_relaxed);
    }
    long running = 0;
    int n = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        n = fscanf(f, "%*f %*f %*f %ld/", &running);
        fclose(f);
    }
    int answer = n != 1 || running > cores;
    atomic_store_explicit(&wanted, answer, memory_order_relaxed);
    return answer;
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

/* With `round`, one round of a chain of dependent exchanges (the ring):
 * while the machine's cores are all wanted, the loop yields from its
 * first poll, not after YIELD_POLLS, since the peer it waits for may be
 * a rank waiting for this core.  The GPT example, 100 steps on simulated
 * hosts at 1 Gbit/s, against yielding after YIELD_POLLS (two runs each):
 * 4 hosts x 1 rank 13.1-14.1 s against 16.9-18.9; 3 x 1 13.6 against
 * 15.9-16.4; fp16 at 2 x 2 10.6-11.8 against 14.1-18.5, at 2 x 1 9.3-9.4
 * against 9.7; at 100 Mbit/s (60 steps) the same or up to 6% faster. */
static ddph_status wait_all(ddph_mpi *m, int n, MPI_Request *reqs,
                            double start, const char *what, int round,
                            ddph_err *err)
{
    double deadline = start + m->timeout_s, spin_from = ddph__now();
    int yielding = 1;
    unsigned yield_from = round && cores_wanted(spin_from) ? 0 : YIELD_POLLS;
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        int rc = ddph__mpi_test_all(n, reqs, &done);
        if (rc != MPI_SUCCESS)
            return ddph__mpi_failed(m, err, rc, what);
        if (done)
            return DDPH_OK;
        if (polls >= yield_from && yielding)
            sched_yield();
        if (polls % 256 != 255)
            continue;
        ddph__activity_touch(); /* a bounded wait, not a stuck hook */
        ddph_status st = ddph__mpi_collective_fault(m, err);
        if (st == DDPH_OK)
            st = m->wait_poll ? m->wait_poll(reqs, err) : DDPH_OK;
        if (st != DDPH_OK)
            return st;
        double now = ddph__now();
        yielding = cores_wanted(now);
        if (now > deadline)
            return ddph__mpi_timed_out(m, what, "", err);
        if (now - spin_from > SPIN_S) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

ddph_status ddph__mpi_wait_timed_all(ddph_mpi *m, int n, MPI_Request *reqs,
                                     double start, const char *what,
                                     ddph_err *err)
{
    return wait_all(m, n, reqs, start, what, 0, err);
}

ddph_status ddph__mpi_wait_round(ddph_mpi *m, int n, MPI_Request *reqs,
                                 double start, const char *what, ddph_err *err)
{
    return wait_all(m, n, reqs, start, what, 1, err);
}

ddph_status ddph__mpi_wait_timed(ddph_mpi *m, MPI_Request *req, const char *what,
                              ddph_err *err)
{
    return ddph__mpi_wait_timed_all(m, 1, req, ddph__now(), what, err);
}
