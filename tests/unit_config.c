/* unit_config.c: the job INI: defaults, values, and every error naming
 * file and line. */
#include "build-config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/config.h"
#include "plugin/job_check.h"
#include "unit.h"

/* Loads text; returns the status and leaves the message in e. */
static ddph_status load(const char *text, ddph_config *cfg, ddph_err *e,
                        char *path, size_t len)
{
    unit_write_temp(text, path, len);
    ddph_status st = ddph__config_load(path, cfg, e);
    unlink(path);
    return st;
}

/* Asserts that loading text fails with st and a message containing
 * "<file>:<line>: " and `needle`. */
static void expect_error(const char *text, ddph_status want, int line,
                         const char *needle)
{
    ddph_config cfg;
    ddph_err e;
    char path[256], where[300];
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), want);
    if (line > 0) {
        snprintf(where, sizeof where, "%s:%d: ", path, line);
        ck_assert_msg(strstr(e.msg, where), "'%s' lacks '%s'", e.msg, where);
    }
    ck_assert_msg(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
}

START_TEST(defaults)
{
    ddph_config cfg;
    ddph_err e;
    ck_assert_int_eq(ddph__config_defaults(&cfg, &e), DDPH_OK);
    ck_assert(cfg.bucket_cap_mb == DDPH_CAP_AUTO);
    ck_assert(cfg.first_bucket_cap_mb == DDPH_CAP_AUTO);
    ck_assert(cfg.timeout_s == 600.0);
    ck_assert_int_eq(cfg.accumulate_steps, 1);
    ck_assert_str_eq(cfg.hook_name, "allreduce");
    ck_assert_int_eq(cfg.wrapper, DDPH_WRAP_NONE);
    ck_assert_str_eq(cfg.backend, "auto");
    ddph__config_free(&cfg);
}
END_TEST

START_TEST(full_file)
{
    const char *text = "; a job\n"
                       "[runtime]\n"
                       "backend = mpi\n"
                       "bucket_cap_mb = 0.0078125\n"
                       "first_bucket_cap_mb = 0.5\n"
                       "gradient_as_bucket_view = yes\n"
                       "plugin_path = /opt/a:rel/b\n"
                       "timeout_s = 30\n"
                       "[accumulate]\n"
                       "steps = 4\n"
                       "sync_each_batch = false\n"
                       "[hook]\n"
                       "name = powersgd\n"
                       "wrapper = fp16\n"
                       "[hook.powersgd]\n"
                       "matrix_approximation_rank = 2\n"
                       "[model.disc]\n"
                       "hook = fp16\n"
                       "accumulate_steps = 2\n";
    ddph_config cfg;
    ddph_err e;
    char path[256];
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), DDPH_OK);
    ck_assert(cfg.bucket_cap_mb == 0.0078125);
    ck_assert(cfg.first_bucket_cap_mb == 0.5);
    ck_assert_int_eq(cfg.gradient_as_bucket_view, 1);
    /* Relative plugin_path elements resolve against the file's folder. */
    ck_assert_str_eq(cfg.plugin_path, "/opt/a:/tmp/rel/b");
    ck_assert(cfg.timeout_s == 30);
    ck_assert_int_eq(cfg.accumulate_steps, 4);
    ck_assert_str_eq(cfg.hook_name, "powersgd");
    ck_assert_int_eq(cfg.hook_line, 13);
    ck_assert_int_eq(cfg.wrapper, DDPH_WRAP_FP16);
    const ddph_hook_section *hs = ddph__config_hook_section(&cfg, "powersgd");
    ck_assert_ptr_nonnull(hs);
    ck_assert_int_eq((int)hs->nkv, 1);
    ck_assert_str_eq(hs->kv[0].key, "matrix_approximation_rank");
    ck_assert_str_eq(hs->kv[0].value, "2");
    ck_assert_int_eq(hs->kv[0].line, 16);
    const ddph_model_section *ms = ddph__config_model(&cfg, "disc");
    ck_assert_ptr_nonnull(ms);
    ck_assert_str_eq(ms->hook, "fp16");
    ck_assert_int_eq(ms->accumulate_steps, 2);
    ck_assert_ptr_null(ddph__config_model(&cfg, "gen"));
    ddph__config_free(&cfg);
}
END_TEST

