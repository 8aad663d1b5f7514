/* check_nccl_backend.c: the nccl backend's logic on a machine without a
 * GPU, against tests/fake_nccl (scripted CUDA and NCCL answers): every
 * communicator nonblocking, creation, splits, enqueues and stream waits
 * settled or aborted within timeout_s, NCCL's and CUDA's errors named in
 * the message, a stale "not ready" cleared, a rank outside a split still
 * joining it.  One rank; the host side (MPI) is faked too. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/backend_nccl.h"
#include "fake_nccl/fake_nccl.h"

#define TIMEOUT_S 0.3

static ddph_mpi mpi;
static ddph_status host_fault_status;
static ddph_status host_split_status;
static struct ddph_group split_group;

static void touch(void) {}

static ddph_status host_fault(ddph_mpi *m, ddph_err *err)
{
    return host_fault_status == DDPH_OK
               ? DDPH_OK
               : ddph__fail(err, host_fault_status,
                            "rank 1 failed: its hook returned an error");
}

static ddph_status host_allreduce_i64(ddph_mpi *m, int64_t *v, size_t n,
                                      ddph_redop op, ddph_err *err)
{
    return DDPH_OK; /* one rank: its own values */
}

static ddph_status host_bcast(ddph_mpi *m, void *buf, size_t bytes, int root,
                              ddph_err *err)
{
    return DDPH_OK;
}

static ddph_status host_split(ddph_mpi *m, struct ddph_group *parent,
                              int color, int key, struct ddph_group **out,
                              ddph_err *err)
{
    if (color < 0)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "colour %d: this rank is in no group", color);
    if (host_split_status != DDPH_OK)
        return ddph__fail(err, host_split_status, "MPI_Comm_split failed");
    split_group.rank = 0;
    split_group.size = 1;
    *out = &split_group;
    return DDPH_OK;
}

static const ddph_gpu_host host = {
    .mpi = &mpi,
    .activity_touch = touch,
    .fault = host_fault,
    .allreduce_i64 = host_allreduce_i64,
    .bcast_bytes = host_bcast,
    .split = host_split,
};

static void setup(void)
{
    fake_reset();
    memset(&mpi, 0, sizeof mpi);
    mpi.timeout_s = TIMEOUT_S;
    mpi.world.rank = 0;
    mpi.world.size = 1;
    host_fault_status = DDPH_OK;
    host_split_status = DDPH_OK;
}

static ddph_nccl *started(void)
{
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&host, &n, &err), DDPH_OK);
    ck_assert_ptr_nonnull(n);
    return n;
}

static float buf[16];

#define ck_assert_msg_has(err, text)                                      \
    ck_assert_msg(strstr((err).msg, (text)) != NULL,                      \
                  "message '%s' lacks '%s'", (err).msg, (text))

START_TEST(init_is_nonblocking_and_clears_not_ready)
{
    ddph_nccl *n = started();
    ck_assert_int_eq(fake_seen.inits, 1);
    ck_assert_int_eq(fake_seen.init_blocking, 0);
    /* The stream answers "not ready" three times: CUDA keeps that as the
     * thread's last error, which the next launch would report. */
    fake.stream_busy = 3;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_allreduce(n, &n->world, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_OK);
    ck_assert_int_eq(fake_seen.stream_polls, 4);
    ck_assert_int_eq(fake_peek_last_error(), cudaSuccess);
    /* ddph__nccl_idle leaves no stale error either. */
    fake.stream_busy = 1;
    ck_assert_int_eq(ddph__nccl_start_allreduce(n, &n->world, buf, 16,
                                                DDPH_F32, DDPH_SUM, &err),
                     DDPH_OK);
    ck_assert_int_eq(ddph__nccl_idle(n), 0);
    ck_assert_int_eq(fake_peek_last_error(), cudaSuccess);
    ck_assert_int_eq(ddph__nccl_idle(n), 1);
    ddph__nccl_finalize(n, 0);
    ck_assert_int_eq(fake_seen.destroys, 1);
    ck_assert_int_eq(fake_seen.aborts, 0);
}
END_TEST

