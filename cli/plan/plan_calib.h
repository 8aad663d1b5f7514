/* plan_calib.h: the calibration file of `ddphook plan` (docs/plan.md):
 * what this machine's arithmetic costs, measured once and kept.
 *
 *   ddphook-plan-calibration 2
 *   conditions LOAD CPUS           what the sums below were measured at
 *   add_f32 SECONDS_PER_BYTE       a += b over f32
 *   add_half SECONDS_PER_BYTE      the same over f16
 *   scatter SECONDS_PER_ELEMENT    y[idx[j]] += v[j]
 *   hook NAME KEY SECONDS LOAD CPUS  a hook's step at one rank on one
 *                                  model, and the load average and CPUs
 *                                  it was measured at
 *   end COUNT                      the number of hook lines
 *
 * KEY (16 hex digits) names the model's shapes, bucket caps and hook
 * options the hook was measured with.  A file that is not exactly this
 * (an unknown line, a value out of range, a missing end line: a
 * truncated file) is refused with its file and line, never half read. */
#ifndef DDPH_CLI_PLAN_CALIB_H
#define DDPH_CLI_PLAN_CALIB_H

#include <stddef.h>
#include <stdint.h>

/* What a measurement was taken under: the 1-minute load average (-1:
 * unknown) and the CPUs online. */
typedef struct plan_conditions {
    double load;
    int cpus;
} plan_conditions;

/* Busy by default: at least this many runnable tasks a CPU (the 1-minute
 * load average), so a measured step is slower than the machine's own
 * (`ddphook plan --busy-load`). */
#define PLAN_BUSY_LOAD 0.75

plan_conditions plan_conditions_now(void);
/* The load was known and at least busy_load runnable tasks a CPU. */
int plan_conditions_busy(plan_conditions at, double busy_load);

typedef struct plan_calib_hook {
    char name[128];
    uint64_t key;
    double seconds;
    plan_conditions at;
} plan_calib_hook;

typedef struct plan_calib {
    double add_f32, add_half, scatter;
    plan_conditions machine_at;
    int have_machine; /* the three above were measured */
    plan_calib_hook *hooks;
    int nhooks, cap;
} plan_calib;

/* Reads `path` into *c (zeroed first).  1: read; 0: no such file (an
 * empty calibration); -1: refused, the reason in msg. */
int plan_calib_load(const char *path, plan_calib *c, char *msg, size_t cap);
/* Replaces `path` (atomically); 0 with the reason in msg. */
int plan_calib_save(const char *path, const plan_calib *c, char *msg,
                    size_t cap);
/* The entry of `name` measured with `key`, or NULL. */
const plan_calib_hook *plan_calib_find(const plan_calib *c, const char *name,
                                       uint64_t key);
/* Adds or replaces an entry; 0 when out of memory or the name is not a
 * hook name (letters, digits, . _ / -, under 128 characters). */
int plan_calib_put(plan_calib *c, const char *name, uint64_t key,
                   double seconds, plan_conditions at);
/* Times f32 and f16 sums and a scatter-add on this machine. */
void plan_calib_measure_machine(plan_calib *c);
void plan_calib_free(plan_calib *c);

/* FNV-1a, for keys: h = plan_hash(h, data, len), h starting at 0. */
uint64_t plan_hash(uint64_t h, const void *data, size_t len);

#endif