START_TEST(errors_name_file_and_line)
{
    expect_error("[runtime]\nbucket_cap_mb = lots\n", DDPH_ERR_CONFIG, 2,
                 "bucket_cap_mb = 'lots' is not a number or auto");
    expect_error("[runtime]\ntimeout_s = auto\n", DDPH_ERR_CONFIG, 2,
                 "timeout_s = 'auto' is not a number");
    expect_error("[runtime]\n\ntimeout_s = -1\n", DDPH_ERR_CONFIG, 3,
                 "out of range");
    expect_error("[runtime]\nbucket_cap_mp = 4\n", DDPH_ERR_CONFIG, 2,
                 "unknown key 'bucket_cap_mp' in [runtime]; did you mean "
                 "'bucket_cap_mb'?");
    /* A key of another section: the message names the right one. */
    expect_error("[accumulate]\ntimeout_s = 30\n", DDPH_ERR_CONFIG, 2,
                 "unknown key 'timeout_s' in [accumulate]: 'timeout_s' is a "
                 "key of [runtime]; move the line under [runtime]");
    expect_error("[hook]\nsteps = 4\n", DDPH_ERR_CONFIG, 2,
                 "'steps' is a key of [accumulate]");
    /* inih keeps quotes: a quoted path or name is refused, not used. */
    expect_error("[runtime]\ntrace = \"run.json\"\n", DDPH_ERR_CONFIG, 2,
                 "[runtime] trace = \"run.json\": values take no quotes "
                 "(they would be part of the value); write trace = run.json");
    expect_error("[hook]\nname = 'fp16'\n", DDPH_ERR_CONFIG, 2,
                 "write name = fp16");
    /* '#' after a value is part of it for inih: refused, saying why. */
    expect_error("[runtime]\ntrace = run.json # the timeline\n",
                 DDPH_ERR_CONFIG, 2,
                 "[runtime] trace = 'run.json # the timeline': '#' starts a "
                 "comment only at the start of a line; after a value write "
                 "' ;'");
    expect_error("[hook.topk]\nratio = 0.1\t# a tenth\n", DDPH_ERR_CONFIG, 2,
                 "'#' starts a comment only at the start of a line");
    expect_error("[runtim]\nbackend = mpi\n", DDPH_ERR_CONFIG, 2,
                 "unknown section [runtim]; did you mean [runtime]?");
    /* Which backends exist is the registry's to say when the job opens
     * (bad_input.sh); the file only holds a name. */
    expect_error("[runtime]\nbackend = ../gloo\n", DDPH_ERR_CONFIG, 2,
                 "'../gloo' is not a backend's name");
    expect_error("[runtime]\nbackend = Gloo\n", DDPH_ERR_CONFIG, 2,
                 "'Gloo' is not a backend's name");
    expect_error("[runtime]\nbackend = "
                 "a_name_of_thirty_two_characters_\n",
                 DDPH_ERR_CONFIG, 2, "is not a backend's name");
    expect_error("[hook]\nwrapper = fp8\n", DDPH_ERR_CONFIG, 2,
                 "'fp8' is not none, fp16 or bf16");
    expect_error("[accumulate]\nsteps = 0\n", DDPH_ERR_CONFIG, 2,
                 "out of range");
    expect_error("[accumulate]\nsteps = 2.5\n", DDPH_ERR_CONFIG, 2,
                 "is not an integer");
    expect_error("[runtime]\ngradient_as_bucket_view = maybe\n",
                 DDPH_ERR_CONFIG, 2, "is not true or false");
    expect_error("[runtime]\ntimeout_s = 1\n\ntimeout_s = 2\n",
                 DDPH_ERR_CONFIG, 4,
                 "duplicate key 'timeout_s' in [runtime] (first set on line 2)");
    expect_error("[model.gen]\nhoook = fp16\n", DDPH_ERR_CONFIG, 2,
                 "did you mean 'hook'?");
    expect_error("[model.gen]\naccumulate_steps = 0\n", DDPH_ERR_CONFIG, 2,
                 "not an integer >= 1");
    expect_error("[runtime]\nthis line has no equals sign\n",
                 DDPH_ERR_CONFIG, 2, "syntax error");
    expect_error("bucket_cap_mb = 1\n", DDPH_ERR_CONFIG, 1,
                 "outside any [section]");
    expect_error("[runtime]\nbucket_cap_mb = 1e999\n", DDPH_ERR_CONFIG, 2,
                 "is not a number");
    /* Numbers are decimal: strtod's hex is refused. */
    expect_error("[runtime]\ntimeout_s = 0x10\n", DDPH_ERR_CONFIG, 2,
                 "timeout_s = '0x10' is not a number");
    /* A section may come back; a key set twice is still an error. */
    expect_error("[runtime]\ntimeout_s = 10\n[hook]\nname = x\n[runtime]\n"
                 "timeout_s = 1\n",
                 DDPH_ERR_CONFIG, 6,
                 "duplicate key 'timeout_s' in [runtime] (first set on line 2)");
    expect_error("[runtime]\ntimeout_s = 10\n[hook\nname = x\n",
                 DDPH_ERR_CONFIG, 3,
                 "section header '[hook' has no closing ']'");
    /* inih drops what follows ']': a key there would be lost. */
    expect_error("[hook.topk] ratio = 0.5\n", DDPH_ERR_CONFIG, 1,
                 "text after ']' on the section line: put 'ratio = 0.5' on "
                 "a line of its own");
    expect_error("[hook]\nname = x\n[runtime] timeout_s = 1 ; short\n",
                 DDPH_ERR_CONFIG, 3,
                 "put 'timeout_s = 1 ; short' on a line of its own");
    /* '#' starts a comment only at the start of a line (inih's build). */
    expect_error("[runtime] # note\n", DDPH_ERR_CONFIG, 1,
                 "text after ']'");
    /* inih reads a lone carriage return as part of the line: the key
     * after it would be lost with the rest of the header's line. */
    expect_error("[runtime]\rtimeout_s = 0\n", DDPH_ERR_CONFIG, 1,
                 "a carriage return inside the line");
    /* A second mark, which inih would take off after these checks. */
    expect_error("\xEF\xBB\xBF\xEF\xBB\xBF[runtime] timeout_s = 0\n",
                 DDPH_ERR_CONFIG, 1, "a second UTF-8 byte-order mark");
}
END_TEST

