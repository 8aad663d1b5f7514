/* fake.c: hook plugins that are wrong on purpose, one per loader error
 * or broken behaviour (and two that are right: an older minor, and one
 * with options), built
 * from this one file with a FAKE_* macro.  Only the tests load them. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stddef.h>
#include <string.h>

#include <ddphook/plugin.h>
#include <unistd.h>

static ddph_status fake_create(const ddph_services *s, const ddph_options *o,
                               void **state)
{
    (void)s;
    (void)o;
    *state = NULL;
    return DDPH_OK;
}

static void fake_destroy(const ddph_services *s, void *state)
{
    (void)s;
    (void)state;
}

__attribute__((unused)) static ddph_status
fake_on_bucket(void *state, const ddph_bucket *b,
                                  const ddph_services *s)
{
    (void)state;
#ifdef FAKE_FAILING
    /* Fails on bucket 1 only, from iteration 1 on, with a message. */
    if (b->index == 1 && b->iteration >= 1) {
        s->set_error(s, "fake failure on bucket %d at iteration %llu",
                     b->index, (unsigned long long)b->iteration);
        return DDPH_ERR_HOOK;
    }
#endif
#ifdef FAKE_FAILING_LAST_RANK
    /* Only the last rank fails (bucket 1, iteration 1 on), before its
     * collective: its peers are left waiting in theirs. */
    if (s->rank == s->world_size - 1 && b->index == 1 && b->iteration >= 1) {
        s->set_error(s, "fake failure of the last rank on bucket %d",
                     b->index);
        return DDPH_ERR_HOOK;
    }
#endif
#ifdef FAKE_EXTRA_LAST_RANK
    /* The last rank sums its whole bucket once more than its peers (from
     * iteration 1): every rank must hear of it before data moves. */
    if (s->rank == s->world_size - 1 && b->iteration >= 1) {
        ddph_status extra = s->allreduce(s, s->world, b->buffer, b->numel,
                                         b->dtype, DDPH_SUM);
        if (extra != DDPH_OK)
            return extra;
    }
#endif
#ifdef FAKE_COUNT_LAST_RANK
    /* The last rank sums one element fewer than its peers (iteration 1). */
    if (s->rank == s->world_size - 1 && b->iteration >= 1 && b->numel > 1)
        return s->allreduce(s, s->world, b->buffer, b->numel - 1, b->dtype,
                            DDPH_SUM);
#endif
#ifdef FAKE_STACK_REQUEST
    /* A nonblocking allreduce of a 256 KiB array in this frame, never
     * waited for: the host must refuse it when it starts (the frame is
     * gone by the time the host would wait for it). */
    {
        float local[65536];
        memset(local, 0, sizeof local);
        ddph_request *req = NULL;
        ddph_status refused = s->iallreduce(s, s->world, local, 65536,
                                            DDPH_F32, DDPH_SUM, &req);
        if (refused != DDPH_OK)
            return refused;
    }
#endif
#ifdef FAKE_HANGS_LAST_RANK
    /* Only the last rank never returns (bucket 1, iteration 1 on), before
     * its collective: the watchdog of ddph_step_wait must report it. */
    if (s->rank == s->world_size - 1 && b->index == 1 && b->iteration >= 1)
        for (;;)
            pause();
#endif
#if defined(FAKE_ZEROES) || defined(FAKE_ZEROES_EF)
    /* Reduces like allreduce, then returns zeros: a compressor that loses
     * everything.  ddphook-plugin-test must fail it, with or without the
     * error-feedback flag. */
    {
        ddph_status z = s->allreduce(s, s->world, b->buffer, b->numel,
                                     b->dtype, DDPH_SUM);
        size_t es = b->dtype == DDPH_F32 ? 4 : 2;
        return z ? z : s->zero(s, b->buffer, b->numel * es);
    }
#endif
#ifdef FAKE_SCALED_EF
    /* 0.9 of the average, claiming error feedback: a compressor that loses
     * a tenth of every gradient for good.  The tester must fail it. */
    ddph_status st = s->divide(s, b->buffer, b->dtype, b->numel,
                               (double)s->world_size / 0.9);
#else
    ddph_status st = s->divide(s, b->buffer, b->dtype, b->numel,
                               (double)s->world_size);
#endif
#ifdef FAKE_LEAKS_REQUEST
    /* Starts its allreduce without waiting for it: the host must wait for
     * it (the buffer is the bucket's) and fail the call. */
    ddph_request *req;
    return st ? st : s->iallreduce(s, s->world, b->buffer, b->numel, b->dtype,
                                   DDPH_SUM, &req);
#endif
#ifdef FAKE_SHIFTED
    /* Quarters of an f32 bucket: Q1 summed at the same place on every rank
     * (in shared memory on one host), then Q2 on even ranks and Q3 on odd
     * ones: different places, which the host must not sum as one buffer.
     * Q0 is only divided. */
    if (b->dtype != DDPH_F32) {
        s->set_error(s, "shifted: f32 buckets only");
        return DDPH_ERR_INVALID;
    }
    float *f = b->buffer;
    size_t q = b->numel / 4;
    if (st == DDPH_OK)
        st = s->allreduce(s, s->world, f + q, q, b->dtype, DDPH_SUM);
    if (st == DDPH_OK)
        st = s->allreduce(s, s->world, f + (size_t)(2 + s->rank % 2) * q, q,
                          b->dtype, DDPH_SUM);
    return st;
