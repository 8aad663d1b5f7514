/* test_runtime: multi-rank behaviour of the runtime through the public API.
 *
 *   test_runtime SCENARIO      run one (under mpiexec)
 *   test_runtime --list        NAME RANKS FAILS LIMIT, one a line: the
 *                              registry tests/run_mpi.sh iterates
 *   test_runtime --help        the scenarios and what each checks
 *
 * RANKS: the rank counts run_mpi.sh runs it on, comma-separated ("-":
 * another script runs it); FAILS: 1 when the job fails on purpose (the
 * scenario passes on its "ok NAME" line whatever the exit status: ranks
 * end with _exit, and MPICH may end a rank still inside MPI); LIMIT:
 * seconds.  Prints "ok SCENARIO" on rank 0 and exits 0 on success. */
#include "build-config.h"

#include "scenario.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int check_rank = -1;

typedef struct scenario {
    const char *name;
    void (*run)(void);
    const char *ranks; /* "2,4"; "" when another script runs it */
    int fails;         /* the job fails on purpose */
    int limit_s;
    const char *what;
} scenario;

static const scenario registry[] = {
    {"average", run_average_copies, "2,4", 0, 120,
     "every rank's gradients become the exact average, several buckets, "
     "several steps, hook called once per bucket per step"},
    {"view", run_view, "2,4", 0, 120,
     "the same with gradient_as_bucket_view (no copies)"},
    {"bucket-callback", run_bucket_callback, "2,4", 0, 120,
     "ddph_model_set_bucket_callback: once per bucket per synchronising "
     "step, on a communication thread, the averages already in the "
     "trainer's memory, step_wait after every callback returned (copies "
     "and one lane, views and three); none on an accumulating step, nor "
     "once cleared; refused inside a step"},
    {"bucket-callback-error", run_bucket_callback_error, "2,4", 1, 120,
     "a hook failing on bucket 1: the bucket callback gets the failure "
     "with hook, bucket and rank, the later buckets a failure too"},
    {"lanes", run_lanes, "2,4", 0, 120,
     "buckets spread over several communication lanes: the same averages"},
    {"overlap", run_overlap, "2,4", 0, 120,
     "bucket 0's hook starts before the last gradient is ready"},
    {"mismatch", run_mismatch, "2,4", 0, 120,
     "one rank registers a different shape: every rank gets DDPH_ERR_MISMATCH "
     "naming the difference"},
    {"hook-error", run_hook_error, "2,4", 1, 120,
     "a hook failing on bucket 1 surfaces from step_wait on every rank with "
     "hook name, bucket, rank and the plugin's message; ddph_close says so at "
     "once"},
    {"leaked-request", run_leaked_request, "2,4", 1, 120,
     "a hook that leaves a nonblocking request unwaited is reported"},
    {"timeout", run_timeout_plain, "2,4", 1, 120,
     "the last rank is stuck past timeout_s: the others report one timeout "
     "naming bucket, hook and rank; the stuck rank hears of it when it wakes "
     "up"},
    {"timeout-polled", run_timeout_polled, "2,4", 1, 120,
     "the same with a hook that polls its nonblocking allreduce with test()"},
    {"timeout-shared", run_timeout_shared, "2,4", 1, 120,
     "timeout, with bucket 0 summed in shared memory"},
    {"shared-buckets", run_shared_buckets_here, "2,3,4", 0, 120,
     "on one host the buckets live in one shared-memory segment and allreduce "
     "sums there: exact averages of uneven buckets, with copies and as a view, "
     "with and without [runtime] shared_buckets"},
    {"private-buckets", run_private_buckets, "", 0, 120,
     "the same where no segment can be had (tests/cluster/check.sh on 2 hosts; "
     "by hand with a 40 MB /dev/shm)"},
    {"shifted-buffers", run_shifted_buffers, "2,3,4", 0, 120,
     "a hook that sums part of its bucket at the same place on every rank, "
     "then at a rank-dependent place: MPI's results both times"},
    {"misuse", run_misuse, "2,4", 1, 120,
     "grad_ready twice, outside a step, parameters never ready"},
    {"view-unfetched", run_view_unfetched, "2,4", 1, 120,
     "gradient_as_bucket_view with gradient memory of the trainer's own: a "
     "parameter whose new address (ddph_model_grad_ptr) was never asked for "
     "is refused at grad_ready, naming it (the trainer would step on its "
     "own, unsynchronised gradient)"},
    {"overlapping-grads", run_overlapping_grads, "2,4", 0, 120,
     "two parameters registered with overlapping gradient memory are refused "
     "at finalize, naming both (those bytes would be reduced twice, the rest "
     "of the trainer's gradient never)"},
    {"view-join-idle", run_view_join_idle, "2,4", 0, 120,
     "gradient_as_bucket_view under join: a rank with no data that never "
     "asked ddph_model_grad_ptr joins at once (its shadow steps' zeros are "
     "the runtime's own, not refused); exact averages before and after"},
    {"view-grad-ptr-misuse", run_view_grad_ptr_misuse, "2", 1, 120,
     "ddph_model_grad_ptr before finalize and past the last parameter: "
     "refused with a message naming the model and what to do"},
    {"param-data-late", run_param_data_late, "2,4", 1, 120,
     "ddph_model_set_param_data after finalize (which broadcast rank 0's "
     "values of the memory given by then): refused, naming model and "
     "parameter"},
    {"param-data-on-grad", run_param_data_on_grad, "2,4", 0, 120,
     "weights given over gradient memory are refused at finalize, naming "
     "both parameters (the gradient would be broadcast and compared in the "
     "weights' stead); tied weights shared by two parameters are taken"},
    {"models-shared-grads", run_models_shared_grads, "2,4", 1, 120,
     "two models over one gradient tensor: exact averages stepped in "
     "turns; given to one step, refused on every rank, naming both (the "
     "tensor would be reduced twice, one result over the other)"},
    {"view-shared-grads", run_view_shared_grads, "2,4", 0, 120,
     "gradient_as_bucket_view: a second model registered over a finalized "
     "model's gradient memory is refused at finalize, naming both (the "
     "tensor would get a gradient in each model's buckets, one stale)"},
    {"fp16-overflow", run_fp16_overflow, "2,4", 0, 120,
     "gradients of 1e5 through fp16 become Inf (cast before dividing, as "
     "PyTorch), through bf16 they stay finite"},
    {"half-buckets", run_half_buckets, "2,3,4", 0, 120,
     "fp16 and bf16 host buckets kept in their half type, divided as copied "
     "in: the same bits as with gradient_as_bucket_view"},
    {"half-ring", run_half_ring, "2,3,4", 0, 120,
     "half-precision sums of 32 KiB and more go round a ring of point-to-point "
     "messages: exact averages (on one host also with shared_buckets = false, "
     "where the large bucket takes the ring too)"},
    {"sums", run_sums, "", 0, 120,
     "half-ring and the allreduce hook on f32 gradients "
     "(tests/cluster/check.sh: 2 hosts x 2 ranks, and 3 x 1, where the "
     "f32 sums go round the ring too)"},
    {"powersgd", run_powersgd, "2,4", 0, 120,
     "exact reconstruction of rank-1 gradients, error feedback, bytes on the "
     "wire, statistics, PyTorch's invalid-option rule"},
    {"state-memory", run_state_memory, "2,3", 0, 120,
     "PowerSGD's state saved to memory and loaded back: the next steps "
     "repeat bit for bit; another rank's bytes and damaged bytes refused on "
     "every rank, in words of bytes in memory; NULL bytes or a NULL path on "
     "one rank refused on every rank within 5 s; ddph_state_save_id"},
    {"check-peers", run_check_peers, "2,3", 0, 120,
     "the last rank closes the job: every other rank's ddph_check_peers "
     "names it within 5 s, no collective, while a check of the ranks still "
     "in it stays OK; at 3 ranks a second close: both named; ranks outside "
     "the job refused; and their jobs end cleanly"},
    {"powersgd-blocks", run_powersgd_blocks, "2,4", 0, 120,
     "per-tensor and batched PowerSGD on matrices of several 256 KiB row "
     "blocks: each step's projection"},
    {"sparse", run_sparse, "2,4", 0, 120,
     "top-k and int8 (ABI minor 2): exact where lossless, error feedback, "
     "bytes counted both ways"},
    {"accumulate", run_accumulate, "2,4", 0, 120,
     "[accumulate] steps = 1, 2, 4, NO_SYNC, FORCE_SYNC, END_OF_DATA, "
     "sync_each_batch"},
    {"two-models", run_two_models, "2,4", 0, 120,
     "two models in one step with different hooks share the decision; "
     "[model.NAME] accumulate_steps"},
    {"trace", run_trace, "2,4", 0, 120,
     "[runtime] trace: rank 0 writes one Chrome trace with every rank's "
     "buckets, hook calls and collectives"},
    {"nonfinite", run_nonfinite, "2,4", 0, 120,
     "a NaN propagates by default; with check_finite rank 0's step_wait names "
     "bucket and parameter"},
    {"bucket-caps", run_bucket_caps, "2,4", 0, 120,
     "auto bucket caps (an eighth of the model, at least 256 KiB) and one "
     "model's own from ddph_model_set_bucket_caps: the buckets they make, "
     "exact averages; bad and late calls refused"},
    {"models-crossing", run_models_crossing, "2,4", 0, 120,
     "two models of the same shapes whose backward order depends on the "
     "rank: each is averaged with itself (buckets launch in finalize "
     "order)"},
    {"no-sync-one-rank", run_no_sync_one_rank, "2,4", 1, 120,
     "the last rank flags one step NO_SYNC: that step fails on every rank, "
     "naming the backward passes"},
    {"helper-root", run_helper_root, "2,4", 1, 120,
     "ddph_broadcast with the last rank's own root: fails on every rank, "
     "naming both calls"},
    {"helper-size", run_helper_size, "2,4", 1, 120,
     "ddph_broadcast of 32 bytes against 64: 'the broadcast sizes differ'"},
    {"helper-op", run_helper_op, "2,4", 1, 120,
     "ddph_allreduce_f64 MAX against SUM: fails on every rank"},
    {"helper-count", run_helper_count, "2,4", 1, 120,
     "ddph_average_f64 of 1 value against 2: fails on every rank"},
    {"helper-kind", run_helper_kind, "2,4", 1, 120,
     "ddph_barrier against ddph_average_f64: fails on every rank"},
    {"helper-extra", run_helper_extra, "2,4", 1, 120,
     "one extra ddph_average_f64 on the last rank before the loss average: "
     "no rank's step returns DDPH_OK"},
    {"join-stale", run_join_stale, "2,4", 0, 120,
     "after ddph_join the joined rank's gradients are zero; the next epoch "
     "averages exactly"},
    {"join-open-window", run_join_open_window, "2,4", 1, 120,
     "ddph_join with an accumulation window open: refused on every rank, "
     "saying to flag DDPH_STEP_END_OF_DATA"},
    {"join-no-sync-one-rank", run_join_no_sync_one_rank, "2,4", 1, 120,
     "under join the last rank flags one step NO_SYNC: that step fails on "
     "every rank, naming it and the backward passes"},
    {"join-no-sync-beside-joined", run_join_no_sync_beside_joined, "3,4", 1,
     120, "the same while rank 0 has joined: its shadow step fails too"},
    {"join-no-sync-data-end", run_join_no_sync_data_end, "2,4", 1, 120,
     "the same where the last rank's data ends at that step: a window "
     "longer than the others' fails on every rank"},
    {"join-accumulate", run_join_accumulate, "2,4", 0, 120,
     "uneven inputs under join, accumulating through NO_SYNC on every rank "
     "alike: exact averages, the last windows cut short"},
    {"close-outcome", run_close_outcome, "2,4", 0, 120,
     "ddph_close returns the job's outcome on every rank: after a finalize "
     "disagreement, and after an error on the last rank only"},
    {"local-sgd", run_local_sgd, "", 0, 120,
     "the post_localsgd example hook ($DDPH_TEST_LOCALSGD) on 4 ranks "
     "(tests/sdk.sh)"},
    {"local-sgd-intra-node", run_local_sgd_intra_node, "", 0, 120,
     "the same with the default subgroups, 2 hosts x 2 ranks "
     "(tests/cluster/check.sh)"},
};
#define NSCENARIOS (sizeof registry / sizeof registry[0])