/* What inih takes after ']' and before the first line stays accepted:
 * an inline comment, and a UTF-8 byte-order mark (then line 2 is still
 * line 2). */
START_TEST(header_comments_and_bom)
{
    ddph_config cfg;
    ddph_err e;
    char path[256];
    ck_assert_int_eq(load("[runtime] ; the transport\ntimeout_s = 5\n"
                          "[hook];x\nname = allreduce\n",
                          &cfg, &e, path, sizeof path),
                     DDPH_OK);
    ck_assert_double_eq(cfg.timeout_s, 5);
    ddph__config_free(&cfg);
    ck_assert_int_eq(load("\xEF\xBB\xBF[runtime]\ntimeout_s = 7\n", &cfg,
                          &e, path, sizeof path),
                     DDPH_OK);
    ck_assert_double_eq(cfg.timeout_s, 7);
    ddph__config_free(&cfg);
    expect_error("\xEF\xBB\xBF[runtime]\ntimeout_s = x\n", DDPH_ERR_CONFIG,
                 2, "timeout_s = 'x' is not a number");
    ck_assert_int_eq(load("\xEF\xBB\xBF", &cfg, &e, path, sizeof path),
                     DDPH_OK);
    ddph__config_free(&cfg);
    /* Only line 1's mark: elsewhere the bytes are text. */
    expect_error("[runtime]\n\xEF\xBB\xBFtimeout_s = 7\n", DDPH_ERR_CONFIG,
                 2, "");
}
END_TEST

/* One run names every mistake of the file, one a line, in file order;
 * the keys under a broken header are not blamed on the section before. */
