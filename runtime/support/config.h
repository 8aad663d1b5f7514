/* config.h: the job INI ([runtime], [accumulate], [hook], [hook.NAME],
 * [model.NAME]), parsed with the system inih.  Every value is type- and
 * range-checked here; hook options are kept as text with their line numbers
 * and validated later against the plugin's own schema (plugin/options.c).  Every
 * error names the file and line. */
#ifndef DDPH_CONFIG_H
#define DDPH_CONFIG_H

#include <stdio.h>

#include "support/util.h"

/* wrapper = none | fp16 | bf16 */
typedef enum {
    DDPH_WRAP_NONE = 0,
    DDPH_WRAP_FP16 = 1,
    DDPH_WRAP_BF16 = 2,
} ddph_wrapper;

/* One key = value from the file, kept for later validation. */
typedef struct ddph_kv {
    char *key;
    char *value;
    int line;
} ddph_kv;

/* A [hook.NAME] section: options for hook NAME. */
typedef struct ddph_hook_section {
    char *hook;
    int line; /* of its (first) [hook.NAME] header */
    ddph_kv *kv;
    size_t nkv, capkv;
} ddph_hook_section;

/* A [model.NAME] section: per-model overrides (0 / NULL = inherit). */
typedef struct ddph_model_section {
    char *model;
    int line; /* of its (first) [model.NAME] header */
    char *hook;
    int hook_line;
    int wrapper_set;
    ddph_wrapper wrapper;
    int accumulate_steps;
} ddph_model_section;

/* [runtime] allow_insecure_plugins and allow_insecure_state are refused
 * in a job run as root unless this variable of the environment is "1":
 * the operator's word, not the job file's. */
#define DDPH_INSECURE_AS_ROOT_ENV "DDPHOOK_ALLOW_INSECURE_AS_ROOT"

/* [runtime] lanes: at most this many communication threads. */
#define DDPH__MAX_LANES 8
/* Models named in the collectives' fingerprint messages (more are
 * numbered). */
#define DDPH__MAX_NAMED_MODELS 64

/* [runtime] timeout_s when the job file does not set it. */
#define DDPH__DEFAULT_TIMEOUT_S 600.0

/* bucket_cap_mb = auto: each model's caps come from its gradient bytes
 * (ddph__bucket_limits in core/buckets.h). */
#define DDPH_CAP_AUTO 0.0
/* The range of a bucket cap given as a number, in MiB (8 bytes to 64 GiB). */
#define DDPH_CAP_MIN_MB (1.0 / (1 << 20))
#define DDPH_CAP_MAX_MB 65536.0

typedef struct ddph_config {
    char *path; /* "(defaults)" when no file */

    /* [runtime] */
    /* A backend's name (the registry, backends/registry.c, knows which
     * exist), or "auto": the launcher's. */
    char backend[32];
    int backend_line; /* 0 = default */
    double bucket_cap_mb;       /* MiB, or DDPH_CAP_AUTO */
    double first_bucket_cap_mb; /* MiB, or DDPH_CAP_AUTO */
    int gradient_as_bucket_view;
    int shared_buckets; /* one-host jobs: buckets in shared memory */
    char *plugin_path; /* ':'-separated directories */
    double timeout_s;
    int allow_insecure_plugins;
    int allow_insecure_state;
    char *trace; /* Chrome/Perfetto timeline file, or NULL */
    int check_finite;
    int log_stats; /* each model's hook statistics logged at close */
    int lanes; /* communication threads, each with its own communicator */
    int broadcast_parameters; /* rank 0's parameter values at finalize */
    int check_collectives;    /* fingerprints of the hooks' collectives */
    int check_replicas_every; /* synchronised steps; 0 = never */
    int join;                 /* ranks out of data shadow the others */
    int divide_by_initial_world_size; /* under join: W, or the ranks
                                         still training */

    /* [accumulate] */
    int accumulate_steps;
    int sync_each_batch;

    /* [hook] */
    char *hook_name; /* a name along plugin_path, or a path to a .so */
    int hook_line;   /* 0 = default */
    ddph_wrapper wrapper;

    ddph_hook_section *hook_sections;
    size_t nhook_sections;
    ddph_model_section *models;
    size_t nmodels;
} ddph_config;

/* Fills cfg with every default (no file). */
ddph_status ddph__config_defaults(ddph_config *cfg, ddph_err *err);
/* Parses the job INI at path on top of the defaults.  On failure cfg is
 * freed and err names file and line. */
ddph_status ddph__config_load(const char *path, ddph_config *cfg,
                              ddph_err *err);

/* For `ddphook check`: parses as ddph__config_load does, but hands every
 * error, a full "FILE:LINE: message" line, to each_error(user, line, msg)
 * as it is found (no limit on their number), and keeps in *cfg whatever
 * did parse (free it with ddph__config_free).  Returns how many errors,
 * or -1 when the file cannot be read at all or memory ran out (cfg is
 * then freed and err says why). */
typedef void (*ddph_config_error_fn)(void *user, int line, const char *msg);
int ddph__config_load_all(const char *path, ddph_config *cfg,
                          ddph_config_error_fn each_error, void *user,
                          ddph_err *err);

/* Writes "key = value" and a newline for a job file of the runtime's own
 * (ddphook bench, the plugin tester): a value longer than a job file's
 * line goes on continuation lines, split after a '/' or ':' (never at a
 * space, which inih would strip).  0 on a write error. */
int ddph__config_write_kv(FILE *f, const char *key, const char *value);
/* The same from an open stream; `name` is used in messages and to
 * resolve relative paths. */
ddph_status ddph__config_parse(FILE *f, const char *name, ddph_config *cfg,
                               ddph_err *err);
void ddph__config_free(ddph_config *cfg);

/* The [hook.NAME] section for `hook`, or NULL. */
const ddph_hook_section *ddph__config_hook_section(const ddph_config *cfg,
                                                   const char *hook);
/* The [model.NAME] section for `model`, or NULL. */
const ddph_model_section *ddph__config_model(const ddph_config *cfg,
                                             const char *model);

/* Writes the resolved configuration as an INI (defaults filled in). */
void ddph__config_print(const ddph_config *cfg, FILE *out);

const char *ddph__wrapper_name(ddph_wrapper w);

/* Value parsers shared with plugin/options.c; 1 on success. */
int ddph__parse_bool(const char *s, int *out);
int ddph__parse_int(const char *s, int64_t *out);
int ddph__parse_real(const char *s, double *out);

#endif