static void finalize_stuck(int sig)
{
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < NSCENARIOS; i++)
            printf("%s %s %d %d\n", registry[i].name,
                   *registry[i].ranks ? registry[i].ranks : "-",
                   registry[i].fails, registry[i].limit_s);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--help") == 0) {
        puts("usage: test_runtime SCENARIO | --list | --help\n");
        for (size_t i = 0; i < NSCENARIOS; i++)
            printf("%-22s %s\n", registry[i].name, registry[i].what);
        return 0;
    }
    const scenario *sc = NULL;
    for (size_t i = 0; argc == 2 && i < NSCENARIOS; i++)
        if (strcmp(argv[1], registry[i].name) == 0)
            sc = &registry[i];
    if (!sc) {
        fprintf(stderr, "usage: test_runtime SCENARIO | --list | --help%s%s\n",
                argc == 2 ? ": unknown scenario " : "",
                argc == 2 ? argv[1] : "");
        return 2;
    }
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &check_rank);
    sc->run();
    char path[4096];
    job_path(path, sizeof path, check_rank);
    unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
    if (check_rank == 0)
        printf("ok %s\n", sc->name);
    fflush(stdout);
    /* Every rank has passed its checks: MPICH 4.0's finalize may deadlock
     * between simulated hosts (docs/usage.md), which is not what this
     * program tests. */
    signal(SIGALRM, finalize_stuck);
    alarm(20);
    MPI_Finalize();
    return 0;
}
