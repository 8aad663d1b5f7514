/* ckpt_trainer.c: a trainer that saves its hook state after every step,
 * for tests/checkpoint_crash.sh and tests/checkpoint_kill_loop.sh.
 *
 *   ckpt_trainer JOB.ini STATE NUMEL run STEPS [COMMITTED TOKEN]
 *       STEPS steps from scratch, ddph_state_save(STATE) after each; when
 *       a save returns DDPH_OK, rank 0 replaces the file COMMITTED with
 *       "TOKEN STEP" (synced): that save was committed on every rank.
 *   ckpt_trainer JOB.ini STATE NUMEL refs STEPS
 *       the same steps, each state saved to STATE.step<K> instead.
 *   ckpt_trainer JOB.ini STATE NUMEL verify OUT
 *       ddph_state_load(STATE), then ddph_state_save(OUT): OUT's payload
 *       is what was loaded, to compare with the references.
 *
 * STATE may hold one "%d", replaced by the rank (a folder per rank, as
 * node-local disks give).  With CKPT_PIDS set, each rank writes its pid
 * to CKPT_PIDS.<rank> (for a killer).  The model is 4 parameters of
 * NUMEL/4 floats; the gradients depend on the rank and the step only, so
 * every run is the same run.  A failed call prints "rank R: CALL failed:
 * MESSAGE" and exits 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

enum { NPARAMS = 4 };

static ddph_ctx *g_ctx;
static int g_rank;

static int failed(const char *call)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", g_rank, call,
            ddph_last_error(g_ctx));
    fflush(stderr);
    ddph_close(g_ctx);
    return 1;
}

/* STATE with its "%d" (if any) replaced by the rank, then suffix. */
static void rank_state(char *out, size_t n, const char *state,
                       const char *suffix)
{
    char tmp[1024];
    const char *d = strstr(state, "%d");
    if (d)
        snprintf(tmp, sizeof tmp, "%.*s%d%s", (int)(d - state), state, g_rank,
                 d + 2);
    else
        snprintf(tmp, sizeof tmp, "%s", state);
    snprintf(out, n, "%s%s", tmp, suffix);
}

static void write_committed(const char *file, const char *token, int step)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        exit(2);
    }
    fprintf(f, "%s %d\n", token, step);
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    if (rename(tmp, file) != 0) {
        perror(file);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: ckpt_trainer JOB.ini STATE NUMEL "
                        "run|refs|verify ARG [COMMITTED TOKEN]\n");
        return 2;
    }
    const char *state = argv[2], *mode = argv[4], *arg = argv[5];
    const char *committed = argc > 7 ? argv[6] : NULL;
    const char *token = argc > 7 ? argv[7] : "";
    long numel = atol(argv[3]) / NPARAMS;
    if (numel < 1)
        return 2;
    if (ddph_open(argv[1], &argc, &argv, &g_ctx) != DDPH_OK)
        return 1;
    g_rank = ddph_rank(g_ctx);
    const char *pids = getenv("CKPT_PIDS");
    if (pids) {
        char pidfile[1100];
        snprintf(pidfile, sizeof pidfile, "%s.%d", pids, g_rank);
        FILE *f = fopen(pidfile, "w");
        if (f) {
            fprintf(f, "%ld\n", (long)getpid());
            fclose(f);
        }
    }
    float *grads[NPARAMS];
    ddph_model *m;
    if (ddph_model_create(g_ctx, "net", &m) != DDPH_OK)
        return failed("model_create");
    for (int i = 0; i < NPARAMS; i++) {
        char name[16];
        int64_t shape[1] = {numel};
        snprintf(name, sizeof name, "w%d", i);
        if (!(grads[i] = calloc((size_t)numel, sizeof(float))))
            return 2;
        if (ddph_model_add_param(m, name, grads[i], shape, 1, DDPH_F32,
                                 DDPH_CPU, NULL) != DDPH_OK)
            return failed("model_add_param");
    }
    if (ddph_model_finalize(m) != DDPH_OK)
        return failed("model_finalize");

    char path[1100];
    if (strcmp(mode, "verify") == 0) {
        rank_state(path, sizeof path, state, "");
        if (ddph_state_load(g_ctx, path) != DDPH_OK)
            return failed("state_load");
        rank_state(path, sizeof path, arg, "");
        if (ddph_state_save(g_ctx, path) != DDPH_OK)
            return failed("state_save");
        return ddph_close(g_ctx) == DDPH_OK ? 0 : 1;
    }
    int steps = atoi(arg), refs = strcmp(mode, "refs") == 0;
    for (int s = 1; s <= steps; s++) {
        for (int i = 0; i < NPARAMS; i++)
            for (long j = 0; j < numel; j++)
                grads[i][j] = (float)sin(0.37 * g_rank + 0.11 * i +
                                         0.013 * (double)j + 0.7 * s);
        if (ddph_step_begin(g_ctx, &m, 1) != DDPH_OK)
            return failed("step_begin");
        for (int i = NPARAMS - 1; i >= 0; i--)
            if (ddph_grad_ready(m, i) != DDPH_OK)
                return failed("grad_ready");
        if (ddph_step_wait(g_ctx) != DDPH_OK ||
            ddph_step_end(g_ctx) != DDPH_OK)
            return failed("step");
        char suffix[32] = "";
        if (refs)
            snprintf(suffix, sizeof suffix, ".step%d", s);
        rank_state(path, sizeof path, state, suffix);
        if (ddph_state_save(g_ctx, path) != DDPH_OK)
            return failed("state_save");
        if (committed && g_rank == 0)
            write_committed(committed, token, s);
    }
    return ddph_close(g_ctx) == DDPH_OK ? 0 : 1;
}