START_TEST(init_that_never_connects_times_out)
{
    fake.returns = ncclInProgress;
    fake.pending = -1; /* a peer that never comes */
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_init(&host, &n, &err), DDPH_ERR_TIMEOUT);
    double took = ddph__now() - t0;
    ck_assert_msg(took >= TIMEOUT_S && took < TIMEOUT_S + 1,
                  "took %.3f s against timeout_s %.1f", took, TIMEOUT_S);
    ck_assert_msg_has(err,
                      "ncclCommInitRank did not complete within timeout_s");
    ck_assert_int_eq(fake_seen.aborts, 1);
    ck_assert_int_eq(fake_seen.destroys, 0);
}
END_TEST

START_TEST(init_error_is_named)
{
    fake.pending = 3;
    fake.settles = ncclRemoteError;
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&host, &n, &err), DDPH_ERR_BACKEND);
    ck_assert_msg_has(err, "ncclCommInitRank failed: remote process exited");
    ck_assert_int_eq(fake_seen.aborts, 1);
}
END_TEST

START_TEST(no_device_is_unsupported)
{
    fake.device_count = 0;
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&host, &n, &err), DDPH_ERR_UNSUPPORTED);
    ck_assert_msg_has(err, "no CUDA device on this rank");
    ck_assert_int_eq(fake_seen.inits, 0);
}
END_TEST

START_TEST(unique_id_failure_stops_before_init)
{
    fake.unique_id = ncclSystemError;
    ddph_nccl *n = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_init(&host, &n, &err), DDPH_ERR_BACKEND);
    ck_assert_msg_has(err, "ncclGetUniqueId failed: unhandled system error");
    ck_assert_int_eq(fake_seen.inits, 0);
}
END_TEST

