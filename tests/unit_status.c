/* unit_status.c: status names and messages come from the one table; the
 * version macros are the release's. */
#include "build-config.h"

#include <stdio.h>
#include <string.h>

#include <ddphook/ddphook.h>

#include "plugin/hook.h"
#include "unit.h"

START_TEST(every_code_has_name_and_message)
{
    static const ddph_status all[] = {
#define X(name, value, msg) DDPH_##name,
        DDPH_STATUS_MAP(X)
#undef X
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        ck_assert_str_ne(ddph_strerror(all[i]), "unknown status");
        ck_assert_int_eq(strncmp(ddph_status_name(all[i]), "DDPH_", 5), 0);
        ck_assert(all[i] <= 0);
    }
    ck_assert_str_eq(ddph_strerror(DDPH_OK), "success");
    ck_assert_str_eq(ddph_status_name(DDPH_ERR_TIMEOUT), "DDPH_ERR_TIMEOUT");
    ck_assert_str_eq(ddph_strerror((ddph_status)-999), "unknown status");
}
END_TEST

/* <ddphook/version.h> is generated from configure's AC_INIT, as are
 * `ddphook version` and pkg-config's version (PACKAGE_VERSION). */
START_TEST(version_macros_are_the_release)
{
    char composed[64];
    snprintf(composed, sizeof composed, "%d.%d.%d", DDPH_VERSION_MAJOR,
             DDPH_VERSION_MINOR, DDPH_VERSION_PATCH);
    ck_assert_str_eq(DDPH_VERSION_STRING, PACKAGE_VERSION);
    ck_assert_str_eq(composed, PACKAGE_VERSION);
}
END_TEST

/* A hook's status outside the table is the plugin's fault, said with the
 * hook, the call and the value; the table's own pass through. */
START_TEST(hook_status_outside_the_abi)
{
    ddph_plugin plugin = {.api = {.name = "fake"}};
    ddph_hook hook = {.plugin = &plugin};
    ck_assert_int_eq(ddph__hook_status(&hook, "on_bucket", -12345),
                     DDPH_ERR_PLUGIN);
    ck_assert_str_eq(hook.message, "hook 'fake' on_bucket returned -12345, "
                                   "which is not a ddph_status "
                                   "(ddphook/status.h)");
    ck_assert_int_eq(ddph__hook_status(&hook, "save", 7), DDPH_ERR_PLUGIN);
    ck_assert_int_eq(ddph__hook_status(&hook, "load", DDPH_ERR_IO),
                     DDPH_ERR_IO);
    ck_assert_int_eq(ddph__hook_status(&hook, "create", DDPH_OK), DDPH_OK);
}
END_TEST

Suite *status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("Core");
    tcase_add_test(tc, every_code_has_name_and_message);
    tcase_add_test(tc, version_macros_are_the_release);
    tcase_add_test(tc, hook_status_outside_the_abi);
    suite_add_tcase(s, tc);
    return s;
}
