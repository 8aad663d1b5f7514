/* unit.h: the Check suites of tests/check_unit, one per runtime module,
 * and helpers they share. */
#ifndef DDPH_TESTS_UNIT_H
#define DDPH_TESTS_UNIT_H

#include <check.h>

Suite *status_suite(void);
Suite *config_suite(void);
Suite *buckets_suite(void);
Suite *loader_suite(void);
Suite *cpu_ops_suite(void);
Suite *rng_suite(void);
Suite *psgd_cpu_suite(void);
Suite *services_suite(void);
Suite *timeline_suite(void);

/* Writes text to a fresh temporary file; returns its path (static buffer
 * per call site: copy it if two are needed at once). */
const char *unit_write_temp(const char *text, char *path, size_t len);
/* Environment variable that the test harness must set. */
const char *unit_env(const char *name);

#endif
