/* unit_config.c: the job INI: defaults, values, and every error naming
 * file and line. */
#include "build-config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
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
    ck_assert(cfg.bucket_cap_mb == 25.0);
    ck_assert(cfg.first_bucket_cap_mb == 1.0);
    ck_assert(cfg.timeout_s == 600.0);
    ck_assert_int_eq(cfg.accumulate_steps, 1);
    ck_assert_str_eq(cfg.hook_name, "allreduce");
    ck_assert_int_eq(cfg.wrapper, DDPH_WRAP_NONE);
    ck_assert_int_eq(cfg.backend, DDPH_BACKEND_MPI);
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
                 "bucket_cap_mb = 'lots' is not a number");
    expect_error("[runtime]\n\ntimeout_s = -1\n", DDPH_ERR_CONFIG, 3,
                 "out of range");
    expect_error("[runtime]\nbucket_cap_mp = 4\n", DDPH_ERR_CONFIG, 2,
                 "unknown key 'bucket_cap_mp' in [runtime]; did you mean "
                 "'bucket_cap_mb'?");
    expect_error("[runtim]\nbackend = mpi\n", DDPH_ERR_CONFIG, 2,
                 "unknown section [runtim]; did you mean [runtime]?");
    expect_error("[runtime]\nbackend = gloo\n", DDPH_ERR_CONFIG, 2,
                 "'gloo' is not mpi or nccl");
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
}
END_TEST

START_TEST(long_lines_and_nul_bytes)
{
    char text[600];
    memset(text, 0, sizeof text);
    strcpy(text, "[runtime]\nplugin_path = ");
    size_t n = strlen(text);
    memset(text + n, 'a', 400);
    strcpy(text + n + 400, "\n");
    expect_error(text, DDPH_ERR_CONFIG, 2, "line longer than");

    /* A NUL byte cannot go through the helper's strlen: write it here. */
    char path[] = "/tmp/ddph-unit-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq((int)write(fd, "[runtime]\ntime\0out_s = 1\n", 25), 25);
    close(fd);
    ddph_config cfg;
    ddph_err e;
    ck_assert_int_eq(ddph__config_load(path, &cfg, &e), DDPH_ERR_CONFIG);
    unlink(path);
    ck_assert_msg(strstr(e.msg, ":2: NUL byte"), "%s", e.msg);
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
    /* What `ddphook check` prints is itself a valid job file. */
    ck_assert_int_eq(load(text, &again, &e, path2, sizeof path2), DDPH_OK);
    ck_assert(again.bucket_cap_mb == cfg.bucket_cap_mb);
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
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, print_round_trips);
    suite_add_tcase(s, tc);
    TCase *lim = tcase_create("Limits");
    tcase_add_test(lim, long_lines_and_nul_bytes);
    suite_add_tcase(s, lim);
    return s;
}
