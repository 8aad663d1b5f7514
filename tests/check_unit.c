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

int main(void)
{
    SRunner *sr = srunner_create(status_suite());
    srunner_add_suite(sr, config_suite());
    srunner_add_suite(sr, buckets_suite());
    srunner_add_suite(sr, loader_suite());
    srunner_add_suite(sr, cpu_ops_suite());
    srunner_add_suite(sr, rng_suite());
    srunner_add_suite(sr, psgd_cpu_suite());
    srunner_add_suite(sr, services_suite());
    srunner_add_suite(sr, timeline_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
