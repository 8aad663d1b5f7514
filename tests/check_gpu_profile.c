/* check_gpu_profile.c: the GPU profile `ddphook bench gpu --profile`
 * writes and `ddphook plan --device-profile` reads (cli/gpu_profile.h),
 * without a GPU: what bench gpu fills in, written by the function it
 * calls and read back the same to the bit; every line of it changed in
 * a hostile way is refused at its line. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli/gpu_profile.h"

/* A profile as bench gpu fills one in on two GPUs of one host. */
static gpu_profile bench_like(void)
{
    gpu_profile p;
    memset(&p, 0, sizeof p);
    snprintf(p.device, sizeof p.device, "NVIDIA H100 80GB HBM3");
    p.ranks = 2;
    p.per_host = 2;
    p.mib = 64;
    p.copy_bytes_per_s = 2.0 * 64 * 1048576 / 4.3e-5;
    for (int i = 0; i < GPU_PROFILE_CASTS; i++)
        p.cast_seconds[i] = (1.0 + i / 3.0) * 1e-12;
    p.allreduce_bus_bytes_per_s = 3.61e11 / 3;
    const char *hooks[] = {"allreduce", "fp16", "powersgd", "./my_hook.so"};
    for (int i = 0; i < 4; i++) {
        snprintf(p.hooks[i].name, sizeof p.hooks[i].name, "%s", hooks[i]);
        p.hooks[i].seconds_per_byte = 1.0 / (7e11 + i * 1.1e9);
    }
    p.nhooks = 4;
    return p;
}

static char path[64];

static void write_text(const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static void setup(void)
{
    snprintf(path, sizeof path, "/tmp/check_gpu_profile.%d", (int)getpid());
}

static void teardown(void) { unlink(path); }

START_TEST(round_trip_to_the_bit)
{
    gpu_profile w = bench_like(), r;
    char msg[4096];
    ck_assert_msg(gpu_profile_save(path, &w, msg, sizeof msg), "%s", msg);
    ck_assert_msg(gpu_profile_load(path, &r, msg, sizeof msg), "%s", msg);
    ck_assert_str_eq(r.device, w.device);
    ck_assert_int_eq(r.ranks, 2);
    ck_assert_int_eq(r.per_host, 2);
    ck_assert(r.mib == w.mib && r.copy_bytes_per_s == w.copy_bytes_per_s);
    ck_assert(r.allreduce_bus_bytes_per_s == w.allreduce_bus_bytes_per_s);
    for (int i = 0; i < GPU_PROFILE_CASTS; i++)
        ck_assert(r.cast_seconds[i] == w.cast_seconds[i]);
    ck_assert_int_eq(r.nhooks, w.nhooks);
    for (int i = 0; i < w.nhooks; i++) {
        const gpu_profile_hook *h = gpu_profile_find(&r, w.hooks[i].name);
        ck_assert_ptr_nonnull(h);
        ck_assert(h->seconds_per_byte == w.hooks[i].seconds_per_byte);
    }
    ck_assert_ptr_null(gpu_profile_find(&r, "int8"));
}
END_TEST

/* The saved text with line `line` (1-based) replaced by `with` (NULL:
 * removed); refused, naming that line or the one given. */
static void refused(int line, const char *with, int at, const char *why)
{
    gpu_profile w = bench_like(), r;
    char msg[4096], text[8192] = "", want[256];
    ck_assert(gpu_profile_save(path, &w, msg, sizeof msg));
    FILE *f = fopen(path, "r");
    char buf[1024];
    for (int n = 1; fgets(buf, sizeof buf, f); n++) {
        if (n != line)
            strcat(text, buf);
        else if (with)
            strcat(text, with);
    }
    fclose(f);
    write_text(text);
    ck_assert_msg(!gpu_profile_load(path, &r, msg, sizeof msg),
                  "line %d as '%s' accepted", line, with ? with : "(none)");
    snprintf(want, sizeof want, "%s:%d: ", path, at);
    ck_assert_msg(strstr(msg, want) && strstr(msg, why),
                  "line %d: '%s', want '%s' and '%s'", line, msg, want, why);
}

START_TEST(hostile_lines_refused_at_their_line)
{
    refused(1, "ddphook-gpu-profile 2\n", 1, "not a GPU profile");
    refused(2, "device NVIDIA\tH100\n", 2, "want: device NAME");
    refused(2, "device\n", 2, "want: device NAME");
    refused(3, "ranks 3 2\n", 3, "PER_HOST dividing W");
    refused(3, "ranks 2 2 2\n", 3, "want: ranks");
    refused(4, "mib 0\n", 4, "want: mib N");
    refused(5, "copy nan\n", 5, "want: copy BYTES_PER_S");
    refused(5, "copy 1e300\n", 5, "want: copy BYTES_PER_S");
    refused(6, "cast f16_to_f32 1e-12\n", 6, "want: cast f32_to_f16");
    refused(9, NULL, 9, "3 cast lines where there are 4");
    refused(6, NULL, 6, "want: cast f32_to_f16");
    refused(10, "allreduce -1\n", 10, "want: allreduce");
    refused(11, "hook rm\\ -rf 1e-12\n", 11, "want: hook NAME");
    refused(12, "hook allreduce 1e-12\n", 12, "hook allreduce a second time");
    refused(13, "hook powersgd inf\n", 13, "want: hook NAME SECONDS_PER_BYTE");
    refused(15, "end 3\n", 15, "the end line counts 3");
    refused(15, NULL, 15, "no end line: truncated");
    refused(15, "end 4\nhook int8 1e-12\n", 16, "out of place");
    refused(4, "copy 1e9\n", 5, "out of place");
    refused(7, "unknown 1\n", 7, "unknown line 'unknown'");
}
END_TEST

START_TEST(truncated_and_binary_refused)
{
    gpu_profile r;
    char msg[4096];
    write_text("ddphook-gpu-profile 1\ndevice X\nranks 1 1");
    ck_assert(!gpu_profile_load(path, &r, msg, sizeof msg));
    ck_assert_msg(strstr(msg, ":3: no newline at the end"), "%s", msg);
    FILE *f = fopen(path, "w");
    fwrite("ddphook-gpu-profile 1\n\0\n", 1, 24, f);
    fclose(f);
    ck_assert(!gpu_profile_load(path, &r, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "a NUL byte"), "%s", msg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_profile");
    TCase *tc = tcase_create("Core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip_to_the_bit);
    tcase_add_test(tc, hostile_lines_refused_at_their_line);
    tcase_add_test(tc, truncated_and_binary_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
