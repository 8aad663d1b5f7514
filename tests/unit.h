/* unit.h: the Check suites of tests/check_unit (listed in unit_list.h),
 * and helpers they share. */
#ifndef DDPH_TESTS_UNIT_H
#define DDPH_TESTS_UNIT_H

#include <check.h>

#include "unit_list.h"

#define DDPH_UNIT_DECLARE(name) Suite *name##_suite(void);
DDPH_UNIT_SUITES(DDPH_UNIT_DECLARE)
#undef DDPH_UNIT_DECLARE

/* Writes text to a fresh temporary file; returns its path (static buffer
 * per call site: copy it if two are needed at once). */
const char *unit_write_temp(const char *text, char *path, size_t len);
/* Environment variable that the test harness must set. */
const char *unit_env(const char *name);

#endif
