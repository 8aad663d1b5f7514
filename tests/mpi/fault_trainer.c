/* fault_trainer.c: a trainer that loses one rank on purpose, for
 * tests/faults.sh.  Like a real trainer, it lets ddph_open initialise MPI,
 * so nothing outside ddphook can finalize (or hang in) MPI for it.
 *
 *   fault_trainer JOB.ini FAULT POINT STAMP_DIR
 *
 * FAULT is what happens to the victim (the last rank):
 *   exit  _exit(3)           kill  SIGKILL to itself
 *   exit0 exit(0): the C library's exit, atexit handlers run
 *   quick_exit0 quick_exit(0): at_quick_exit handlers run
 *   _exit0 _exit(0): no atexit handler runs
 *   fork  it forks a child (a data loader) that calls exit(0) while the
 *         job is open, and carries on: the job must succeed
 *   stop  SIGSTOP to itself  hook  its hook fails alone (the job's hook must
 *                                  be tests/fake_plugins/failing_last_rank)
 *   nan   a NaN in its gradients (the job sets check_finite = true)
 *   hang  its hook never returns (the job's hook must be
 *         tests/fake_plugins/hangs_last_rank)
 *   last  (POINT short) every rank flags its final step DDPH_STEP_LAST; the
 *         victim has one step fewer, then evaluates for 20 s before closing
 *   average (POINT short) the victim has one step fewer, then averages its
 *         loss (ddph_average_f64) while the others are still stepping
 *   close it calls ddph_close early and exits 0 (a trainer that gives up)
 *   cut   its host's link goes down (under tests/cluster/cluster.sh: it
 *         runs `sh $DDPH_CLUSTER_SCRIPT --cut`) and it carries on
 *   none  nothing: the job must succeed
 * POINT is when: before-open (before ddph_open: MPI's start-up waits for
 * it), mid-step (half its gradients marked ready),
 * mid-accumulation (inside a DDPH_STEP_NO_SYNC step), during-save (instead
 * of its share of ddph_state_save), before-close (after the last step),
 * short (after its last step, one before the others' last).
 *
 * Every rank writes STAMP_DIR/pid.RANK; the victim writes STAMP_DIR/fault
 * (CLOCK_REALTIME seconds) just before its fault.  A survivor that sees
 * the failure prints "SURVIVOR rank R: STATUS during ... at T: MESSAGE",
 * then "SURVIVOR rank R: closed (STATUS) at T, exit 4" once ddph_close has
 * returned (to stderr and to STAMP_DIR/report.R), and exits 4.  A healthy run prints "ok" on rank 0 and exits 0. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

enum { NPARAMS = 8, NUMEL = 4096, STEPS = 6 };

static const char *g_dir;
static int g_rank, g_victim;
static ddph_ctx *g_ctx;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Written under a temporary name and renamed: the test polls these files,
 * and an empty pid file read between fopen and the write once passed for a
 * rank that had ended (tests/ranks.sh), so the test killed a live job. */
static void write_file(const char *name, const char *fmt, double v)
{
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        exit(2);
    }
    fprintf(f, fmt, v);
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    if (rename(tmp, path) != 0) {
        perror(path);
        exit(2);
    }
}

/* A child that calls exit(0) while the parent's job is open: ddphook's
 * exit handler, inherited, must leave it (and the job) alone. */
static void fork_child_that_exits(void)
{
    fflush(NULL);
    pid_t child = fork();
    if (child == 0)
        exit(0);
    int status = -1;
    if (child < 0 || waitpid(child, &status, 0) != child ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank %d: its forked child ended with status %d "
                        "(raw %d), not 0\n", g_rank,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1, status);
        _exit(5);
    }
}

/* The victim's fault; returns only for faults that are not a death. */
static void fault(const char *what, const char *where, const char *point)
{
    if (!g_victim || strcmp(where, point) != 0)
        return;
    if (strcmp(what, "hook") == 0 || strcmp(what, "nan") == 0 ||
        strcmp(what, "hang") == 0 || strcmp(what, "none") == 0)
        return;
    if (strcmp(what, "fork") == 0) {
        fork_child_that_exits();
        return;
    }
    write_file("fault", "%.6f\n", wall());
    fprintf(stderr, "rank %d: fault '%s' at %s on purpose\n", g_rank, what,
            point);
    fflush(stderr);
    if (strcmp(what, "last") == 0 || strcmp(what, "average") == 0)
        return; /* main goes on */
    if (strcmp(what, "close") == 0) {
        ddph_close(g_ctx);
        _exit(0);
    }
    if (strcmp(what, "cut") == 0) {
        const char *script = getenv("DDPH_CLUSTER_SCRIPT");
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "sh '%s' --cut", script ? script : "");
        if (!script || system(cmd) != 0) {
            fprintf(stderr, "rank %d: cannot cut the link (%s)\n", g_rank, cmd);
            _exit(2);
        }
        return; /* it carries on, cut off */
    }
    if (strcmp(what, "exit") == 0)
        _exit(3);
    if (strcmp(what, "exit0") == 0)
        exit(0);
    if (strcmp(what, "quick_exit0") == 0)
        quick_exit(0);
    if (strcmp(what, "_exit0") == 0)
        _exit(0);
    raise(strcmp(what, "kill") == 0 ? SIGKILL : SIGSTOP);
    /* SIGCONT from the test only comes once the others are judged. */
    _exit(3);
}

