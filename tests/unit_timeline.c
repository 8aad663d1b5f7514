/* unit_timeline.c: the timeline records spans and instants only when
 * enabled, and a failed job's file says so, escapes the error, and is
 * written the way checkpoints are (a planted link is replaced, never
 * followed). */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/timeline.h"
#include "unit.h"

START_TEST(records_only_when_enabled)
{
    ddph_timeline off, on;
    ddph__timeline_init(&off, 0);
    ddph__timeline_record(&off, DDPH_TRACK_COMM, 0.0, "ignored %d", 1);
    ck_assert_uint_eq(off.n, 0);
    ck_assert(ddph__timeline_now(&off) == 0.0);
    ddph__timeline_free(&off);

    ddph__timeline_init(&on, 1);
    double t0 = ddph__timeline_now(&on);
    ddph__timeline_record(&on, DDPH_TRACK_COMM, t0, "allreduce %d", 7);
    ddph__timeline_record(&on, DDPH_TRACK_COMPUTE, -1, "ready");
    ck_assert_uint_eq(on.n, 2);
    ck_assert_str_eq(on.ev[0].name, "allreduce 7");
    ck_assert_int_eq(on.ev[0].track, DDPH_TRACK_COMM);
    ck_assert(on.ev[0].dur >= 0);         /* a span */
    ck_assert(on.ev[1].dur < 0);          /* an instant */
    ck_assert(on.ev[1].ts >= on.ev[0].ts); /* in recording order */
    /* A name longer than the event's buffer is cut, not overrun. */
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ddph__timeline_record(&on, DDPH_TRACK_COMM, -1, "%s", longname);
    ck_assert_uint_eq(strlen(on.ev[2].name), sizeof on.ev[2].name - 1);
    ddph__timeline_free(&on);
}
END_TEST

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

START_TEST(failed_job_file_is_marked_escaped_and_safe)
{
    char dir[] = "/tmp/ddph-unit-tl-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], file[300], target[300];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    snprintf(file, sizeof file, "%s.rank3", path);
    snprintf(target, sizeof target, "%s/precious", dir);
    /* Someone planted a link where the file goes. */
    FILE *p = fopen(target, "w");
    ck_assert_ptr_nonnull(p);
    fputs("keep me\n", p);
    fclose(p);
    ck_assert_int_eq(symlink(target, file), 0);

    ddph_timeline tl;
    ddph__timeline_init(&tl, 1);
    ddph__timeline_record(&tl, DDPH_TRACK_COMM, 0.0, "bucket 0");
    ddph_err e;
    ck_assert_int_eq(ddph__timeline_write_failed(
                         &tl, 3, path, "rank 1 said \"no\"\nand left", &e),
                     DDPH_OK);
    ddph__timeline_free(&tl);

    struct stat sb;
    ck_assert_int_eq(lstat(file, &sb), 0);
    ck_assert(S_ISREG(sb.st_mode)); /* the link was replaced */
    ck_assert_str_eq(slurp(target), "keep me\n");
    const char *text = slurp(file);
    ck_assert_ptr_nonnull(strstr(text, "\"ended\":\"in failure\""));
    ck_assert_ptr_nonnull(strstr(text, "\"rank\":3"));
    ck_assert_ptr_nonnull(strstr(text, "rank 1 said \\\"no\\\"\\u000aand left"));
    ck_assert_ptr_nonnull(strstr(text, "\"name\":\"bucket 0\""));
    ck_assert_ptr_nonnull(strstr(text, "\"name\":\"job failed\""));
    unlink(file);
    unlink(target);
    rmdir(dir);
}
END_TEST

Suite *timeline_suite(void)
{
    Suite *s = suite_create("timeline");
    TCase *tc = tcase_create("record");
    tcase_add_test(tc, records_only_when_enabled);
    tcase_add_test(tc, failed_job_file_is_marked_escaped_and_safe);
    suite_add_tcase(s, tc);
    return s;
}
