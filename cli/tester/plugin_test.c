/* plugin_test.c: `ddphook-plugin-test`, the conformance tester for hooks.
 *
 *   [mpiexec -n W] ddphook-plugin-test PLUGIN.so [--option k=v ...]
 *       [--rtol R] [--steps N] [--valgrind]
 *
 * Without mpiexec it runs itself on 1 to 4 ranks (sweep()).
 * Loads the plugin through the real loader and runs it through the real
 * runtime (public API) on realistic, odd and empty buckets, trains a
 * least-squares problem through it, then prints a table of checks on rank
 * 0; a check fails if it fails on any rank (every rank agrees on every
 * row, valgrind's included).  Exit 0 when nothing failed.  See
 * docs/plugin-guide.md. */
#include "build-config.h"

#include <signal.h>
#include <time.h>

#include "tester.h"


/* Set in the testers a sweep over world sizes starts (sweep()). */
#define IN_SWEEP "DDPH_PLUGIN_TEST_IN_SWEEP"
/* The world sizes a hook must conform at: 1 to SWEEP_MAX ranks. */
#define SWEEP_MAX 4
/* A sweep's default limit for one world size's run, seconds: a run takes
 * a minute or two (valgrind's several); a hook that hangs outside every
 * collective (a deadlock, a corrupted heap) must still get a verdict. */
#define SWEEP_LIMIT_S 1800

static const char usage[] =
    "usage: [mpiexec -n W] ddphook-plugin-test PLUGIN.so [--option KEY=VALUE]...\n"
    "                      [--rtol R] [--steps N] [--ef-steps K] [--valgrind]\n"
    "                      [--suppressions FILE] [--only CHECKS]\n"
    "                      [--time-limit S]\n"
    "\n"
    "Checks a hook plugin against the ABI contract and prints a pass/fail\n"
    "table.  Started without mpiexec it runs itself on 1, 2, 3 and 4 ranks\n"
    "($MPIEXEC, else the mpiexec found at build time) and prints one\n"
    "verdict; under mpiexec it checks that world size only.  Rows: entry\n"
    "symbol and ABI numbers, struct_size, required members, option schema,\n"
    "create/destroy, the same collectives and the same result on every\n"
    "rank, the result within R of the plain average,\n"
    "heap in use steady over steps, error feedback (a hook that declares\n"
    "it: its results summed over steps approach the summed averages like\n"
    "1/K, on realistic and odd buckets), training (200 steps of SGD on a\n"
    "least-squares problem with a known optimum, 981 parameters in 5\n"
    "tensors and several buckets, each rank its own data, a few elements\n"
    "far from their optimum, then on the odd buckets (1-element\n"
    "included): the loss's excess over the optimum 0.5x to 10x that of\n"
    "the same run with the exact average (to 1.25x for a hook without\n"
    "error feedback), every tensor a quarter of its\n"
    "way to the optimum or more, and the ranks' parameters identical),\n"
    "save/load round trip and heap steady over repeated loads (a hook without\n"
    "save/load: that nothing it keeps across steps changes its results,\n"
    "and that it does not declare error feedback), empty, 1-element,\n"
    "odd-sized and 1 MiB buckets, f16 and bf16 buckets under a\n"
    "wrapper, and failures injected into the first, a middle and the last\n"
    "call of each collective the hook calls (allreduce, allgather(v),\n"
    "alltoall, broadcast, reduce_scatter, the nonblocking ones, wait) and\n"
    "into the first test and progress, nothing written just before or\n"
    "after a bucket, and buckets left untouched after their call.\n"
    "\n"
    "  --option K=V   a [hook.NAME] option for the runs (repeatable)\n"
    "  --rtol R       allowed error of one step relative to the largest\n"
    "                 |average|, below 1 (default: the tolerance the hook\n"
    "                 declares; none per step for a hook that declares\n"
    "                 error feedback and no tolerance; else 1e-5)\n"
    "  --steps N      steps per run (default 6)\n"
    "  --ef-steps K   the most steps of each error-feedback run\n"
    "                 (default 1024, at least 128; it stops once it passes)\n"
    "  --valgrind     re-run this test under valgrind --leak-check=full and\n"
    "                 fail on any leak or error (MPICH's own start-up\n"
    "                 allocations are suppressed with the installed\n"
    "                 valgrind.supp, or --suppressions FILE); each rank\n"
    "                 checks its own leaks and errors before the ranks agree\n"
    "                 on a 'valgrind' row, prints a 'valgrind, rank R:\n"
    "                 PASS|FAIL' line, and then the same verdict as every\n"
    "                 other rank: 'conforms' only when every rank's valgrind\n"
    "                 and checks passed (training is checked by the run\n"
    "                 without --valgrind)\n"
    "  --only CHECKS  run only these groups of checks (comma-separated:\n"
    "                 numerics, error-feedback, trains, state, errors),\n"
    "                 besides loading and create/destroy; to re-run what\n"
    "                 failed.  The last line then says 'passed CHECKS',\n"
    "                 never 'conforms'\n"
    "  --time-limit S without mpiexec: the most seconds each world size's\n"
    "                 run may take (default 1800; 0: no limit); a run past\n"
    "                 it is stopped and fails ('did not finish': a hook\n"
    "                 that hangs outside its collectives, as on a corrupted\n"
    "                 heap)\n";



