/* util.c: see util.h. */
#include "build-config.h"

#include "support/util.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

ddph_status ddph__vfail(ddph_err *err, ddph_status status, const char *fmt,
                        va_list ap)
{
    if (err)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return status;
}

ddph_status ddph__fail(ddph_err *err, ddph_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddph__vfail(err, status, fmt, ap);
    va_end(ap);
    return status;
}

void ddph__err_prefix(ddph_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[512], old[DDPH__ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
}

static const struct {
    const char *name;
    size_t size;
} dtype_table[DDPH_DTYPE_COUNT] = {
    [DDPH_F32] = {"f32", 4},
    [DDPH_F64] = {"f64", 8},
    [DDPH_F16] = {"f16", 2},
    [DDPH_BF16] = {"bf16", 2},
    [DDPH_I32] = {"i32", 4},
    [DDPH_I64] = {"i64", 8},
    [DDPH_U8] = {"u8", 1},
    [DDPH_I8] = {"i8", 1},
};

int ddph__dtype_is_float(ddph_dtype dtype)
{
    return (unsigned)dtype <= DDPH_BF16;
}

size_t ddph__dtype_size(ddph_dtype dtype)
{
    return (unsigned)dtype < DDPH_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

const char *ddph__dtype_name(ddph_dtype dtype)
{
    return (unsigned)dtype < DDPH_DTYPE_COUNT ? dtype_table[dtype].name : "?";
}

int ddph__dtype_parse(const char *s, ddph_dtype *out)
{
    for (int i = 0; i < DDPH_DTYPE_COUNT; i++) {
        if (ddph__dtype_is_float((ddph_dtype)i) &&
            strcmp(s, dtype_table[i].name) == 0) {
            *out = (ddph_dtype)i;
            return 1;
        }
    }
    return 0;
}

const char *ddph__device_name(ddph_device device)
{
    switch (device) {
    case DDPH_CPU:
        return "cpu";
    case DDPH_CUDA:
        return "cuda";
    case DDPH_DEVICE_COUNT:
        break;
    }
    return "?";
}

/* Levenshtein distance, two rows; names are short. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return (size_t)-1;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof cur);
    }
    return prev[lb];
}

const char *ddph__nearest(const char *word, const char *const *candidates,
                          size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    /* A typo changes a few characters; anything further is another word. */
    size_t len = strlen(word);
    size_t limit = len < 5 ? 2 : len / 2;
    return best_d <= limit ? best : NULL;
}

const char *ddph__real_str(double v, char buf[DDPH__REAL_STR_LEN])
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, DDPH__REAL_STR_LEN, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

char *ddph__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

double ddph__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static _Thread_local _Atomic long long *activity_clock;

void ddph__activity_bind(_Atomic long long *clock_us)
{
    activity_clock = clock_us;
}

void ddph__activity_touch(void)
{
    if (activity_clock)
        atomic_store(activity_clock, (long long)(ddph__now() * 1e6));
}

void ddph__chunk(size_t count, int parts, int c, size_t *at, size_t *n)
{
    *at = count * (size_t)c / (size_t)parts;
    *n = count * (size_t)(c + 1) / (size_t)parts - *at;
}

int ddph__thread_short_slice(void)
{
#if defined(SYS_sched_getattr) && defined(SYS_sched_setattr)
    ddph__sched_attr a;
    memset(&a, 0, sizeof a);
    if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0) != 0)
        return errno;
    if (a.policy != SCHED_OTHER && a.policy != SCHED_BATCH)
        return 0; /* real-time or idle: someone chose; leave it */
    a.size = sizeof a;
    a.runtime = DDPH__SHORT_SLICE_NS;
    a.flags |= DDPH__SCHED_RESET_ON_FORK; /* CUDA's, UCX's, a hook's: not */
    return syscall(SYS_sched_setattr, 0, &a, 0) == 0 ? 0 : errno;
#else
    return ENOSYS;
#endif
}

int ddph__majority_record(const int64_t *all, int size, size_t fields,
                          size_t compared)
{
    size_t bytes = compared * sizeof *all;
    int best = 0, most = 0;
    for (int r = 0; r < size && most <= size / 2; r++) {
        int same = 0;
        for (int q = 0; q < size; q++)
            same += memcmp(all + (size_t)q * fields, all + (size_t)r * fields,
                           bytes) == 0;
        if (same > most) {
            most = same;
            best = r;
        }
    }
    return best;
}
