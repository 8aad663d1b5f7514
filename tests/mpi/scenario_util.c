/* scenario_util.c: what the scenarios share: job files, the six-parameter fixture, gradients. */
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

const int64_t shapes[NP][2] = {{40, 30}, {30, 1}, {64, 32},
                               {32, 1},  {10, 64}, {10, 1}};

/* Where scenarios write their job and trace files: the folder the test
 * driver made for the run (tests/out/NAME in the build tree: a job that
 * fails or is killed on purpose leaves nothing behind in /tmp), else
 * TMPDIR or /tmp. */
const char *scratch_dir(void)
{
    const char *d = getenv("DDPH_TEST_TMPDIR");
    if (!d || !*d)
        d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

/* The job file of `rank` (job() writes it, test_runtime's main removes
 * it): one per rank and mpiexec proxy, in scratch_dir(). */
void job_path(char *path, size_t cap, int rank)
{
    int len = snprintf(path, cap, "%s/ddph-test-%d-%d.ini", scratch_dir(),
                       (int)getppid(), rank);
    CHECK(len > 0 && (size_t)len < cap, "DDPH_TEST_TMPDIR too long");
}

/* Writes a job file for this rank; extra is appended verbatim (to the
 * [runtime] section, where it sets bucket caps or timeout_s instead of
 * the defaults here). */
const char *job(const char *hook_dir, const char *hook,
                       const char *extra)
{
    static char path[4096];
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    job_path(path, sizeof path, rank);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    int caps = !(extra && strstr(extra, "bucket_cap_mb"));
    fprintf(f, "[runtime]\nplugin_path = %s\n%s%s\n%s\n[hook]\nname = %s\n",
            hook_dir,
            caps ? "bucket_cap_mb = 0.001\nfirst_bucket_cap_mb = 0.001\n" : "",
            extra && strstr(extra, "timeout_s") ? "" : "timeout_s = 20",
            extra ? extra : "", hook);
    fclose(f);
    return path;
}

ddph_ctx *open_path(const char *path)
{
    ddph_ctx *ctx;
    CHECK(ddph_open(path, NULL, NULL, &ctx) == DDPH_OK, "cannot open %s",
          path);
    return ctx;
}

/* Opens a job made by job(). */
ddph_ctx *open_job(const char *hook_dir, const char *hook,
                          const char *extra)
{
    return open_path(job(hook_dir, hook, extra));
}

const char *env(const char *name)
{
    const char *v = getenv(name);
    CHECK(v && *v, "%s is not set (run through make check)", name);
    return v;
}



static void setup_named(ddph_ctx *ctx, model_fixture *fx, int shape_bump,
                        const char *name)
{
    CHECK_OK(ddph_model_create(ctx, name, &fx->m), ctx);
    for (int i = 0; i < NP; i++) {
        int64_t sh[2] = {shapes[i][0] + (i == 2 ? shape_bump : 0),
                         shapes[i][1]};
        fx->numel[i] = (size_t)(sh[0] * sh[1]);
        fx->grads[i] = calloc(fx->numel[i], sizeof(float));
        char pname[32];
        snprintf(pname, sizeof pname, "p%d", i);
        CHECK_OK(ddph_model_add_param(fx->m, pname, fx->grads[i], sh, 2,
                                      DDPH_F32, DDPH_CPU, NULL),
                 ctx);
    }
}

/* The backward pass of a fixture: every parameter, last first. */
void mark_all_ready(ddph_ctx *ctx, ddph_model *m)
{
    for (int i = NP - 1; i >= 0; i--)
        CHECK_OK(ddph_grad_ready(m, i), ctx);
}

void fixture_free(model_fixture *fx)
{
    for (int i = 0; i < NP; i++)
        free(fx->grads[i]);
}

void setup(ddph_ctx *ctx, model_fixture *fx, int shape_bump)
{
    setup_named(ctx, fx, shape_bump, "net");
}

void fx_named(ddph_ctx *ctx, model_fixture *fx, const char *name)
{
    setup_named(ctx, fx, 0, name);
}

/* Small integers: x / W then a sum of W terms is exact for W = 2, 4. */
float value(int rank, int step, int p, size_t i)
{
    return (float)((rank + 1) * (int)((i + (size_t)p) % 5) - step);
}

/* Finalizing m is refused with DDPH_ERR_INVALID and a message holding
 * `want`; the model never stepped, so the job then closes OK. */
void finalize_refused(ddph_ctx *ctx, ddph_model *m, const char *want)
{
    CHECK(ddph_model_finalize(m) == DDPH_ERR_INVALID,
          "finalize was not refused (wanted: %s)", want);
    CHECK(strstr(ddph_last_error(ctx), want), "%s", ddph_last_error(ctx));
    CHECK_OK(ddph_close(ctx), ctx);
}

/* Ends a scenario whose job failed: ddph_close left MPI unfinalized (as
 * it must), so the process exits without MPI_Finalize once every rank has
 * checked what it had to. */
void end_failed_job(const char *scenario)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (check_rank == 0)
        printf("ok %s\n", scenario);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
}