/* One row; status is agreed over all ranks (any failure fails the row). */
void row(tester *t, int ok, int skipped, const char *check,
                const char *fmt, ...)
{
    int all_ok = ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char detail[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    /* The first failing rank's detail is the interesting one. */
    int who = all_ok ? 0 : (ok ? t->world : t->rank), first = 0;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Bcast(detail, sizeof detail, MPI_CHAR, first, MPI_COMM_WORLD);
    if (t->rank == 0)
        printf("%-5s %-46s %s\n", skipped ? "SKIP" : all_ok ? "PASS" : "FAIL",
               check, detail);
    t->failed |= !all_ok && !skipped;
}

/* Under valgrind (--valgrind), every rank checks its own leaks and
 * memory errors now, with everything of the hook's freed, and the ranks
 * agree on the row: a leak on one rank fails the test on every rank, and
 * every rank's exit status (so its final line) says so.  Without
 * valgrind's headers at build time each rank's valgrind judges only its
 * own rank (at exit). */
static void check_valgrind(tester *t)
{
#ifdef HAVE_VALGRIND_MEMCHECK_H
    if (!getenv(UNDER_VALGRIND) || !RUNNING_ON_VALGRIND)
        return;
    VALGRIND_DO_LEAK_CHECK;
    unsigned long leaked = 0, dubious = 0, reachable = 0, suppressed = 0;
    VALGRIND_COUNT_LEAKS(leaked, dubious, reachable, suppressed);
    unsigned long errors = (unsigned long)VALGRIND_COUNT_ERRORS;
    (void)dubious;
    (void)reachable;
    (void)suppressed;
    row(t, leaked == 0 && errors == 0, 0, "valgrind: leaks and memory errors",
        "rank %d: %lu bytes definitely lost, %lu errors%s", t->rank, leaked,
        errors, leaked || errors ? " (valgrind's report on stderr)" : "");
#else
    (void)t;
#endif
}

/* The groups of checks --only names. */
enum { ONLY_NUMERICS = 1, ONLY_EF = 2, ONLY_TRAINS = 4, ONLY_STATE = 8,
       ONLY_ERRORS = 16 };
static const struct {
    const char *name;
    unsigned bit;
} only_names[] = {{"numerics", ONLY_NUMERICS}, {"error-feedback", ONLY_EF},
                  {"trains", ONLY_TRAINS},     {"state", ONLY_STATE},
                  {"errors", ONLY_ERRORS}};

/* --only's comma-separated names as a mask; 0 for an unknown name. */
static unsigned parse_only(const char *list)
{
    unsigned mask = 0;
    while (*list) {
        size_t len = strcspn(list, ",");
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof only_names / sizeof only_names[0]; i++)
            if (strlen(only_names[i].name) == len &&
                strncmp(only_names[i].name, list, len) == 0)
                bit = only_names[i].bit;
        if (!bit)
            return 0;
        mask |= bit;
        list += len + (list[len] == ',');
    }
    return mask;
}

/* Whether the group runs: every group without --only. */
static int runs(const tester *t, unsigned group)
{
    return t->only == 0 || (t->only & group) != 0;
}

/* The last line: 'conforms' only for a full run that passed. */
static void print_verdict(const char *plugin, int failed, const char *only)
{
    if (failed)
        printf("\n%s: FAILED\n", plugin);
    else if (only)
        printf("\n%s: passed %s (--only: not a full conformance run)\n",
               plugin, only);
    else
        printf("\n%s: conforms\n", plugin);
}

