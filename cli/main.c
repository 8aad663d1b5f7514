/* main.c: the `ddphook` command: dispatch, help, and the commands that
 * inspect jobs and hooks without running anything (check, plugins,
 * describe). */
#include "build-config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "commands.h"
#include "core/cli_internal.h"
#include "support/config.h"
#include "plugin/job_check.h"
#include "plugin/elf_check.h"
#include "plugin/loader.h"
#include "support/safe_open.h"
#include "support/log.h"
#include "backends/registry.h"
#include "plugin/options.h"

static const char main_usage[] =
    "usage: ddphook COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  check [--verbose] JOB.ini\n"
    "                         validate a job without running it: every key,\n"
    "                         hook and hook option; ends with a verdict line\n"
    "  plugins [--job JOB.ini | --plugin-path DIRS]\n"
    "                         list the hooks found along the plugin path\n"
    "  describe NAME [--job JOB.ini | --plugin-path DIRS]\n"
    "                         print one hook's options as a table\n"
    "  replay --job JOB.ini --trace DIR --out DIR2\n"
    "                         run a gradient trace through a job (under\n"
    "                         mpiexec); see `ddphook replay --help`\n"
    "  bench casts|ops|hooks|powersgd|gpu [...]\n"
    "                         speed as a ratio to a baseline in the same run\n"
    "                         (memcpy, MPI_Allreduce, ncclAllReduce); see\n"
    "                         `ddphook bench --help`\n"
    "  plan [--model NAME] [--hosts H] [--ranks-per-host R]\n"
    "       [--link-bandwidth RATE] [...]\n"
    "                         predict each hook's step time and bytes on a\n"
    "                         cluster, and the hook to pick; see\n"
    "                         `ddphook plan --help`\n"
    "  version                print the version\n"
    "  help                   print this text\n"
    "\n"
    "Environment: DDPHOOK_LOG=debug|info|warn|error (default warn).\n"
    "Docs: docs/usage.md, docs/config.md (every INI key), docs/hooks.md.\n";