/* A report line, to stderr and to STAMP_DIR/report.RANK: a rank cut off
 * the network cannot rely on mpiexec to forward its output. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    char path[512];
    snprintf(path, sizeof path, "%s/report.%d", g_dir, g_rank);
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
}

static int survive(ddph_ctx *ctx, ddph_status st, const char *during)
{
    report("SURVIVOR rank %d: %s during %s at %.6f: %s", g_rank,
           ddph_status_name(st), during, wall(), ddph_last_error(ctx));
    ddph_status cs = ddph_close(ctx);
    report("SURVIVOR rank %d: closed (%s) at %.6f, exit 4", g_rank,
           ddph_status_name(cs), wall());
    /* _exit, not return: with a peer stopped (SIGSTOP), the transport's
     * own exit-time clean-up once kept a survivor from ending after it had
     * returned from main (notes/reliability-tests.md). */
    fflush(NULL);
    _exit(4);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: fault_trainer JOB.ini FAULT POINT STAMP_DIR\n");
        return 2;
    }
    const char *what = argv[2], *point = argv[3];
    g_dir = argv[4];
    /* before-open: the victim stops before MPI's start-up (hydra's
     * PMI_RANK and PMI_SIZE say which rank this is before MPI can). */
    const char *pmi_rank = getenv("PMI_RANK"), *pmi_size = getenv("PMI_SIZE");
    if (strcmp(point, "before-open") == 0 && pmi_rank && pmi_size &&
        atoi(pmi_rank) == atoi(pmi_size) - 1) {
        g_rank = atoi(pmi_rank);
        char pidname[32];
        snprintf(pidname, sizeof pidname, "pid.%d", g_rank);
        write_file(pidname, "%.0f\n", (double)getpid());
        g_victim = 1;
        fault(what, "before-open", point);
    }
    ddph_ctx *ctx;
    if (ddph_open(argv[1], &argc, &argv, &ctx) != DDPH_OK)
        return 1;
    g_ctx = ctx;
    g_rank = ddph_rank(ctx);
    g_victim = g_rank == ddph_world_size(ctx) - 1;
    char pidname[32];
    snprintf(pidname, sizeof pidname, "pid.%d", g_rank);
    write_file(pidname, "%.0f\n", (double)getpid());

    static float grads[NPARAMS][NUMEL];
    ddph_model *m;
    ddph_status st = ddph_model_create(ctx, "net", &m);
    for (int i = 0; i < NPARAMS && st == DDPH_OK; i++) {
        char name[16];
        int64_t shape[1] = {NUMEL};
        snprintf(name, sizeof name, "w%d", i);
        st = ddph_model_add_param(m, name, grads[i], shape, 1, DDPH_F32,
                                  DDPH_CPU, NULL);
    }
    if (st == DDPH_OK)
        st = ddph_model_finalize(m);
    if (st != DDPH_OK)
        return survive(ctx, st, "setup");

    int short_run = strcmp(point, "short") == 0;
    int steps = short_run && g_victim ? STEPS - 1 : STEPS;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < NPARAMS; i++)
            for (int j = 0; j < NUMEL; j++)
                grads[i][j] = (float)(g_rank + i + j % 5);
        if (s == 3 && g_victim && strcmp(what, "nan") == 0)
            grads[2][7] = NAN;
        /* Steps 1 and 2 accumulate; 3 synchronises them. */
        unsigned flags = s == 1 || s == 2 ? DDPH_STEP_NO_SYNC : 0;
        if (s == steps - 1 && strcmp(what, "last") == 0)
            flags |= DDPH_STEP_LAST;
        if ((st = ddph_step_begin_flags(ctx, &m, 1, flags)) != DDPH_OK)
            return survive(ctx, st, "step_begin");
        for (int i = NPARAMS - 1; i >= 0; i--) {
            if (i == NPARAMS / 2 && s == 3)
                fault(what, "mid-step", point);
            if (i == NPARAMS / 2 && s == 2)
                fault(what, "mid-accumulation", point);
            if ((st = ddph_grad_ready(m, i)) != DDPH_OK)
                return survive(ctx, st, "grad_ready");
        }
        if ((st = ddph_step_wait(ctx)) != DDPH_OK)
            return survive(ctx, st, "step_wait");
        if ((st = ddph_step_end(ctx)) != DDPH_OK)
            return survive(ctx, st, "step_end");
        if (s == 4) {
            fault(what, "during-save", point);
            char path[512];
            snprintf(path, sizeof path, "%s/ckpt", g_dir);
            if ((st = ddph_state_save(ctx, path)) != DDPH_OK)
                return survive(ctx, st, "state_save");
        }
    }
    if (short_run && g_victim) {
        fault(what, "short", point);
        if (strcmp(what, "average") == 0) {
            double loss = 1.0;
            if ((st = ddph_average_f64(ctx, &loss, 1)) != DDPH_OK)
                return survive(ctx, st, "ddph_average_f64");
        } else {
            sleep(20); /* a long evaluation before closing */
        }
    }
    fault(what, "before-close", point);
    st = ddph_close(ctx);
    if (st != DDPH_OK) {
        report("SURVIVOR rank %d: %s during close at %.6f, exit 4", g_rank,
               ddph_status_name(st), wall());
        fflush(NULL);
        _exit(4); /* as in survive() */
    }
    if (g_rank == 0)
        printf("ok\n");
    return 0;
}