START_TEST(stuck_stream_times_out_and_aborts)
{
    ddph_nccl *n = started();
    fake.stream_busy = -1;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_allreduce(n, &n->world, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_TIMEOUT);
    double took = ddph__now() - t0;
    ck_assert_msg(took >= TIMEOUT_S && took < TIMEOUT_S + 1, "took %.3f s",
                  took);
    ck_assert_msg_has(err, "allreduce did not complete within timeout_s");
    ck_assert_int_eq(fake_seen.aborts, 1);
    ck_assert_ptr_null(n->world.nccl);
    /* The aborted communicator is never used again. */
    int enqueues = fake_seen.enqueues;
    ck_assert_int_eq(ddph__nccl_allreduce(n, &n->world, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_BACKEND);
    ck_assert_msg_has(err, "aborted after an earlier failure");
    ck_assert_int_eq(fake_seen.enqueues, enqueues);
    ddph__nccl_finalize(n, 1); /* aborts nothing twice (the fake would stop) */
    ck_assert_int_eq(fake_seen.aborts, 1);
}
END_TEST

START_TEST(async_error_while_waiting_is_reported_at_once)
{
    ddph_nccl *n = started();
    fake.stream_busy = -1;
    fake.async_while_busy = ncclRemoteError;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_allreduce(n, &n->world, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_BACKEND);
    ck_assert(ddph__now() - t0 < TIMEOUT_S);
    ck_assert_msg_has(err, "allreduce failed: remote process exited");
    ck_assert_int_eq(fake_seen.aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(peer_failure_ends_the_wait)
{
    ddph_nccl *n = started();
    fake.stream_busy = -1;
    host_fault_status = DDPH_ERR_HOOK;
    ddph_err err = {0};
    double t0 = ddph__now();
    ck_assert_int_eq(ddph__nccl_allreduce(n, &n->world, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_ERR_HOOK);
    ck_assert(ddph__now() - t0 < TIMEOUT_S);
    ck_assert_msg_has(err, "rank 1 failed");
    ck_assert_int_eq(fake_seen.aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(enqueue_in_progress_is_settled)
{
    ddph_nccl *n = started();
    fake.returns = ncclInProgress;
    fake.pending = 5;
    int polls = fake_seen.async_polls;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_allreduce(n, &n->world, buf, 16, DDPH_F32,
                                          DDPH_SUM, &err),
                     DDPH_OK);
    ck_assert_int_ge(fake_seen.async_polls - polls, 6);
    /* One that stays in progress: reported at timeout_s, not waited on. */
    fake.pending = -1;
    ck_assert_int_eq(ddph__nccl_start_allgather(n, &n->world, buf, buf, 4,
                                                DDPH_F32, &err),
                     DDPH_ERR_TIMEOUT);
    ck_assert_msg_has(err, "ncclAllGather did not complete within timeout_s");
    ck_assert_int_eq(fake_seen.aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(enqueue_errors_are_named)
{
    ddph_nccl *n = started();
    fake.returns = ncclInvalidArgument;
    ddph_err err = {0};
    size_t counts[1] = {4};
    ck_assert_int_eq(ddph__nccl_start_allgatherv(n, &n->world, buf, buf,
                                                 counts, DDPH_F32, &err),
                     DDPH_ERR_BACKEND);
    ck_assert_msg_has(err,
                      "ncclBroadcast (allgatherv) failed: invalid argument");
    ddph__nccl_finalize(n, 1);
}
END_TEST

START_TEST(negative_colour_still_joins_the_split)
{
    ddph_nccl *n = started();
    struct ddph_group *g = NULL;
    ddph_err err = {0};
    /* The other ranks wait in ncclCommSplit until every rank of the
     * parent has called it: this one must, with NCCL_SPLIT_NOCOLOR. */
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, -1, 0, &g, &err),
                     DDPH_ERR_INVALID);
    ck_assert_int_eq(fake_seen.splits, 1);
    ck_assert_int_eq(fake_seen.split_color, NCCL_SPLIT_NOCOLOR);
    ck_assert_int_eq(fake_seen.split_blocking, 0);
    ck_assert_ptr_null(g);
    ck_assert_msg_has(err, "in no group");
    ddph__nccl_finalize(n, 0);
}
END_TEST

START_TEST(split_makes_a_communicator)
{
    ddph_nccl *n = started();
    struct ddph_group *g = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, 3, 0, &g, &err), DDPH_OK);
    ck_assert_int_eq(fake_seen.split_color, 3);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(g->nccl);
    ck_assert_int_eq(ddph__nccl_allreduce(n, g, buf, 16, DDPH_F32, DDPH_SUM,
                                          &err),
                     DDPH_OK);
    ddph__nccl_finalize(n, 0);
    ck_assert_int_eq(fake_seen.destroys, 2);
}
END_TEST

START_TEST(split_failing_on_every_rank_calls_no_nccl)
{
    ddph_nccl *n = started();
    host_split_status = DDPH_ERR_NOMEM;
    struct ddph_group *g = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, 2, 0, &g, &err),
                     DDPH_ERR_NOMEM);
    ck_assert_int_eq(fake_seen.splits, 0);
    ddph__nccl_finalize(n, 0);
}
END_TEST

START_TEST(split_that_never_completes_times_out)
{
    ddph_nccl *n = started();
    fake.returns = ncclInProgress;
    fake.pending = -1;
    struct ddph_group *g = NULL;
    ddph_err err = {0};
    ck_assert_int_eq(ddph__nccl_split(n, &n->world, 1, 0, &g, &err),
                     DDPH_ERR_TIMEOUT);
    ck_assert_msg_has(err, "ncclCommSplit did not complete within timeout_s");
    ck_assert_int_eq(fake_seen.aborts, 1);
    ddph__nccl_finalize(n, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl backend (fake NCCL)");
    TCase *tc = tcase_create("logic");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, init_is_nonblocking_and_clears_not_ready);
    tcase_add_test(tc, init_that_never_connects_times_out);
    tcase_add_test(tc, init_error_is_named);
    tcase_add_test(tc, no_device_is_unsupported);
    tcase_add_test(tc, unique_id_failure_stops_before_init);
    tcase_add_test(tc, stuck_stream_times_out_and_aborts);
    tcase_add_test(tc, async_error_while_waiting_is_reported_at_once);
    tcase_add_test(tc, peer_failure_ends_the_wait);
    tcase_add_test(tc, enqueue_in_progress_is_settled);
    tcase_add_test(tc, enqueue_errors_are_named);
    tcase_add_test(tc, negative_colour_still_joins_the_split);
    tcase_add_test(tc, split_makes_a_communicator);
    tcase_add_test(tc, split_failing_on_every_rank_calls_no_nccl);
    tcase_add_test(tc, split_that_never_completes_times_out);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