START_TEST(every_error_of_a_file)
{
    ddph_config cfg;
    ddph_err e;
    char path[256], want[2048];
    ck_assert_int_eq(load("[runtime]\ntimeout_s = x\nbucket_cap_mb = -1\n"
                          "[hook\nname = powersgd\n[accumulate]\n"
                          "steps = 0\n[hooks]\nname = y\n",
                          &cfg, &e, path, sizeof path),
                     DDPH_ERR_CONFIG);
    snprintf(want, sizeof want,
             "%s:2: [runtime] timeout_s = 'x' is not a number\n"
             "%s:3: [runtime] bucket_cap_mb = -1 is out of range "
             "[9.5367431640625e-07, 65536]\n"
             "%s:4: section header '[hook' has no closing ']'\n"
             "%s:7: [accumulate] steps = 0 is out of range [1, 2147483647]\n"
             "%s:9: unknown section [hooks]; did you mean [hook]?",
             path, path, path, path, path);
    ck_assert_str_eq(e.msg, want);
    /* Past MAX_ERRORS the list stops. */
    static char text[4096];
    strcpy(text, "[runtime]\n");
    for (int i = 0; i < 20; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "k%d = 1\n", i);
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path),
                     DDPH_ERR_CONFIG);
    snprintf(want, sizeof want, "\n%s: more errors follow; fix these first",
             path);
    ck_assert_msg(strstr(e.msg, want) && !strstr(e.msg, "'k8'"), "%s", e.msg);
}
END_TEST

START_TEST(numbers_print_as_written)
{
    char buf[DDPH__REAL_STR_LEN];
    ck_assert_str_eq(ddph__real_str(65536, buf), "65536");
    ck_assert_str_eq(ddph__real_str(4294967295.0, buf), "4294967295");
    ck_assert_str_eq(ddph__real_str(0.001, buf), "0.001");
    ck_assert_str_eq(ddph__real_str(1.0 / (1 << 20), buf),
                     "9.5367431640625e-07");
}
END_TEST

