/* unit_backend_mpi.c: what the MPI backend decides without running MPI:
 * which UCX_TLS settings make ddph_open warn of MPICH's finalize hang. */
#include "build-config.h"

#include "backend_mpi.h"
#include "unit.h"

START_TEST(tcp_without_shared_memory_warns)
{
    ck_assert(ddph__ucx_tls_tcp_only("tcp"));
    ck_assert(ddph__ucx_tls_tcp_only("tcp,self"));
    ck_assert(ddph__ucx_tls_tcp_only("self,tcp"));
    /* Leaving out every shared-memory transport by exclusion. */
    ck_assert(ddph__ucx_tls_tcp_only("^sm"));
    ck_assert(ddph__ucx_tls_tcp_only("^rc,ud,shm"));
}
END_TEST

START_TEST(shared_memory_or_no_tcp_is_quiet)
{
    ck_assert(!ddph__ucx_tls_tcp_only(NULL));
    ck_assert(!ddph__ucx_tls_tcp_only(""));
    ck_assert(!ddph__ucx_tls_tcp_only("tcp,self,sm"));
    ck_assert(!ddph__ucx_tls_tcp_only("sm,tcp"));
    ck_assert(!ddph__ucx_tls_tcp_only("tcp,posix,self"));
    ck_assert(!ddph__ucx_tls_tcp_only("tcp,cma"));
    ck_assert(!ddph__ucx_tls_tcp_only("all"));
    ck_assert(!ddph__ucx_tls_tcp_only("rc,self"));
    /* Names that only begin like a transport's are not it. */
    ck_assert(!ddph__ucx_tls_tcp_only("tcpx,self"));
    ck_assert(ddph__ucx_tls_tcp_only("tcp,smx"));
    /* An exclusion list keeps shared memory unless it drops all of it. */
    ck_assert(!ddph__ucx_tls_tcp_only("^cma"));
    ck_assert(!ddph__ucx_tls_tcp_only("^tcp,sm"));
    ck_assert(!ddph__ucx_tls_tcp_only("^posix,sysv"));
}
END_TEST

Suite *backend_mpi_suite(void)
{
    Suite *s = suite_create("backend_mpi");
    TCase *tc = tcase_create("UCX_TLS");
    tcase_add_test(tc, tcp_without_shared_memory_warns);
    tcase_add_test(tc, shared_memory_or_no_tcp_is_quiet);
    suite_add_tcase(s, tc);
    return s;
}
