/* util.h: small helpers every runtime module uses: the detailed-error
 * carrier, element sizes and names, and "did you mean" suggestions. */
#ifndef DDPH_UTIL_H
#define DDPH_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <ddphook/status.h>
#include <ddphook/types.h>

/* C++ (the torch backend's torch_ring.cc) reads it too, less what is C's
 * alone. */
#ifdef __cplusplus
extern "C" {
#endif

#define DDPH__ERR_LEN 2048

/* Detailed message of a failure, filled by the function that fails. */
typedef struct ddph_err {
    char msg[DDPH__ERR_LEN];
} ddph_err;

/* Formats the message into err (when not NULL) and returns status. */
ddph_status ddph__fail(ddph_err *err, ddph_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ddph_status ddph__vfail(ddph_err *err, ddph_status status, const char *fmt,
                        va_list ap);
/* Prepends "prefix: " to an existing message. */
void ddph__err_prefix(ddph_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

size_t ddph__dtype_size(ddph_dtype dtype);
const char *ddph__dtype_name(ddph_dtype dtype);
/* f32, f64, f16 or bf16: what gradients, casts and arithmetic take. */
int ddph__dtype_is_float(ddph_dtype dtype);
/* A gradient dtype by name (f32, f64, f16, bf16): 1 when known. */
int ddph__dtype_parse(const char *s, ddph_dtype *out);
const char *ddph__device_name(ddph_device device);

/* The candidate nearest to `word` by edit distance, or NULL when none is
 * close enough to be a plausible typo. */
const char *ddph__nearest(const char *word, const char *const *candidates,
                          size_t n);

/* v with the fewest digits that read back as v ("65536", "0.001",
 * "4294967295", "9.5367431640625e-07"), for ranges in messages. */
#define DDPH__REAL_STR_LEN 32
const char *ddph__real_str(double v, char buf[DDPH__REAL_STR_LEN]);

/* Copies a string; NULL on allocation failure. */
char *ddph__strdup(const char *s);
/* Monotonic seconds. */
double ddph__now(void);

/* Member `index`'s term of a digest of which members of a list take part
 * (the sum of their terms): ranks whose digests agree almost surely have
 * the same members. */
static inline int64_t ddph__digest_term(size_t index)
{
    return (int64_t)(index + 1) * 2654435761LL % 1000003;
}

/* Mixes v into h (splitmix64's finalizer): a digest of a sequence, whose
 * terms cannot cancel out the way sums can, and in which a value moved
 * from one place to another shows. */
static inline uint64_t ddph__mix64(uint64_t h, uint64_t v)
{
    uint64_t z = h + v * 0x9e3779b97f4a7c15ULL + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Of `size` records of `fields` int64 each, the first whose first
 * `compared` fields the most ranks share: the one a mismatch message
 * measures the others against, so that a lone rank 0 is named as the odd
 * one rather than every other rank (the fingerprint checks; size^2). */
int ddph__majority_record(const int64_t *all, int size, size_t fields,
                          size_t compared);

/* A thread's activity clock: a communication lane binds one (in
 * microseconds of ddph__now) for its hook calls, and every bounded wait
 * of the backends touches it while it waits, so that reducer.c's
 * watchdog can tell a hook that waits on a collective (which ends within
 * timeout_s by itself) from one stuck in its own code. */
#ifndef __cplusplus
void ddph__activity_bind(_Atomic long long *clock_us);
#endif
void ddph__activity_touch(void);
/* Asks the kernel to give the calling thread a short time slice (0.1 ms,
 * Linux's sched_setattr for its fair scheduler; custom slices since
 * 6.12).  Its share of the CPU stays what it was; what changes is that
 * the scheduler picks it sooner when it becomes runnable, so a thread
 * that waits on the network in short bursts gets the core without
 * waiting out another thread's slice.  Its nice value and policy are
 * kept, and threads it starts get the default slice (reset on fork).
 * Returns the errno of the call that failed, else 0: also where the
 * thread has a real-time or idle policy (left alone) and where the
 * kernel is older than 6.12 (which accepts and ignores the request). */
int ddph__thread_short_slice(void);
/* struct sched_attr as the kernel reads it (its first version, 48 bytes);
 * glibc 2.36 has no sched_setattr, and later ones may declare the struct. */
typedef struct ddph__sched_attr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
} ddph__sched_attr;
#ifndef __cplusplus
_Static_assert(sizeof(ddph__sched_attr) == 48, "sched_attr version 0");
#endif
#define DDPH__SHORT_SLICE_NS 100000 /* the least the kernel accepts */
#define DDPH__SCHED_RESET_ON_FORK 0x01 /* SCHED_FLAG_RESET_ON_FORK */
/* Chunk c of `count` elements split `parts` ways as evenly as integers
 * allow: elements [*at, *at + *n).  Every rank computes the same split. */
void ddph__chunk(size_t count, int parts, int c, size_t *at, size_t *n);

#ifdef __cplusplus
}
#endif

#endif
