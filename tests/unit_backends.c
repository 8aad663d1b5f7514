/* unit_backends.c: the registry names the backends, says which job
 * backend a launcher's variables choose, and loads a module's table only
 * when its version and size are this library's; the peers' departures
 * (peer_notices.c) keep every peer's latest notice and break a wait for
 * each peer that will never join it. */
#include "build-config.h"

#include <stdlib.h>
#include <string.h>

#include "backends/comm.h"
#include "backends/peer_notices.h"
#include "backends/registry.h"
#include "unit.h"

/* Every variable a registry line may name as its launcher's. */
static const char *const launch_vars[] = {
    "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID", "DDPH_TORCH_ATTACHED"};

static void clear_launchers(void)
{
    for (size_t i = 0; i < sizeof launch_vars / sizeof launch_vars[0]; i++)
        unsetenv(launch_vars[i]);
}

START_TEST(names_and_kinds)
{
    const ddph_backend_entry *mpi = ddph__backend_find("mpi");
    ck_assert_ptr_nonnull(mpi);
    ck_assert_int_eq(mpi->kind, DDPH__BACKEND_JOB);
    ck_assert_ptr_nonnull(mpi->builtin);
    const ddph_backend_entry *nccl = ddph__backend_find("nccl");
    ck_assert_ptr_nonnull(nccl);
    ck_assert_int_eq(nccl->kind, DDPH__BACKEND_DEVICE);
    ck_assert_ptr_null(nccl->builtin);
    ck_assert_ptr_null(ddph__backend_find("gloo"));
    ck_assert_ptr_null(ddph__backend_find("auto"));
    ck_assert_ptr_null(ddph__backend_find(NULL));
    char names[256];
    ddph__backend_names(names, sizeof names);
    ck_assert_ptr_nonnull(strstr(names, "mpi, nccl, torch"));
    char small[5];
    ddph__backend_names(small, sizeof small); /* cut, never overrun */
    ck_assert_uint_lt(strlen(small), sizeof small);
}
END_TEST

START_TEST(builtin_table_is_whole)
{
    const ddph_backend_ops *ops = NULL;
    ddph_err e;
    ck_assert_int_eq(ddph__backend_load_job(ddph__backend_find("mpi"), &ops,
                                            &e),
                     DDPH_OK);
    ck_assert_uint_eq(ops->version, DDPH__BACKEND_VERSION);
    ck_assert_uint_eq(ops->struct_size, sizeof *ops);
    ck_assert_str_eq(ops->name, "mpi");
    /* What the core calls without a NULL check. */
    ck_assert(ops->open && ops->find_host && ops->comm && ops->control &&
              ops->trainer_group && ops->barrier && ops->gather_bytes &&
              ops->leave && ops->close && ops->linger);
    /* A job backend is not a device backend, and the reverse. */
    const ddph_gpu_ops *gpu = NULL;
    ck_assert_int_eq(ddph__backend_load_device(ddph__backend_find("mpi"),
                                               &gpu, &e),
                     DDPH_ERR_INVALID);
    ck_assert_int_eq(ddph__backend_load_job(ddph__backend_find("nccl"), &ops,
                                            &e),
                     DDPH_ERR_INVALID);
}
END_TEST

START_TEST(launcher_chooses)
{
    clear_launchers();
    /* Started alone: MPI (a singleton). */
    ck_assert_str_eq(ddph__backend_launched()->name, "mpi");
    setenv("PMI_RANK", "1", 1);
    ck_assert_str_eq(ddph__backend_launched()->name, "mpi");
    /* torchrun's variable alone: the torch backend; with an MPI
     * launcher's too, MPI's (the first line whose launcher set one). */
    clear_launchers();
    setenv("TORCHELASTIC_RUN_ID", "x", 1);
    ck_assert_str_eq(ddph__backend_launched()->name, "torch");
    setenv("PMI_SIZE", "2", 1);
    ck_assert_str_eq(ddph__backend_launched()->name, "mpi");
    /* Every job backend the launcher names is a job backend. */
    clear_launchers();
    for (size_t i = 0; i < sizeof launch_vars / sizeof launch_vars[0]; i++) {
        setenv(launch_vars[i], "1", 1);
        const ddph_backend_entry *e = ddph__backend_launched();
        ck_assert_int_eq(e->kind, DDPH__BACKEND_JOB);
        unsetenv(launch_vars[i]);
    }
}
END_TEST

