/* scenarios_models.c: the scenarios of test_runtime's registry on local SGD, accumulation, two models, the trace and NaN checks. */
#include "build-config.h"

#include "scenario.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bf16_host.h"

/* Whether p (n floats) is bitwise the same on the ranks of `ranks`. */
static int same_on(const float *p, size_t n, int world, const int *ranks,
                   int nranks)
{
    float *all = malloc((size_t)world * n * sizeof *all);
    MPI_Allgather(p, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
    int same = 1;
    for (int i = 1; i < nranks; i++)
        same &= memcmp(all + (size_t)ranks[0] * n, all + (size_t)ranks[i] * n,
                       n * sizeof *all) == 0;
    free(all);
    return same;
}

/* One local-SGD run: `steps` steps of SGD on a 2-parameter model; expect(t)
 * says at step t whether parameters must agree on all ranks (2), only
 * within subgroups of 2 (1), or nowhere (0). */
static void local_sgd_run(const char *options, int steps, int (*expect)(int))
{
    char extra[512];
    snprintf(extra, sizeof extra, "[hook.post_localsgd]\n%s\n[runtime]",
             options);
    ddph_ctx *ctx = open_job("/nowhere", env("DDPH_TEST_LOCALSGD"), extra);
    int world = ddph_world_size(ctx);
    CHECK(world == 4, "local-sgd runs on 4 ranks, not %d", world);
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "net", &m), ctx);
    enum { N0 = 300, N1 = 20 };
    static float p0[N0], p1[N1], g0[N0], g1[N1];
    int64_t s0[1] = {N0}, s1[1] = {N1};
    for (int k = 0; k < N0; k++)
        p0[k] = 1.0f;
    for (int k = 0; k < N1; k++)
        p1[k] = -1.0f;
    CHECK_OK(ddph_model_add_param(m, "w", g0, s0, 1, DDPH_F32, DDPH_CPU, NULL),
             ctx);
    CHECK_OK(ddph_model_add_param(m, "b", g1, s1, 1, DDPH_F32, DDPH_CPU, NULL),
             ctx);
    CHECK_OK(ddph_model_set_param_data(m, 0, p0), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 1, p1), ctx);
    CHECK_OK(ddph_model_finalize(m), ctx);
    int all[4] = {0, 1, 2, 3}, pair[2] = {check_rank & ~1, check_rank | 1};
    int other[2] = {0, 2};
    for (int t = 0; t < steps; t++) {
        CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
        for (int k = 0; k < N1; k++)
            g1[k] = (float)((check_rank + 1) * (k % 3 + 1) * (t + 1));
        CHECK_OK(ddph_grad_ready(m, 1), ctx);
        for (int k = 0; k < N0; k++)
            g0[k] = (float)((check_rank * 7 + k) % 11) * 0.5f - (float)t;
        CHECK_OK(ddph_grad_ready(m, 0), ctx);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        for (int k = 0; k < N0; k++) /* the optimizer: plain SGD */
            p0[k] -= 0.125f * g0[k];
        for (int k = 0; k < N1; k++)
            p1[k] -= 0.125f * g1[k];
        CHECK_OK(ddph_step_end(ctx), ctx);
        int want = expect(t);
        int on_all = same_on(p0, N0, world, all, 4) &&
                     same_on(p1, N1, world, all, 4);
        int in_pair = same_on(p0, N0, world, pair, 2);
        int pairs_differ = !same_on(p0, N0, world, other, 2);
        CHECK(want != 2 || on_all, "step %d: parameters differ across ranks "
                                   "on an averaging step", t);
        CHECK(want != 1 || (in_pair && pairs_differ),
              "step %d: want identical within subgroups (%d) and different "
              "across them (%d)",
              t, in_pair, pairs_differ);
        CHECK(want != 0 || !in_pair, "step %d: subgroup agrees without "
                                     "averaging", t);
    }
    ddph_close(ctx);
}

/* start 3, subgroups of 2, period 4 after 3 warm-up steps: global before
 * step 3, averaged at steps 3, 7, 11, subgroup-local otherwise. */
static int periodic_schedule(int t)
{
    return t < 3 || (t - 3) % 4 == 0 ? 2 : 1;
}

/* No gradient communication at all; hierarchical 2:2,4:4: every 4 steps
 * over all ranks, every other step within pairs, else nowhere. */
static int hierarchical_schedule(int t)
{
    return t % 4 == 0 ? 2 : t % 2 == 0 ? 1 : 0;
}

