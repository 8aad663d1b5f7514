/* check_unit.c: runs every unit suite (Check, fork mode). */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

const char *unit_write_temp(const char *text, char *path, size_t len)
{
    snprintf(path, len, "/tmp/ddph-unit-XXXXXX.ini");
    int fd = mkstemps(path, 4);
    ck_assert_int_ge(fd, 0);
    size_t n = strlen(text);
    ck_assert_int_eq((int)write(fd, text, n), (int)n);
    close(fd);
    return path;
}

const char *unit_env(const char *name)
{
    const char *v = getenv(name);
    ck_assert_msg(v && *v, "%s is not set (run through make check)", name);
    return v;
}

/* Every suite of unit_list.h, in its order.  Fewer tests than
 * DDPH_UNIT_MIN_TESTS fail a full run: a suite or test case that went
 * missing would otherwise pass by running nothing.  A run narrowed with
 * Check's CK_RUN_SUITE or CK_RUN_CASE (make check-one) is not counted. */
int main(void)
{
    static Suite *(*const suites[])(void) = {
#define DDPH_UNIT_ENTRY(name) name##_suite,
        DDPH_UNIT_SUITES(DDPH_UNIT_ENTRY)
#undef DDPH_UNIT_ENTRY
    };
    SRunner *sr = srunner_create(suites[0]());
    for (size_t i = 1; i < sizeof suites / sizeof suites[0]; i++)
        srunner_add_suite(sr, suites[i]());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), run = srunner_ntests_run(sr);
    srunner_free(sr);
    const char *suite = getenv("CK_RUN_SUITE"), *tcase = getenv("CK_RUN_CASE");
    int narrowed = (suite && *suite) || (tcase && *tcase);
    if (!narrowed && run < DDPH_UNIT_MIN_TESTS) {
        fprintf(stderr, "check_unit: %d tests ran, fewer than the %d of "
                        "tests/unit_list.h's DDPH_UNIT_MIN_TESTS\n",
                run, DDPH_UNIT_MIN_TESTS);
        return EXIT_FAILURE;
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