static int rerun_under_valgrind(int argc, char **argv, const char *supp,
                                const char *plugin, const char *only)
{
    char **args = calloc((size_t)argc + 8, sizeof *args);
    static char supp_arg[4200];
    int n = 0;
    args[n++] = "valgrind";
    /* MPICH's own start-up allocations (notes/reliability-tests.md). */
    if (!supp && access(DDPH_DATA_DIR "/valgrind.supp", R_OK) == 0)
        supp = DDPH_DATA_DIR "/valgrind.supp";
    if (supp) {
        snprintf(supp_arg, sizeof supp_arg, "--suppressions=%s", supp);
        args[n++] = supp_arg;
    }
    args[n++] = "--leak-check=full";
    args[n++] = "--errors-for-leak-kinds=definite";
    args[n++] = "--error-exitcode=99";
    args[n++] = "--quiet";
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--valgrind") != 0 &&
            strncmp(argv[i], "--suppressions", 14) != 0)
            args[n++] = argv[i];
        else if (strcmp(argv[i], "--suppressions") == 0)
            i++; /* and its value */
    args[n] = NULL;
    /* valgrind's own findings go to stderr; the verdict line here says
     * what they mean, for each rank (under mpiexec every rank runs one). */
    const char *rank = getenv("PMI_RANK");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv(UNDER_VALGRIND, "1", 1);
        /* hwloc's x86 backend (MPICH's) says at length that it cannot
         * run under valgrind. */
        setenv("HWLOC_COMPONENTS", "-x86", 0);
        execvp("valgrind", args);
        perror("ddphook-plugin-test: cannot run valgrind");
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        perror("ddphook-plugin-test: valgrind");
        free(args);
        return 2;
    }
    free(args);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const char *verdict =
        code == 0    ? "PASS  no leaks or memory errors"
        : code == 99 ? "FAIL  leaks or memory errors (valgrind's report above)"
        : code == 127 ? "FAIL  valgrind could not be run (apt-get install valgrind)"
                      : "FAIL  the tester failed under valgrind (see above)";
    printf("valgrind%s%s: %s\n", rank ? ", rank " : "", rank ? rank : "",
           verdict);
    /* The verdict, the same line on every rank: the ranks agreed on every
     * row, valgrind's included (check_valgrind), so each exit status is 0
     * only when every rank passed. */
    print_verdict(plugin, code != 0, only);
    return code;
}

/* Whether a process manager started this process (MPICH's Hydra, PMIx,
 * Open MPI). */
static int under_mpiexec(void)
{
    return getenv("PMI_RANK") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
           getenv("OMPI_COMM_WORLD_SIZE");
}

/* Started without mpiexec: the tester runs itself on 1 to SWEEP_MAX ranks
 * (many bugs show at some world sizes only: a divisor that is right for
 * powers of two, a rank's chunk that is empty on 3) and prints one
 * verdict.  $MPIEXEC, else the mpiexec found at build time, starts them. */
/* Waits for the run `pid` (the leader of its process group) for at most
 * limit_s seconds (0: no limit); past it, stops the whole group (mpiexec,
 * its proxies, the ranks): SIGTERM, then SIGKILL a few seconds later.
 * Returns the run's exit code, or -1 when it was stopped. */
static int wait_for_run(pid_t pid, double limit_s)
{
    int status = 0;
    struct timespec pause = {0, 50000000};
    double waited = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, limit_s > 0 ? WNOHANG : 0);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status)
                                     : 128 + WTERMSIG(status);
        if (r < 0)
            return 127;
        if (waited >= limit_s)
            break;
        nanosleep(&pause, NULL);
        waited += 0.05;
    }
    kill(-pid, SIGTERM);
    for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; i++)
        nanosleep(&pause, NULL);
    kill(-pid, SIGKILL); /* the ranks too, if the launcher left them */
    waitpid(pid, &status, 0);
    return -1;
}