START_TEST(long_lines_and_nul_bytes)
{
    /* A 4 KiB plugin_path over 32 indented continuation lines of 128
     * characters (inih's buffer holds 198 and a newline): joined into one
     * value, set at the key's line. */
    static char text[3 * 65536];
    ddph_config cfg;
    ddph_err e;
    char path[256];
    strcpy(text, "[runtime]\nplugin_path = ");
    size_t n = strlen(text);
    for (int l = 0; l < 32; l++) {
        if (l) {
            memcpy(text + n, "\n    ", 5);
            n += 5;
        }
        memset(text + n, 'a' + l % 26, 128);
        n += 128;
    }
    strcpy(text + n, "\n; why so long\ntimeout_s = 7\n");
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), DDPH_OK);
    ck_assert_uint_eq(strlen(cfg.plugin_path), 4096 + strlen(path) -
                                                   strlen(strrchr(path, '/')) +
                                                   1);
    ck_assert(strstr(cfg.plugin_path, "aaab") != NULL); /* no separator */
    ck_assert(cfg.timeout_s == 7.0);
    ddph__config_free(&cfg);
    /* A hook option continued, and an error in a continued value named at
     * the key's line. */
    expect_error("[runtime]\ntimeout_s = 1\n  2x\n", DDPH_ERR_CONFIG, 2,
                 "[runtime] timeout_s = '12x' is not a number");
    ck_assert_int_eq(load("[hook.topk]\nratio = 0.\n  05\n", &cfg, &e, path,
                          sizeof path),
                     DDPH_OK);
    ck_assert_uint_eq(cfg.hook_sections[0].nkv, 1);
    ck_assert_str_eq(cfg.hook_sections[0].kv[0].value, "0.05");
    ddph__config_free(&cfg);
    /* inih would keep a comment on a continuation line in the value. */
    expect_error("[runtime]\nplugin_path = /a:\n  /b ; the second\n",
                 DDPH_ERR_CONFIG, 3,
                 "a comment on a line that continues the value of "
                 "'plugin_path' would become part of the value");
    /* An indented key is not silently taken for the rest of a value. */
    expect_error("[runtime]\nplugin_path = /a\n  timeout_s = 5\n",
                 DDPH_ERR_CONFIG, 3,
                 "an indented line continues the value of 'plugin_path' "
                 "(line 2), but 'timeout_s = 5' looks like a key");
    /* A line longer than inih's buffer is refused, not cut in two; the
     * next lines are still read (line 3's error is the second). */
    strcpy(text, "[runtime]\nplugin_path = ");
    n = strlen(text);
    memset(text + n, 'a', 300);
    strcpy(text + n + 300, "\ntimeout_s = x\n");
    expect_error(text, DDPH_ERR_CONFIG, 2,
                 "line longer than 198 characters: write a long value over "
                 "several lines");
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), DDPH_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, ":3: [runtime] timeout_s = 'x'"), "%s", e.msg);
    /* Long comments are lines too. */
    strcpy(text, "[runtime]\n; ");
    n = strlen(text);
    memset(text + n, 'c', 1000);
    strcpy(text + n + 1000, "\n");
    expect_error(text, DDPH_ERR_CONFIG, 2, "line longer than 198 characters");

    /* The runtime's own job files write long values so that they read
     * back unchanged: a 600-character folder list with a space in it. */
    char value[700] = "";
    for (int d = 0; d < 20; d++)
        strcat(value, d == 7 ? "/srv/my hooks/build-tree-x:" :
                               "/opt/research/build-tree-xy:");
    strcat(value, "/usr/lib");
    char kv_path[] = "/tmp/ddph-unit-kv-XXXXXX";
    int kv_fd = mkstemp(kv_path);
    ck_assert_int_ge(kv_fd, 0);
    FILE *kv = fdopen(kv_fd, "w");
    fputs("[runtime]\n", kv);
    ck_assert(ddph__config_write_kv(kv, "plugin_path", value));
    fclose(kv);
    ck_assert_int_eq(ddph__config_load(kv_path, &cfg, &e), DDPH_OK);
    unlink(kv_path);
    ck_assert_str_eq(cfg.plugin_path, value);
    ddph__config_free(&cfg);

    /* A NUL byte cannot go through the helper's strlen: write it here. */
    char nul[] = "/tmp/ddph-unit-XXXXXX";
    int fd = mkstemp(nul);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq((int)write(fd, "[runtime]\ntime\0out_s = 1\n", 25), 25);
    close(fd);
    ck_assert_int_eq(ddph__config_load(nul, &cfg, &e), DDPH_ERR_CONFIG);
    unlink(nul);
    ck_assert_msg(strstr(e.msg, ":2: NUL byte"), "%s", e.msg);
}
END_TEST

/* Collects the warnings of job_check. */
static void keep_warning(void *user, const char *msg)
{
    char *buf = user;
    size_t used = strlen(buf);
    snprintf(buf + used, 4096 - used, "%s\n", msg);
}

/* A misspelled section never changes training silently (issue: the
 * first hour): options for a hook that does not exist are an error,
 * options nobody uses and models never created are warnings. */