START_TEST(missing_module_names_file)
{
    setenv("DDPH_BACKEND_DIR", "/nonexistent/ddphook-backends", 1);
    const ddph_gpu_ops *gpu = NULL;
    ddph_err e;
    ddph_status st = ddph__backend_load_device(ddph__backend_find("nccl"),
                                               &gpu, &e);
    unsetenv("DDPH_BACKEND_DIR");
    ck_assert_int_ne(st, DDPH_OK);
    ck_assert_ptr_nonnull(strstr(e.msg, "the nccl backend is not available"));
    ck_assert_ptr_nonnull(
        strstr(e.msg, "/nonexistent/ddphook-backends/nccl.so"));
}
END_TEST

/* Each peer's notice is kept: one peer's trainer call, which this rank
 * has made too, does not hide another's ended data, nor an earlier
 * notice a later close. */
START_TEST(every_peer_departure_is_kept)
{
    ddph_peer_notices *n = ddph__notices_new(4);
    ck_assert_ptr_nonnull(n);
    char text[512] = "";
    ddph__notices_record(n, 1, DDPH__DEPART_DATA_END, 5, 0, "");
    ddph__notices_record(n, 2, DDPH__DEPART_TRAINER_CALL, 3, 1,
                         "ddph_barrier");
    /* This rank made the barrier too, and waits on its step 6. */
    ck_assert_int_eq(ddph__notices_breaking(n, 5, 1, text, sizeof text), 1);
    ck_assert_ptr_nonnull(strstr(text, "rank 1 ended its data "
                                       "(DDPH_STEP_LAST) after 5 "
                                       "synchronised steps"));
    /* Its step 5: rank 1 still joins that one. */
    ck_assert_int_eq(ddph__notices_breaking(n, 4, 1, text, sizeof text), -1);
    /* A barrier this rank has not made yet: rank 2 waits in it. */
    ck_assert_int_eq(ddph__notices_breaking(n, 3, 0, text, sizeof text), 2);
    ck_assert_ptr_nonnull(strstr(text, "rank 2 called ddph_barrier"));

    /* Rank 3: a barrier, then steps, then its close after step 7. */
    ddph__notices_record(n, 3, DDPH__DEPART_TRAINER_CALL, 2, 1,
                         "ddph_barrier");
    int64_t after = -1;
    ck_assert_int_eq(ddph__notices_closed(n, 3, &after), 0);
    ddph__notices_record(n, 3, DDPH__DEPART_CLOSED, 7, 1, "ddph_close");
    ck_assert_int_eq(ddph__notices_closed(n, 3, &after), 1);
    ck_assert_int_eq(after, 7);
    /* A close is final: a late notice does not reopen it. */
    ddph__notices_record(n, 3, DDPH__DEPART_TRAINER_CALL, 9, 2, "x");
    ck_assert_int_eq(ddph__notices_closed(n, 3, &after), 1);
    ck_assert_int_eq(after, 7);
    ddph__notices_free(n);
}
END_TEST

/* A close breaks a wait past the closer's last step whatever the trainer
 * calls; notices of ranks outside the job or of unknown kinds are
 * dropped. */
START_TEST(closes_and_foreign_notices)
{
    ddph_peer_notices *n = ddph__notices_new(3);
    ck_assert_ptr_nonnull(n);
    char text[512] = "";
    ddph__notices_record(n, 3, DDPH__DEPART_CLOSED, 0, 0, "");
    ddph__notices_record(n, -1, DDPH__DEPART_CLOSED, 0, 0, "");
    ddph__notices_record(n, 1, 0, 0, 0, "");
    ddph__notices_record(n, 1, 99, 0, 0, "");
    ck_assert_int_eq(ddph__notices_breaking(n, 100, 0, text, sizeof text),
                     -1);
    ck_assert_int_eq(ddph__notices_closed(n, 3, NULL), 0);
    ddph__notices_record(n, 2, DDPH__DEPART_CLOSED, 4, 0, "ddph_close");
    ck_assert_int_eq(ddph__notices_breaking(n, 3, 9, text, sizeof text), -1);
    ck_assert_int_eq(ddph__notices_breaking(n, 4, 9, text, sizeof text), 2);
    ck_assert_str_eq(text, "rank 2 closed the job (ddph_close) after 4 "
                           "synchronised steps, while this rank waits on a "
                           "collective after its own 4");
    ck_assert_ptr_null(ddph__notices_new(0));
    ddph__notices_free(n);
    ddph__notices_free(NULL);
}
END_TEST

Suite *backends_suite(void)
{
    Suite *s = suite_create("backends");
    TCase *tc = tcase_create("Core");
    tcase_add_test(tc, names_and_kinds);
    tcase_add_test(tc, builtin_table_is_whole);
    tcase_add_test(tc, launcher_chooses);
    tcase_add_test(tc, missing_module_names_file);
    tcase_add_test(tc, every_peer_departure_is_kept);
    tcase_add_test(tc, closes_and_foreign_notices);
    suite_add_tcase(s, tc);
    return s;
}