/* Parameters of mixed dtypes averaged at every step (period 1): the
 * concatenation is promoted as torch.cat does (here to f64), averaged and
 * rounded back to each parameter's dtype.  Rank r's f32 and bf16 values
 * are r +- k/4, whose averages are exact in every dtype; the f64 ones,
 * 1 + k + r * 1e-9, average to 1 + k + 1.5e-9, which f32 cannot hold. */
static void local_sgd_dtypes(void)
{
    ddph_ctx *ctx = open_job("/nowhere", env("DDPH_TEST_LOCALSGD"),
                             "[hook.post_localsgd]\nstart_localSGD_iter = 0\n"
                             "post_local_gradient_allreduce = false\n"
                             "period = 1\n[runtime]");
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, "mixed", &m), ctx);
    enum { N = 40 };
    static float w[N], gw[N];
    static uint16_t h[N], gh[N];
    static double d[N], gd[N];
    int64_t shape[1] = {N};
    CHECK_OK(ddph_model_add_param(m, "w", gw, shape, 1, DDPH_F32, DDPH_CPU,
                                  NULL), ctx);
    CHECK_OK(ddph_model_add_param(m, "h", gh, shape, 1, DDPH_BF16, DDPH_CPU,
                                  NULL), ctx);
    CHECK_OK(ddph_model_add_param(m, "d", gd, shape, 1, DDPH_F64, DDPH_CPU,
                                  NULL), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 0, w), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 1, h), ctx);
    CHECK_OK(ddph_model_set_param_data(m, 2, d), ctx);
    CHECK_OK(ddph_model_finalize(m), ctx);
    for (int k = 0; k < N; k++) {
        w[k] = (float)check_rank + 0.25f * (float)k;
        h[k] = bf16_from_float((float)check_rank - 0.25f * (float)k);
        d[k] = 1.0 + k + check_rank * 1e-9;
    }
    CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
    for (int i = 2; i >= 0; i--)
        CHECK_OK(ddph_grad_ready(m, i), ctx);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    for (int k = 0; k < N; k++) {
        CHECK(w[k] == 1.5f + 0.25f * (float)k, "w[%d] = %g", k, w[k]);
        CHECK(bf16_to_float(h[k]) == 1.5f - 0.25f * (float)k, "h[%d] = %g", k,
              bf16_to_float(h[k]));
        CHECK(fabs(d[k] - (1.0 + k + 1.5e-9)) < 1e-12, "d[%d] = %.12g", k,
              d[k]);
    }
    ddph_close(ctx);
}

/* On tests/cluster/cluster.sh's 2 hosts x 2 ranks: the default
 * subgroups are the hosts (group_intra_node), so ranks 0-1 and 2-3 agree
 * between global averages and the two hosts do not. */
void run_local_sgd_intra_node(void)
{
    local_sgd_run("start_localSGD_iter = 3\nperiod = 4\nwarmup_steps = 3", 12,
                  periodic_schedule);
    local_sgd_run("start_localSGD_iter = 0\npost_local_gradient_allreduce = "
                  "false\nperiod_group_size = 2:2,4:4",
                  9, hierarchical_schedule);
}

void run_local_sgd(void)
{
    local_sgd_run("start_localSGD_iter = 3\nsubgroup_size = 2\nperiod = 4\n"
                  "warmup_steps = 3",
                  12, periodic_schedule);
    local_sgd_run("start_localSGD_iter = 0\npost_local_gradient_allreduce = "
                  "false\nsubgroup_size = 2\nperiod_group_size = 2:2,4:4",
                  9, hierarchical_schedule);
    local_sgd_dtypes();
}


/* Runs `micro` backward passes of the fixture's model with the given flags
 * per pass, accumulating like .grad; checks every synchronised result. */