/* --job FILE or --plugin-path DIRS into a configuration. */
static int load_paths(int argc, char **argv, ddph_config *cfg,
                      const char *usage)
{
    const char *job = NULL, *path = NULL;
    static const struct option opts[] = {
        {"job", required_argument, NULL, 'j'},
        {"plugin-path", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j')
            job = optarg;
        else if (c == 'p')
            path = optarg;
        else {
            fputs(usage, c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : -2;
        }
    }
    ddph_err e;
    ddph_status st = job ? ddph__config_load(job, cfg, &e)
                         : ddph__config_defaults(cfg, &e);
    if (st != DDPH_OK) {
        fprintf(stderr, "ddphook: %s\n", e.msg);
        return -1;
    }
    if (path) {
        /* DIRS first, then the installed folder: what `bench --plugin-path`
         * searches. */
        size_t len = strlen(path) + strlen(DDPH_PLUGIN_DIR) + 2;
        char *dirs = malloc(len);
        if (!dirs)
            return -1;
        snprintf(dirs, len, "%s:%s", path, DDPH_PLUGIN_DIR);
        free(cfg->plugin_path);
        cfg->plugin_path = dirs;
    }
    return 1;
}

static void print_options_table(const ddph_option_spec *spec, FILE *out)
{
    if (!spec || !spec[0].name) {
        fputs("  (no options)\n", out);
        return;
    }
    fprintf(out, "  %-36s %-7s %-12s %-24s %s\n", "option", "type", "default",
            "range", "meaning");
    for (const ddph_option_spec *s = spec; s->name; s++) {
        char range[80] = "-", lo[DDPH__REAL_STR_LEN], hi[DDPH__REAL_STR_LEN];
        if (s->type == DDPH_OPT_INT || s->type == DDPH_OPT_REAL)
            snprintf(range, sizeof range, "[%s, %s]",
                     ddph__real_str(s->min, lo), ddph__real_str(s->max, hi));
        fprintf(out, "  %-36s %-7s %-12s %-24s %s\n", s->name,
                ddph__option_type_name(s->type), s->default_value, range,
                s->doc);
    }
}

/* ddphook check's tally: every error of the file, printed at the end in
 * line order (the job file's own errors, its hooks' options and the
 * hooks' create() are found in that order, not in the file's). */
typedef struct check_error_line {
    int line; /* 0: not of one line */
    size_t order;
    char *msg;
} check_error_line;

typedef struct check_run {
    const ddph_config *cfg;
    const char *path;
    check_error_line *errors;
    size_t nerrors, cap;
    int verbose;
    ddph_hook_probe *probe; /* for the hooks' create(); NULL if down */
    ddph_logger log;
} check_run;

static void check_error_at(void *user, int line, const char *msg)
{
    check_run *run = user;
    if (run->nerrors == run->cap) {
        size_t cap = run->cap ? 2 * run->cap : 16;
        check_error_line *grown = realloc(run->errors, cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "ddphook check: out of memory\n");
            exit(1);
        }
        run->errors = grown;
        run->cap = cap;
    }
    check_error_line *e = &run->errors[run->nerrors];
    e->line = line;
    e->order = run->nerrors;
    e->msg = ddph__strdup(msg);
    run->nerrors++;
}

/* A message that starts with "FILE:LINE:" sorts at that line. */
static void check_error(void *user, const char *msg)
{
    check_run *run = user;
    size_t n = strlen(run->path);
    int line = 0;
    if (strncmp(msg, run->path, n) == 0 && msg[n] == ':')
        line = atoi(msg + n + 1);
    check_error_at(user, line, msg);
}

static int by_line(const void *a, const void *b)
{
    const check_error_line *x = a, *y = b;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void check_print_errors(check_run *run)
{
    if (run->nerrors) /* qsort's array may not be NULL, even empty */
        qsort(run->errors, run->nerrors, sizeof *run->errors, by_line);
    for (size_t i = 0; i < run->nerrors; i++) {
        fprintf(stderr, "ddphook check: %s\n",
                run->errors[i].msg ? run->errors[i].msg : "out of memory");
        free(run->errors[i].msg);
    }
    free(run->errors);
}

/* One chosen hook: it loads, every key of its section is valid, and its
 * own create() accepts the options (the code a job runs at
 * ddph_model_finalize), as a one-rank job.  With --verbose its resolved
 * options are printed. */
/* A plugin that fails the owner and mode checks, in a job that allows
 * insecure plugins: check runs no code from it (dlopen would run its
 * constructors), so only its ELF is read, as the loader does before
 * dlopen.  1: it was such a plugin (reported here), 0: a trusted one. */
static int check_untrusted(check_run *run, const char *name, int line)
{
    const ddph_config *cfg = run->cfg;
    char *path = NULL;
    ddph_err e;
    int fd = -1;
    if (!cfg->allow_insecure_plugins ||
        ddph__plugin_resolve(name, cfg->plugin_path, &path, &e) != DDPH_OK)
        return 0;
    ddph_status st = ddph__safe_open("hook plugin", path, 1, &fd, &e);
    if (st != DDPH_ERR_INSECURE) {
        if (fd >= 0)
            close(fd);
        free(path);
        return 0;
    }
    char where[64] = "";
    if (line > 0)
        snprintf(where, sizeof where, ":%d", line);
    if ((st = ddph__safe_open("hook plugin", path, 0, &fd, &e)) == DDPH_OK)
        st = ddph__elf_check(fd, path, &e);
    if (st != DDPH_OK) {
        char msg[DDPH__ERR_LEN + 64];
        snprintf(msg, sizeof msg, "%s%s: %s", cfg->path, where, e.msg);
        check_error(run, msg);
    } else {
        fprintf(stderr, "ddphook check: warning: %s%s: hook plugin %s is "
                        "not loaded: another user owns or can write it or "
                        "its folders (allowed by allow_insecure_plugins), "
                        "and check runs no code from such a file; its ELF "
                        "exports the plugin entry %s, but its options and "
                        "create() were not checked\n",
                cfg->path, where, path, DDPH_PLUGIN_ENTRY_V1);
    }
    if (fd >= 0)
        close(fd);
    free(path);
    return 1;
}

static void check_hook(check_run *run, const char *name, int line,
                       ddph_wrapper wrapper, const char *who)
{
    const ddph_config *cfg = run->cfg;
    if (check_untrusted(run, name, line))
        return;
    ddph_plugin *p;
    ddph_err e;
    ddph_status st = ddph__plugin_load(name, cfg->plugin_path,
                                       cfg->allow_insecure_plugins, &p, &e);
    if (st != DDPH_OK) {
        if (line > 0)
            ddph__err_prefix(&e, "%s:%d", cfg->path, line);
        check_error(run, e.msg);
        return;
    }
    size_t before = run->nerrors;
    const ddph_hook_section *hs = ddph__config_hook_section(cfg, p->api.name);
    ddph__options_each_error(p->api.name, p->api.options, hs, cfg->path,
                             check_error, run);
    if (run->nerrors == before && run->probe &&
        ddph__hook_probe_create(run->probe, cfg, name, line, wrapper, who,
                                &run->log, &e) != DDPH_OK)
        check_error(run, e.msg);
    if (run->verbose && run->nerrors == before) {
        ddph_options *o;
        if (ddph__options_build(p->api.name, p->api.options, hs, cfg->path,
                                &o, &e) == DDPH_OK) {
            printf("\n; %s: hook '%s' %s from %s (ABI %u.%u, struct_size "
                   "%u)\n",
                   who, p->api.name, p->api.version, p->path,
                   p->api.abi_major, p->api.abi_minor, p->plugin_size);
            printf("[hook.%s]\n", p->api.name);
            ddph__options_print(o, stdout, "");
            ddph__options_free(o);
        }
    }
    ddph__plugin_unload(p);
}

static void warn_stderr(void *user, const char *msg)
{
    (void)user;
    fprintf(stderr, "ddphook check: warning: %s\n", msg);
}

/* [runtime] backend names a backend this ddphook knows; a module must
 * load, and a device backend needs its device here (a job file checked on
 * a login node without a GPU says so, as the job would). */
static void check_backend(check_run *run)
{
    const ddph_config *cfg = run->cfg;
    if (strcmp(cfg->backend, "auto") == 0)
        return;
    const ddph_backend_entry *b = ddph__backend_find(cfg->backend);
    char msg[DDPH__ERR_LEN + 512];
    ddph_err e;
    if (!b) {
        char names[256];
        ddph__backend_names(names, sizeof names);
        snprintf(msg, sizeof msg,
                 "%s:%d: [runtime] backend = '%s' is not a backend this "
                 "ddphook knows (auto, %s)",
                 cfg->path, cfg->backend_line, cfg->backend, names);
        check_error_at(run, cfg->backend_line, msg);
        return;
    }
    const ddph_gpu_ops *gpu = NULL;
    const ddph_backend_ops *job = NULL;
    if (b->kind == DDPH__BACKEND_DEVICE
            ? ddph__backend_load_device(b, &gpu, &e) == DDPH_OK &&
                  gpu->probe(&e) == DDPH_OK
            : ddph__backend_load_job(b, &job, &e) == DDPH_OK)
        return;
    snprintf(msg, sizeof msg, "%s:%d: [runtime] backend = %s: %s", cfg->path,
             cfg->backend_line, b->name, e.msg);
    check_error_at(run, cfg->backend_line, msg);
}

static const char check_usage[] =
    "usage: ddphook check [--verbose] JOB.ini\n"
    "\n"
    "Validates a job file without training: every key, every hook it\n"
    "loads, every option of every hook (each refused key with its file:line,\n"
    "in line order), and each hook's own create() on these options, as a\n"
    "one-rank job.  Every error of the file, in line order, on stderr;\n"
    "the last line is the verdict, with their number.  A plugin that\n"
    "another user owns or can write (allow_insecure_plugins) is not\n"
    "loaded: its ELF is read instead.  Exit status 0 when the job would\n"
    "start, 1 when not.\n"
    "\n"
    "  --verbose   also print the resolved configuration (defaults filled\n"
    "              in) and each hook's resolved options\n";

int cmd_check(int argc, char **argv)
{
    int verbose = 0;
    const char *job = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(check_usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0)
            verbose = 1;
        else if (argv[i][0] != '-' && !job)
            job = argv[i];
        else {
            fputs(check_usage, stderr);
            return 2;
        }
    }
    if (!job) {
        fputs(check_usage, stderr);
        return 2;
    }
    ddph_config cfg;
    ddph_err e;
    check_run run = {.cfg = &cfg, .path = job, .verbose = verbose};
    /* The file's own errors do not stop the check: its hooks and their
     * options are checked too, so that one run lists every error. */
    if (ddph__config_load_all(job, &cfg, check_error_at, &run, &e) < 0) {
        check_print_errors(&run);
        fprintf(stderr, "ddphook check: %s\n", e.msg);
        printf("%s: 1 error: the job would not start\n", job);
        return 1;
    }
    ddph__logger_init(&run.log);
    check_backend(&run);
    /* Hook names come from trusted plugins only (nothing else is run). */
    ddph_config trusted = cfg;
    trusted.allow_insecure_plugins = 0;
    /* Its error is kept for the end: a hook that cannot be loaded is also
     * why a section names no hook, and check_hook says so first. */
    ddph_err sections;
    int sections_bad = ddph__job_check_hook_sections(&trusted, warn_stderr,
                                                     NULL, &sections) !=
                       DDPH_OK;
    /* The hooks' create() runs against a one-rank job, as the job's own
     * would against its world. */
    if (ddph__hook_probe_open(cfg.timeout_s, &run.probe, &e) != DDPH_OK)
        fprintf(stderr, "ddphook check: warning: the hooks' own option "
                        "checks (create) were not run: %s\n",
                e.msg);
    if (verbose)
        ddph__config_print(&cfg, stdout);
    check_hook(&run, cfg.hook_name, cfg.hook_line, cfg.wrapper, "[hook] name");
    for (size_t i = 0; i < cfg.nmodels; i++) {
        if (!cfg.models[i].hook)
            continue;
        char who[256];
        snprintf(who, sizeof who, "[model.%s] hook", cfg.models[i].model);
        check_hook(&run, cfg.models[i].hook, cfg.models[i].hook_line,
                   cfg.models[i].wrapper_set ? cfg.models[i].wrapper
                                             : cfg.wrapper,
                   who);
    }
    ddph__hook_probe_close(run.probe);
    for (size_t i = 0; sections_bad && i < run.nerrors; i++)
        sections_bad = !run.errors[i].msg ||
                       strcmp(run.errors[i].msg, sections.msg) != 0;
    if (sections_bad)
        check_error(&run, sections.msg);
    size_t nerrors = run.nerrors;
    fflush(stdout);
    check_print_errors(&run);
    if (nerrors)
        printf("%s%s: %zu error%s: the job would not start\n",
               verbose ? "\n; " : "", cfg.path, nerrors,
               nerrors == 1 ? "" : "s");
    else
        printf("%s%s: OK\n", verbose ? "\n; " : "", cfg.path);
    ddph__config_free(&cfg);
    return nerrors ? 1 : 0;
}

static const char plugins_usage[] =
    "usage: ddphook plugins [--job JOB.ini | --plugin-path DIRS]\n"
    "\nLists every hook (*.so) along the plugin path, folder by folder in\n"
    "search order, with its version, description and options: the job's\n"
    "plugin_path (--job), DIRS and then the installed plugin folder\n"
    "(--plugin-path, as `ddphook bench` searches), or the installed folder.\n"
    "A file whose name an earlier folder already has is listed as not\n"
    "used: a job naming that hook loads the earlier one.\n";

int cmd_plugins(int argc, char **argv)
{
    ddph_config cfg;
    int r = load_paths(argc, argv, &cfg, plugins_usage);
    if (r <= 0)
        return r == 0 ? 0 : r == -2 ? 2 : 1;
    int found = 0, bad = 0;
    /* The file names (and folders) already met: a later one is shadowed. */
    char **seen = NULL, **seen_in = NULL;
    size_t nseen = 0;
    char *dirs = ddph__strdup(cfg.plugin_path), *save = NULL;
    for (char *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d;
         d = strtok_r(NULL, ":", &save)) {
        char **files;
        int nfiles = ddph__plugin_dir_list(d, &files);
        if (nfiles < 0) {
            printf("%s: (cannot open: %s)\n", d, strerror(errno));
            continue;
        }
        printf("%s:\n", d);
        for (int i = 0; i < nfiles; i++) {
            const char *first = NULL;
            for (size_t k = 0; k < nseen && !first; k++)
                if (strcmp(seen[k], files[i]) == 0)
                    first = seen_in[k];
            if (first) {
                printf("  %-20s (not used: %s/%s comes first)\n", files[i],
                       first, files[i]);
                continue;
            }
            char **more = realloc(seen, (nseen + 1) * sizeof *seen);
            seen = more ? more : seen;
            char **more_in = more ? realloc(seen_in, (nseen + 1) *
                                                         sizeof *seen_in)
                                  : NULL;
            seen_in = more_in ? more_in : seen_in;
            char *name = more_in ? ddph__strdup(files[i]) : NULL;
            if (name) {
                seen[nseen] = name;
                seen_in[nseen++] = d;
            }
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", d, files[i]);
            ddph_plugin *p;
            ddph_err e;
            if (ddph__plugin_load(path, NULL, cfg.allow_insecure_plugins, &p,
                                  &e) != DDPH_OK) {
                printf("  %-20s (not loadable: %s)\n", files[i], e.msg);
                bad++;
                continue;
            }
            int nopt = 0;
            for (const ddph_option_spec *s = p->api.options; s && s->name; s++)
                nopt++;
            printf("  %-20s %-8s ABI %u.%u  %2d option%s  %s\n", p->api.name,
                   p->api.version, p->api.abi_major, p->api.abi_minor, nopt,
                   nopt == 1 ? " " : "s", p->api.description);
            ddph__plugin_unload(p);
            found++;
        }
        ddph__names_free(files, (size_t)nfiles);
    }
    for (size_t k = 0; k < nseen; k++)
        free(seen[k]);
    free(seen);
    free(seen_in);
    free(dirs);
    printf("%d hook%s found%s\n", found, found == 1 ? "" : "s",
           bad ? " (some files could not be loaded)" : "");
    ddph__config_free(&cfg);
    return found ? 0 : 1;
}

static const char describe_usage[] =
    "usage: ddphook describe NAME [--job JOB.ini | --plugin-path DIRS]\n"
    "\nPrints one hook's description and its options (type, default, range,\n"
    "meaning): what [hook.NAME] in a job file accepts.\n";

int cmd_describe(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        int help = argc >= 2 && strcmp(argv[1], "--help") == 0;
        fputs(describe_usage, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    const char *name = argv[1];
    ddph_config cfg;
    int r = load_paths(argc - 1, argv + 1, &cfg, describe_usage);
    if (r <= 0)
        return r == 0 ? 0 : r == -2 ? 2 : 1;
    ddph_plugin *p;
    ddph_err e;
    int rc = 1;
    if (ddph__plugin_load(name, cfg.plugin_path, cfg.allow_insecure_plugins,
                          &p, &e) != DDPH_OK) {
        fprintf(stderr, "ddphook describe: %s\n", e.msg);
    } else {
        printf("%s %s: %s\n  file: %s\n  ABI %u.%u, struct_size %u, "
               "on_step_end %s, save/load %s\n\n",
               p->api.name, p->api.version, p->api.description, p->path,
               p->api.abi_major, p->api.abi_minor, p->plugin_size,
               p->api.on_step_end ? "yes" : "no", p->api.save ? "yes" : "no");
        print_options_table(p->api.options, stdout);
        ddph__plugin_unload(p);
        rc = 0;
    }
    ddph__config_free(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(main_usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 ||
        strcmp(cmd, "-h") == 0) {
        fputs(main_usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("ddphook %s (plugin ABI %d.%d)\n", PACKAGE_VERSION,
               DDPH_PLUGIN_ABI_MAJOR, DDPH_PLUGIN_ABI_MINOR);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } commands[] = {
        {"check", cmd_check},
        {"plugins", cmd_plugins},
        {"describe", cmd_describe},
        {"replay", cmd_replay},
        {"bench", cmd_bench},
        {"plan", cmd_plan},
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ddphook: unknown command '%s'\n\n%s", cmd, main_usage);
    return 2;
}
