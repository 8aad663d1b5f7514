/* scenario.h: what the multi-rank scenarios of test_runtime share.  The
 * scenarios are listed once, in test_runtime.c's registry (name, the rank
 * counts tests/run_mpi.sh runs them on, whether the job fails on purpose,
 * time limit); each area's scenarios are in scenarios_AREA.c. */
#ifndef DDPH_TESTS_MPI_SCENARIO_H
#define DDPH_TESTS_MPI_SCENARIO_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include <ddphook/ddphook.h>

#define RANK_CHECK_SHARED
#include "rank_check.h"

#define CHECK_OK(call, ctx)                                                  \
    CHECK((call) == DDPH_OK, "%s", ddph_last_error(ctx))

/* The six-parameter fixture (two linear layers and a head). */
#define NP 6
extern const int64_t shapes[NP][2];

typedef struct model_fixture {
    ddph_model *m;
    float *grads[NP];
    size_t numel[NP];
} model_fixture;

/* scenario_util.c */
const char *job(const char *hook_dir, const char *hook, const char *extra);
ddph_ctx *open_path(const char *path);
ddph_ctx *open_job(const char *hook_dir, const char *hook, const char *extra);
const char *env(const char *name);
/* Ends a scenario whose job failed on purpose (MPI left unfinalized):
 * rank 0 prints "ok SCENARIO" once every rank got there. */
void end_failed_job(const char *scenario);
void finalize_refused(ddph_ctx *ctx, ddph_model *m, const char *want);
const char *scratch_dir(void);
void job_path(char *path, size_t cap, int rank);
void mark_all_ready(ddph_ctx *ctx, ddph_model *m);
void fixture_free(model_fixture *fx);
void setup(ddph_ctx *ctx, model_fixture *fx, int shape_bump);
void fx_named(ddph_ctx *ctx, model_fixture *fx, const char *name);
float value(int rank, int step, int p, size_t i);

/* scenarios_reduce.c */
void run_lanes(void);
void run_overlap(void);
void run_mismatch(void);
void run_average_copies(void);
void run_view(void);
void run_bucket_callback(void);

/* scenarios_faults.c */
void run_hook_error(void);
void run_bucket_callback_error(void);
void run_leaked_request(void);
void run_timeout_polled(void);
void run_misuse(void);
void run_overlapping_grads(void);
void run_timeout_plain(void);
void run_timeout_shared(void);

/* scenarios_shared.c */
ddph_model *flat_model(ddph_ctx *ctx, int n, const size_t *numel,
                       ddph_dtype dtype, void **grads, int nbuckets);
void run_shifted_buffers(void);
void run_shared_buckets_here(void);
void run_private_buckets(void);

/* scenarios_half.c */
void run_fp16_overflow(void);
void run_half_buckets(void);
float ring_value(int rank, size_t k);
void run_half_ring(void);
void run_sums(void);

/* scenarios_compress.c */
void run_powersgd(void);
void run_powersgd_blocks(void);
void run_sparse(void);

/* scenarios_models.c */
void run_local_sgd_intra_node(void);
void run_local_sgd(void);
void run_accumulate(void);
void run_two_models(void);
void run_trace(void);
void run_nonfinite(void);
void run_bucket_caps(void);

/* scenarios_state.c */
void run_state_memory(void);
void run_check_peers(void);

/* scenarios_trust.c */
void run_models_crossing(void);
void run_no_sync_one_rank(void);
void run_helper_root(void);
void run_helper_size(void);
void run_helper_op(void);
void run_helper_count(void);
void run_helper_kind(void);
void run_helper_extra(void);
void run_join_stale(void);
void run_join_open_window(void);
void run_join_no_sync_one_rank(void);
void run_join_no_sync_beside_joined(void);
void run_join_no_sync_data_end(void);
void run_join_accumulate(void);
void run_close_outcome(void);

/* scenarios_view.c */
void run_view_unfetched(void);
void run_view_join_idle(void);
void run_view_grad_ptr_misuse(void);

/* scenarios_params.c */
void run_param_data_late(void);
void run_param_data_on_grad(void);
void run_models_shared_grads(void);
void run_view_shared_grads(void);

#endif