START_TEST(sections_nobody_reads)
{
    const char *dir = unit_env("DDPH_TEST_PLUGIN_DIR");
    char text[2048], path[256], want[2048], warnings[4096] = "";
    ddph_config cfg;
    ddph_err e;
    snprintf(text, sizeof text,
             "[runtime]\nplugin_path = %s\n[hook]\nname = powersgd\n\n"
             "[hook.powersdg]\nmatrix_approximation_rank = 2\n",
             dir);
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), DDPH_OK);
    ck_assert_int_eq(ddph__job_check_hook_sections(&cfg, keep_warning,
                                                   warnings, &e),
                     DDPH_ERR_CONFIG);
    snprintf(want, sizeof want,
             "%s:6: [hook.powersdg]: no hook 'powersdg' along plugin_path "
             "(%s); did you mean [hook.powersgd]?",
             path, dir);
    ck_assert_str_eq(e.msg, want);
    ddph__config_free(&cfg);

    snprintf(text, sizeof text,
             "[runtime]\nplugin_path = %s\n[hook]\nname = powersgd\n"
             "[hook.powersgd]\nmatrix_approximation_rank = 2\n"
             "[hook.fp16]\nunused = 1\n[model.mpl]\nwrapper = fp16\n",
             dir);
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), DDPH_OK);
    ck_assert_int_eq(ddph__job_check_hook_sections(&cfg, keep_warning,
                                                   warnings, &e),
                     DDPH_OK);
    snprintf(want, sizeof want,
             "%s:7: [hook.fp16]: no model of this job uses hook 'fp16' "
             "([hook] name = powersgd), so these options are ignored\n",
             path);
    ck_assert_str_eq(warnings, want);
    const char *created[] = {"mlp", "critic"};
    ck_assert_int_eq(ddph__job_check_models(&cfg, created, 2, &e),
                     DDPH_ERR_CONFIG);
    snprintf(want, sizeof want,
             "%s:9: [model.mpl]: the trainer created no model 'mpl' before "
             "its first step, so this section would never apply; did you "
             "mean [model.mlp]?",
             path);
    ck_assert_str_eq(e.msg, want);
    const char *right[] = {"mpl"};
    ck_assert_int_eq(ddph__job_check_models(&cfg, right, 1, &e), DDPH_OK);
    ddph__config_free(&cfg);

    /* A hook file renamed without its declared name (the template's
     * my_hook.c copied to mine.c): the section names the right one. */
    char tmp[] = "/tmp/ddph-unit-renamed-XXXXXX", so[300], cmd[1024];
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(so, sizeof so, "%s/mine.so", tmp);
    snprintf(cmd, sizeof cmd, "cp '%s/fp16.so' '%s'", dir, so);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(text, sizeof text, "[hook]\nname = %s\n[hook.mine]\nx = 1\n",
             so);
    ck_assert_int_eq(load(text, &cfg, &e, path, sizeof path), DDPH_OK);
    ck_assert_int_eq(ddph__job_check_hook_sections(&cfg, NULL, NULL, &e),
                     DDPH_ERR_CONFIG);
    snprintf(want, sizeof want,
             "%s:3: [hook.mine]: %s declares itself hook 'fp16' (its name "
             "in ddph_plugin_v1, not its file's), so its options go under "
             "[hook.fp16]",
             path, so);
    ck_assert_str_eq(e.msg, want);
    ddph__config_free(&cfg);
    unlink(so);
    rmdir(tmp);
}
END_TEST

START_TEST(missing_file)
{
    ddph_config cfg;
    ddph_err e;
    ck_assert_int_eq(ddph__config_load("/nonexistent/job.ini", &cfg, &e),
                     DDPH_ERR_CONFIG);
    ck_assert_msg(strstr(e.msg, "/nonexistent/job.ini: cannot open job file"),
                  "%s", e.msg);
}
END_TEST

START_TEST(print_round_trips)
{
    ddph_config cfg, again;
    ddph_err e;
    char path[256], path2[256];
    ck_assert_int_eq(load("[runtime]\nbucket_cap_mb = 0.0078125\n[hook]\n"
                          "name = allreduce\n",
                          &cfg, &e, path, sizeof path),
                     DDPH_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ddph__config_print(&cfg, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "bucket_cap_mb = 0.0078125"));
    ck_assert_ptr_nonnull(strstr(text, "first_bucket_cap_mb = auto"));
    /* What `ddphook check` prints is itself a valid job file. */
    ck_assert_int_eq(load(text, &again, &e, path2, sizeof path2), DDPH_OK);
    ck_assert(again.bucket_cap_mb == cfg.bucket_cap_mb);
    ck_assert(again.first_bucket_cap_mb == DDPH_CAP_AUTO);
    free(text);
    ddph__config_free(&cfg);
    ddph__config_free(&again);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("Core");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, full_file);
    tcase_add_test(tc, errors_name_file_and_line);
    tcase_add_test(tc, header_comments_and_bom);
    tcase_add_test(tc, every_error_of_a_file);
    tcase_add_test(tc, numbers_print_as_written);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, sections_nobody_reads);
    tcase_add_test(tc, print_round_trips);
    suite_add_tcase(s, tc);
    TCase *lim = tcase_create("Limits");
    tcase_add_test(lim, long_lines_and_nul_bytes);
    suite_add_tcase(s, lim);
    return s;
}