static int sweep(int argc, char **argv, const char *plugin, const char *only,
                 double limit_s)
{
    const char *mpiexec = getenv("MPIEXEC");
    if (!mpiexec || !*mpiexec)
        mpiexec = DDPH_MPIEXEC;
    static char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        perror("ddphook-plugin-test: /proc/self/exe");
        return 2;
    }
    self[len] = '\0';
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args)
        return 2;
    int code[SWEEP_MAX + 1] = {0}, failed = 0;
    for (int n = 1; n <= SWEEP_MAX; n++) {
        char ranks[16];
        snprintf(ranks, sizeof ranks, "%d", n);
        int a = 0;
        args[a++] = (char *)mpiexec;
        args[a++] = "-n";
        args[a++] = ranks;
        args[a++] = self;
        for (int i = 1; i < argc; i++)
            args[a++] = argv[i];
        args[a] = NULL;
        printf("==== %d rank%s: %s -n %d ddphook-plugin-test\n", n,
               n == 1 ? "" : "s", mpiexec, n);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0); /* its own group: a stopped run leaves no rank */
            setenv(IN_SWEEP, "1", 1);
            execvp(mpiexec, args);
            fprintf(stderr, "ddphook-plugin-test: cannot run %s: %s (set "
                            "MPIEXEC, or run under mpiexec yourself)\n",
                    mpiexec, strerror(errno));
            _exit(127);
        }
        if (pid > 0)
            setpgid(pid, pid); /* as the child does: whichever runs first */
        code[n] = pid < 0 ? 127 : wait_for_run(pid, limit_s);
        if (code[n] < 0)
            printf("FAIL  %d rank%s: did not finish within %g s, stopped "
                   "(a hook that hangs outside its collectives: a deadlock, "
                   "a corrupted heap; --time-limit sets the limit)\n",
                   n, n == 1 ? "" : "s", limit_s);
        failed |= code[n] != 0;
        printf("\n");
    }
    free(args);
    printf("world sizes:");
    for (int n = 1; n <= SWEEP_MAX; n++)
        printf(" %d %s%s", n,
               code[n] < 0 ? "FAIL (did not finish)" : code[n] ? "FAIL" : "PASS",
               n < SWEEP_MAX ? "," : "\n");
    print_verdict(plugin, failed, only);
    return failed ? 1 : 0;
}

/* Under a plain mpiexec: which world sizes this run did not check. */
static void print_coverage(int world)
{
    if (getenv(IN_SWEEP))
        return;
    printf("(checked on %d rank%s only; not on", world, world == 1 ? "" : "s");
    int said = 0;
    for (int n = 1; n <= SWEEP_MAX; n++)
        if (n != world)
            printf("%s %d", said++ ? "," : "", n);
    printf(": run ddphook-plugin-test without mpiexec to check 1 to %d)\n",
           SWEEP_MAX);
}