static void accumulate_run(const char *extra, int micro, const unsigned *flags,
                           const int *want_sync)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    int nb = ddph_model_bucket_count(fx.m), synced = 0, window_start = 0;
    for (int s = 0; s < micro; s++) {
        CHECK_OK(ddph_step_begin_flags(ctx, &fx.m, 1, flags ? flags[s] : 0),
                 ctx);
        CHECK(ddph_step_syncs(ctx) == want_sync[s], "%s: step %d syncs %d, "
                                                    "want %d",
              extra, s, ddph_step_syncs(ctx), want_sync[s]);
        for (int i = NP - 1; i >= 0; i--) {
            for (size_t k = 0; k < fx.numel[i]; k++)
                fx.grads[i][k] += value(check_rank, s, i, k);
            CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        if (want_sync[s]) {
            synced++;
            for (int i = 0; i < NP; i++)
                for (size_t k = 0; k < fx.numel[i]; k++) {
                    float want = 0;
                    for (int r = 0; r < world; r++) {
                        float sum = 0;
                        for (int t = window_start; t <= s; t++)
                            sum += value(r, t, i, k);
                        want += sum / (float)world;
                    }
                    CHECK(fx.grads[i][k] == want,
                          "%s: step %d p%d[%zu] = %g, want %g", extra, s, i,
                          k, fx.grads[i][k], want);
                    fx.grads[i][k] = 0; /* optimizer.zero_grad() */
                }
            window_start = s + 1;
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
        for (int b = 0; b < nb; b++) {
            ddph_bucket_info info;
            CHECK_OK(ddph_model_bucket_info(fx.m, b, &info), ctx);
            CHECK(info.hook_calls == (uint64_t)synced, "%s: bucket %d: %llu "
                                                       "hook calls after %d "
                                                       "synced steps",
                  extra, b, (unsigned long long)info.hook_calls, synced);
            CHECK(info.bytes_on_wire == (uint64_t)synced * info.bytes,
                  "%s: bytes sent on steps that did not sync", extra);
        }
    }
    ddph_close(ctx);
    fixture_free(&fx);
}

void run_accumulate(void)
{
    static const int every[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    static const int two[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    static const int four[8] = {0, 0, 0, 1, 0, 0, 0, 1};
    accumulate_run("[accumulate]\nsteps = 1\n[runtime]", 8, NULL, every);
    accumulate_run("[accumulate]\nsteps = 2\n[runtime]", 8, NULL, two);
    accumulate_run("[accumulate]\nsteps = 4\n[runtime]", 8, NULL, four);
    accumulate_run("[accumulate]\nsteps = 4\nsync_each_batch = true\n"
                   "[runtime]",
                   8, NULL, every);
    /* Flags: no_sync holds off the 4th step; a forced sync in the middle
     * (trigger_sync_in_backward); the end of data syncs a partial window. */
    static const unsigned flags[7] = {0, 0, 0, DDPH_STEP_NO_SYNC, 0,
                                      DDPH_STEP_FORCE_SYNC, DDPH_STEP_END_OF_DATA};
    static const int flagged[7] = {0, 0, 0, 0, 1, 1, 1};
    accumulate_run("[accumulate]\nsteps = 4\n[runtime]", 7, flags, flagged);
}

/* gen: PowerSGD (start 2) with accumulate_steps = 2 of its own; disc:
 * fp16 with the job's steps = 4.  Together in one step they share one
 * decision; alone, each follows its own window. */
void run_two_models(void)
{
    ddph_ctx *ctx = open_job(
        env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
        "[accumulate]\nsteps = 4\n[model.gen]\nhook = powersgd\n"
        "accumulate_steps = 2\n[model.disc]\nhook = fp16\n"
        "[hook.powersgd]\nstart_powerSGD_iter = 2\n[runtime]");
    model_fixture gen, disc;
    fx_named(ctx, &gen, "gen");
    fx_named(ctx, &disc, "disc");
    /* What the job chose, before finalize: a trainer scales its loss. */
    CHECK(ddph_model_accumulate_steps(gen.m) == 2 &&
              ddph_model_accumulate_steps(disc.m) == 4 &&
              ddph_model_accumulate_steps(NULL) == -1,
          "accumulate_steps %d %d", ddph_model_accumulate_steps(gen.m),
          ddph_model_accumulate_steps(disc.m));
    CHECK(strcmp(ddph_model_hook_name(gen.m), "powersgd") == 0, "gen's hook");
    CHECK_OK(ddph_model_finalize(gen.m), ctx);
    CHECK_OK(ddph_model_finalize(disc.m), ctx);
    CHECK(strcmp(ddph_model_hook_name(disc.m), "fp16") == 0, "disc's hook");
    /* ddph_describe: the resolved job, then each model's hook. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK_OK(ddph_describe(ctx, mem), ctx);
    fclose(mem);
    static const char *const needles[] = {
        "[accumulate]\nsteps = 4 ", "\n[model.gen]\nhook = powersgd\n",
        "; model 'gen': 6 parameters, accumulate_steps 2, 3 buckets",
        "hook powersgd 1.0.0 wrapper none\n",
        "hook option start_powerSGD_iter = 2",
        "; model 'disc': 6 parameters, accumulate_steps 4, 3 buckets",
        "hook fp16 1.0.0 wrapper none\n",
        ";   bucket 0: ", " elements of f32, ", ";   bucket 2: "};
    for (size_t i = 0; i < sizeof needles / sizeof *needles; i++)
        CHECK(strstr(text, needles[i]), "describe lacks '%s' in:\n%s",
              needles[i], text);
    free(text);
    ddph_model *both[2] = {gen.m, disc.m};
    /* Together: gen's window of 2 decides for both. */
    for (int s = 0; s < 4; s++) {
        CHECK_OK(ddph_step_begin(ctx, both, 2), ctx);
        CHECK(ddph_step_syncs(ctx) == (s % 2 == 1), "together, step %d", s);
        for (int i = NP - 1; i >= 0; i--) {
            CHECK_OK(ddph_grad_ready(disc.m, i), ctx);
            CHECK_OK(ddph_grad_ready(gen.m, i), ctx);
        }
        CHECK_OK(ddph_step_wait(ctx), ctx);
        if (s == 1) { /* a second wait is refused, saying why */
            CHECK(ddph_step_wait(ctx) == DDPH_ERR_STATE, "second wait");
            CHECK(strstr(ddph_last_error(ctx), "step_wait called twice in "
                                               "one step"),
                  "%s", ddph_last_error(ctx));
        }
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    /* Alone: disc waits for its own 4. */
    for (int s = 0; s < 4; s++) {
        CHECK_OK(ddph_step_begin(ctx, &disc.m, 1), ctx);
        CHECK(ddph_step_syncs(ctx) == (s == 3), "disc alone, step %d", s);
        for (int i = NP - 1; i >= 0; i--)
            CHECK_OK(ddph_grad_ready(disc.m, i), ctx);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    /* A model of the job not given to step_begin is not in the step. */
    CHECK_OK(ddph_step_begin(ctx, &disc.m, 1), ctx);
    CHECK(ddph_grad_ready(gen.m, 0) == DDPH_ERR_STATE, "gen outside its step");
    CHECK(strstr(ddph_last_error(ctx), "grad_ready on model 'gen' outside its "
                                       "step"),
          "%s", ddph_last_error(ctx));
    for (int i = NP - 1; i >= 0; i--)
        CHECK_OK(ddph_grad_ready(disc.m, i), ctx);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* gen's hook counted its 2 synchronised steps only. */
    ddph_stat st[4];
    size_t n;
    CHECK_OK(ddph_model_hook_stats(gen.m, st, 4, &n), ctx);
    CHECK(n == 4 && st[3].value == 2.0, "gen's PowerSGD iteration %g, want 2",
          st[3].value);
    ddph_bucket_info info;
    CHECK_OK(ddph_model_bucket_info(disc.m, 0, &info), ctx);
    CHECK(info.hook_calls == 3, "disc: %llu hook calls, want 2 together + 1 "
                                "alone",
          (unsigned long long)info.hook_calls);
    ddph_close(ctx);
    fixture_free(&gen);
    fixture_free(&disc);
}


void run_trace(void)
{
    char name[64], path[4096], extra[128];
    snprintf(name, sizeof name, "ddph-trace-%d.json", (int)getppid());
    snprintf(path, sizeof path, "%s/%s", scratch_dir(), name);
    /* Two lanes: bucket 1 runs on lane 1, its own track.  The trace's
     * path is relative: beside the job file, in scratch_dir(). */
    snprintf(extra, sizeof extra, "trace = %s\nlanes = 2", name);
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", extra);
    int world = ddph_world_size(ctx);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    for (int s = 0; s < 2; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
        mark_all_ready(ctx, fx.m);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
    }
    ddph_close(ctx);
    if (check_rank == 0) {
        FILE *f = fopen(path, "r");
        CHECK(f != NULL, "%s was not written", path);
        static char text[1 << 20];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        char want[128];
        snprintf(want, sizeof want, "\"name\":\"rank %d\"", world - 1);
        const char *needles[] = {"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[",
                                 "\"name\":\"hook allreduce: net bucket 0\"",
                                 "\"name\":\"net bucket 2 ready\"",
                                 "\"name\":\"allreduce ", "step_wait",
                                 "\"name\":\"communication\"",
                                 "\"name\":\"communication lane 1\"",
                                 "\"tid\":2,", want, "\n]}\n"};
        for (size_t i = 0; i < sizeof needles / sizeof *needles; i++)
            CHECK(strstr(text, needles[i]), "trace lacks %s", needles[i]);
        unlink(path);
    }
    fixture_free(&fx);
}


static void nonfinite_run(int check)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce", check ? "check_finite = true" : NULL);
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    for (int i = NP - 1; i >= 0; i--) {
        for (size_t k = 0; k < fx.numel[i]; k++)
            fx.grads[i][k] = 1.0f;
        if (check_rank == 0 && i == 2)
            fx.grads[i][7] = 0.0f / 0.0f;
        CHECK_OK(ddph_grad_ready(fx.m, i), ctx);
    }
    ddph_status st = ddph_step_wait(ctx);
    if (check) {
        /* Every rank hears of rank 0's NaN, with its message. */
        CHECK(st == DDPH_ERR_NONFINITE, "%s", ddph_status_name(st));
        CHECK(strstr(ddph_last_error(ctx), "model 'net' bucket 1 (rank 0): "
                                           "gradient of 'p2' is not finite at "
                                           "element 7"),
              "%s", ddph_last_error(ctx));
        CHECK(check_rank == 0 ||
                  strncmp(ddph_last_error(ctx), "rank 0 failed: ", 15) == 0,
              "%s", ddph_last_error(ctx));
    } else {
        CHECK(st == DDPH_OK, "%s", ddph_last_error(ctx));
        /* Propagated faithfully: NaN exactly where it was, on every rank. */
        CHECK(isnan(fx.grads[2][7]) && fx.grads[2][6] == 1.0f,
              "p2[7] = %g, p2[6] = %g", fx.grads[2][7], fx.grads[2][6]);
    }
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* A NaN does not break the job: it closes cleanly. */
    CHECK_OK(ddph_close(ctx), NULL);
    fixture_free(&fx);
}

void run_nonfinite(void)
{
    nonfinite_run(0);
    nonfinite_run(1);
}

/* Four parameters of 400 KB: the default (auto) caps are 256 KiB, so each
 * is a bucket of its own; ddph_model_set_bucket_caps(1, 25), PyTorch's,
 * puts three in bucket 0 (it closes past 1 MiB) and the fourth in bucket
 * 1; a bad cap and a late call are refused.  Averages stay exact. */
static int caps_model(ddph_ctx *ctx, const char *name, double first,
                      double cap, float *grads)
{
    enum { N = 100000 };
    ddph_model *m;
    CHECK_OK(ddph_model_create(ctx, name, &m), ctx);
    int64_t shape[1] = {N};
    for (int i = 0; i < 4; i++)
        CHECK_OK(ddph_model_add_param(m, "w", grads + (size_t)i * N, shape, 1,
                                      DDPH_F32, DDPH_CPU, NULL), ctx);
    CHECK(ddph_model_set_bucket_caps(m, -1, 0) == DDPH_ERR_INVALID &&
              strstr(ddph_last_error(ctx), "bucket cap -1 MiB"),
          "%s", ddph_last_error(ctx));
    CHECK(ddph_model_set_bucket_caps(m, 0, 0.0 / 0.0) == DDPH_ERR_INVALID,
          "a NaN cap was taken");
    CHECK_OK(ddph_model_set_bucket_caps(m, first, cap), ctx);
    CHECK_OK(ddph_model_finalize(m), ctx);
    CHECK(ddph_model_set_bucket_caps(m, 1, 1) == DDPH_ERR_STATE,
          "set_bucket_caps after finalize was taken");
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    CHECK_OK(ddph_step_begin(ctx, &m, 1), ctx);
    for (int i = 3; i >= 0; i--) {
        for (size_t k = 0; k < N; k++)
            grads[(size_t)i * N + k] = (float)(rank + i);
        CHECK_OK(ddph_grad_ready(m, i), ctx);
    }
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    for (int i = 0; i < 4; i++) {
        float want = (float)(world - 1) / 2 + (float)i;
        CHECK(grads[(size_t)i * N + N - 1] == want, "%s: w%d = %g, not %g",
              name, i, grads[(size_t)i * N + N - 1], want);
    }
    return ddph_model_bucket_count(m);
}

void run_bucket_caps(void)
{
    /* The job file's caps are the defaults (auto), not open_job's tiny
     * test caps, or the "auto" model would measure those. */
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "allreduce",
                             "bucket_cap_mb = auto\n"
                             "first_bucket_cap_mb = auto\n");
    float *grads = malloc(4 * 100000 * sizeof *grads);
    CHECK(grads, "out of memory");
    int automatic = caps_model(ctx, "auto", 0, 0, grads);
    CHECK(automatic == 4, "auto caps: %d buckets, not 4", automatic);
    int pytorch = caps_model(ctx, "pytorch", 1, 25, grads);
    CHECK(pytorch == 2, "caps 1 and 25 MiB: %d buckets, not 2", pytorch);
    /* The late calls were misuse (DDPH_ERR_STATE): the job's outcome. */
    ddph_status st = ddph_close(ctx);
    CHECK(st == DDPH_ERR_STATE, "ddph_close: %s", ddph_status_name(st));
    free(grads);
}