#endif
#ifdef FAKE_POLLS
    /* Polls its allreduce with test() instead of waiting for it: test()
     * must end the collective at timeout_s when a peer never joins. */
    ddph_request *req = NULL;
    if (st == DDPH_OK)
        st = s->iallreduce(s, s->world, b->buffer, b->numel, b->dtype,
                           DDPH_SUM, &req);
    for (int done = 0; st == DDPH_OK && !done;)
        st = s->test(s, req, &done);
    return st;
#endif
    return st ? st : s->allreduce(s, s->world, b->buffer, b->numel, b->dtype,
                                  DDPH_SUM);
}

#ifdef FAKE_WITH_OPTIONS
static const ddph_option_spec fake_options[] = {
    {"rank", DDPH_OPT_INT, "1", 1, 64, "approximation rank"},
    {"ratio", DDPH_OPT_REAL, "0.5", 0, 1, "a ratio"},
    {"enabled", DDPH_OPT_BOOL, "true", 0, 0, "switch"},
    {"label", DDPH_OPT_STRING, "x", 0, 0, "free text"},
    {NULL, 0, NULL, 0, 0, NULL},
};
#elif defined(FAKE_BAD_SCHEMA)
static const ddph_option_spec fake_options[] = {
    {"rank", DDPH_OPT_INT, "100", 1, 64, "default out of range"},
    {NULL, 0, NULL, 0, 0, NULL},
};
#else
#define fake_options NULL
#endif

__attribute__((unused)) static const ddph_plugin_api_v1 fake_plugin = {
#ifdef FAKE_MAJOR_MISMATCH
    .abi_major = 7,
#else
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
#endif
#ifndef FAKE_MINOR1_TABLE
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
#endif
#ifdef FAKE_SMALL_STRUCT
    .struct_size = 12,
#elif defined(FAKE_ZERO_STRUCT)
    .struct_size = 0,
#elif defined(FAKE_OLDER_MINOR)
    /* A table from a minor that ended at on_bucket. */
    .struct_size = offsetof(ddph_plugin_api_v1, on_bucket) + sizeof(void *),
#elif defined(FAKE_MINOR1_TABLE)
    /* A table built against minor 1: it ends at stats. */
    .struct_size = offsetof(ddph_plugin_api_v1, stats) + sizeof(void *),
    .abi_minor = 1,
#else
    .struct_size = sizeof(ddph_plugin_api_v1),
#endif
    .name = "fake",
    .version = "0.0.1",
    .description = "a plugin for loader tests",
    .options = fake_options,
    .create = fake_create,
    .destroy = fake_destroy,
#ifndef FAKE_NULL_MEMBER
    .on_bucket = fake_on_bucket,
#endif
#ifdef FAKE_OLDER_MINOR
    /* Past struct_size: the host must not read this. */
    .on_step_end = (ddph_status(*)(void *, const ddph_step_info *,
                                   const ddph_services *))1,
#endif
#ifdef FAKE_MINOR1_TABLE
    /* The minor-2 members, past struct_size: read as 0 and NULL. */
    .flags = DDPH_PLUGIN_CONCURRENT_BUCKETS,
    .on_layout = (ddph_status(*)(void *, const ddph_layout *,
                                 const ddph_services *))1,
    .tolerance = -5, /* minor 3, past struct_size too: read as 0 */
#endif
#ifdef FAKE_BAD_TOLERANCE
    .tolerance = -1,
#endif
#if defined(FAKE_ZEROES_EF) || defined(FAKE_SCALED_EF)
    .flags = DDPH_PLUGIN_ERROR_FEEDBACK,
#endif
};

#if defined(FAKE_V2_ONLY)
DDPH_PLUGIN_EXPORT const void *ddph_plugin_v2(uint32_t host_minor);
DDPH_PLUGIN_EXPORT const void *ddph_plugin_v2(uint32_t host_minor)
{
    (void)host_minor;
    return &fake_plugin;
}
#elif defined(FAKE_V0_ONLY)
DDPH_PLUGIN_EXPORT const void *ddph_plugin_v0(uint32_t host_minor);
DDPH_PLUGIN_EXPORT const void *ddph_plugin_v0(uint32_t host_minor)
{
    (void)host_minor;
    return &fake_plugin;
}
#elif defined(FAKE_NO_ENTRY)
#include <stdlib.h>
/* Any library's constructor runs inside dlopen: the loader must refuse
 * this file before that (the unit test looks for the variable). */
__attribute__((constructor)) static void fake_constructor(void)
{
    setenv("DDPH_FAKE_CONSTRUCTOR_RAN", "1", 1);
}
DDPH_PLUGIN_EXPORT const void *not_a_hook(void);
DDPH_PLUGIN_EXPORT const void *not_a_hook(void)
{
    return &fake_plugin;
}
#else
#ifdef FAKE_ATTACKER
#include <stdlib.h>
/* Another user's plugin swapped in behind a link: the unit test's race
 * loop checks that this never runs. */
__attribute__((constructor)) static void fake_attacker(void)
{
    setenv("DDPH_FAKE_ATTACKER_RAN", "1", 1);
}
#endif
DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
#ifdef FAKE_DECLINES
    return NULL;
#else
    return &fake_plugin;
#endif
}
#endif