int main(int argc, char **argv)
{
    tester t = {.rtol = -1, .rtol_from = "--rtol", .steps = 6,
                .ef_steps = 1024};
    static const struct option opts[] = {
        {"option", required_argument, NULL, 'o'},
        {"rtol", required_argument, NULL, 'r'},
        {"steps", required_argument, NULL, 's'},
        {"ef-steps", required_argument, NULL, 'e'},
        {"valgrind", no_argument, NULL, 'v'},
        {"suppressions", required_argument, NULL, 'S'},
        {"only", required_argument, NULL, 'O'},
        {"time-limit", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c, valgrind = 0;
    double limit_s = SWEEP_LIMIT_S;
    const char *supp = NULL;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'o') {
            char *eq = strchr(optarg, '=');
            if (!eq) {
                fprintf(stderr, "ddphook-plugin-test: --option %s: KEY=VALUE\n",
                        optarg);
                return 2;
            }
            size_t used = strlen(t.options);
            snprintf(t.options + used, sizeof t.options - used, "%.*s = %s\n",
                     (int)(eq - optarg), optarg, eq + 1);
        } else if (c == 'r') {
            char *end;
            t.rtol = strtod(optarg, &end);
            if (end == optarg || *end || !(t.rtol >= 0)) {
                fprintf(stderr, "ddphook-plugin-test: --rtol %s: a number "
                                "of 0 or more\n",
                        optarg);
                return 2;
            }
        } else if (c == 's') {
            t.steps = atoi(optarg);
        } else if (c == 'e') {
            t.ef_steps = atoi(optarg);
        } else if (c == 'T') {
            char *end;
            limit_s = strtod(optarg, &end);
            if (end == optarg || *end || !(limit_s >= 0)) {
                fprintf(stderr, "ddphook-plugin-test: --time-limit %s: "
                                "seconds, 0 or more\n",
                        optarg);
                return 2;
            }
        } else if (c == 'v') {
            valgrind = 1;
        } else if (c == 'S') {
            supp = optarg;
        } else if (c == 'O') {
            t.only = parse_only(optarg);
            t.only_text = optarg;
            if (!t.only) {
                fprintf(stderr, "ddphook-plugin-test: --only %s: a comma-"
                                "separated list of numerics, error-feedback, "
                                "trains, state, errors\n",
                        optarg);
                return 2;
            }
        } else {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind != argc - 1 || t.steps < 2 || t.ef_steps < EF_MIN_K) {
        fputs(usage, stderr);
        return 2;
    }
    if (!under_mpiexec() && !getenv(IN_SWEEP) && !getenv(UNDER_VALGRIND))
        return sweep(argc, argv, argv[optind], t.only_text, limit_s);
    if (valgrind)
        return rerun_under_valgrind(argc, argv, supp, argv[optind],
                                    t.only_text);
    /* The job files live in a temporary folder: name the plugin by an
     * absolute path (a name without '/' is looked up as given). */
    static char plugin_abs[4096];
    if (strchr(argv[optind], '/') && realpath(argv[optind], plugin_abs))
        t.plugin = plugin_abs;
    else
        t.plugin = argv[optind];
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t.world);
    snprintf(t.dir, sizeof t.dir, "/tmp/ddph-plugin-test-XXXXXX");
    if (t.rank == 0 && !mkdtemp(t.dir))
        t.dir[0] = '\0';
    MPI_Bcast(t.dir, sizeof t.dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (t.rank == 0)
        printf("ddphook-plugin-test %s on %d rank%s\n\n", t.plugin, t.world,
               t.world == 1 ? "" : "s");
    if (t.dir[0] && check_load(&t)) {
        check_create_destroy(&t);
        if (runs(&t, ONLY_NUMERICS)) {
            check_numerics(&t, &realistic, "none", t.rtol, "f32 buckets");
            /* As a view the host neither divides nor casts on the way in
             * (b->divided_by 0, b->dtype f32), whatever the hook's flags
             * ask of copies: a hook must then do it itself. */
            t.as_view = 1;
            check_numerics(&t, &realistic, "none", t.rtol,
                           "f32 buckets as a view");
            t.as_view = 0;
            /* A hook that lets buckets run at once: each of the three on
             * a thread of its own, at the same time. */
            if (t.concurrent) {
                t.lanes = 3;
                check_numerics(&t, &realistic, "none", t.rtol,
                               "f32 buckets on 3 lanes");
                t.lanes = 0;
            } else
                row(&t, 1, 1, "f32 buckets on 3 lanes",
                    "the hook does not declare "
                    "DDPH_PLUGIN_CONCURRENT_BUCKETS (one bucket at a time)");
            check_numerics(&t, &odd, "none", t.rtol,
                           "1-element and odd buckets");
            check_numerics(&t, &empty, "none", t.rtol, "empty bucket");
            check_numerics(&t, &large, "none", t.rtol,
                           "1 MiB bucket, 3 tensors");
            /* Half precision loses bits: 2e-2 relative at least (0:
             * judged on sums, not per step). */
            double hr = t.rtol == 0 || t.rtol > 2e-2 ? t.rtol : 2e-2;
            check_numerics(&t, &realistic, "fp16", hr, "f16 under wrapper");
            check_numerics(&t, &realistic, "bf16", hr, "bf16 under wrapper");
        }
        if (runs(&t, ONLY_NUMERICS))
            check_heap(&t);
        if (runs(&t, ONLY_EF))
            check_error_feedback(&t);
        if (runs(&t, ONLY_TRAINS))
            check_training(&t);
        if (runs(&t, ONLY_STATE))
            check_save_load(&t);
        ddph_backend job = {0};
        const ddph_backend_args args = {.argc = &argc, .argv = &argv,
                                        .timeout_s = 60};
        ddph_logger log;
        ddph_err e;
        ddph__logger_init(&log);
        if (runs(&t, ONLY_ERRORS) &&
            ddph__backend_load_job(ddph__backend_find("mpi"), &job.ops, &e) ==
                DDPH_OK &&
            job.ops->open(&args, &job.state, &e) == DDPH_OK) {
            ddph_comm comm = job.ops->comm(job.state);
            check_error_path(&t, comm, &log);
            check_buffer_kept(&t, comm, &log);
            job.ops->close(job.state, &e);
        }
    }
    char path[320];
    snprintf(path, sizeof path, "%s/job.rank%d.ini", t.dir, t.rank);
    unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
    check_valgrind(&t);
    if (t.rank == 0) {
        rmdir(t.dir);
        /* Under --valgrind the verdict waits for valgrind's (at exit). */
        /* Under --valgrind the verdict comes from the process that
         * started valgrind, once valgrind is done. */
        if (!getenv(UNDER_VALGRIND)) {
            print_coverage(t.world);
            print_verdict(t.plugin, t.failed, t.only_text);
        }
    }
    MPI_Finalize();
    return t.failed ? 1 : 0;
}
