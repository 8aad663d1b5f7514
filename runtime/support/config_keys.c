/* config_keys.c: see config_keys.h. */
#include "build-config.h"

#include "support/config_keys.h"

#include <float.h>
#include <limits.h>

#define AT(field) offsetof(ddph_config, field)
const key_spec ddph__config_keys[] = {
    {.section = "runtime", .key = "backend", .type = K_BACKEND,
     .offset = AT(backend),
     .doc = "auto (the launcher's) | mpi | nccl | a backend module"},
    {.section = "runtime", .key = "bucket_cap_mb", .type = K_REAL,
     .offset = AT(bucket_cap_mb), .min = DDPH_CAP_MIN_MB, .max = DDPH_CAP_MAX_MB,
     .auto_ok = 1, .doc = "bucket size limit in MiB after the first bucket, or auto"},
    {.section = "runtime", .key = "first_bucket_cap_mb", .type = K_REAL,
     .offset = AT(first_bucket_cap_mb), .min = DDPH_CAP_MIN_MB, .max = DDPH_CAP_MAX_MB,
     .auto_ok = 1, .doc = "size limit of bucket 0 in MiB, or auto"},
    {.section = "runtime", .key = "gradient_as_bucket_view", .type = K_BOOL,
     .offset = AT(gradient_as_bucket_view),
     .doc = "gradients live in the runtime's flat bucket storage"},
    {.section = "runtime", .key = "shared_buckets", .type = K_BOOL,
     .offset = AT(shared_buckets),
     .doc = "one-host jobs: buckets in memory every rank maps"},
    {.section = "runtime", .key = "plugin_path", .type = K_STRING,
     .offset = AT(plugin_path), .doc = "':'-separated hook directories"},
    {.section = "runtime", .key = "timeout_s", .type = K_REAL,
     .offset = AT(timeout_s), .min = 0.001, .max = 1e7,
     .doc = "seconds before a stuck collective is reported"},
    {.section = "runtime", .key = "allow_insecure_plugins", .type = K_BOOL,
     .offset = AT(allow_insecure_plugins),
     .doc = "load plugins from files or folders others can write"},
    {.section = "runtime", .key = "allow_insecure_state", .type = K_BOOL,
     .offset = AT(allow_insecure_state),
     .doc = "load hook state files others own or can write"},
    {.section = "runtime", .key = "trace", .type = K_STRING,
     .offset = AT(trace), .doc = "write a Chrome/Perfetto timeline here"},
    {.section = "runtime", .key = "log_stats", .type = K_BOOL,
     .offset = AT(log_stats),
     .doc = "log each model's hook statistics at ddph_close"},
    {.section = "runtime", .key = "check_finite", .type = K_BOOL,
     .offset = AT(check_finite),
     .doc = "report the first NaN/Inf gradient (bucket, parameter)"},
    {.section = "runtime", .key = "check_collectives", .type = K_BOOL,
     .offset = AT(check_collectives),
     .doc = "compare every hook collective across ranks before it runs"},
    {.section = "runtime", .key = "broadcast_parameters", .type = K_BOOL,
     .offset = AT(broadcast_parameters),
     .doc = "rank 0's parameter values to every rank at finalize"},
    {.section = "runtime", .key = "check_replicas_every", .type = K_INT,
     .offset = AT(check_replicas_every), .min = 0, .max = INT_MAX,
     .doc = "compare the ranks' parameters every N synchronised steps"},
    {.section = "runtime", .key = "join", .type = K_BOOL,
     .offset = AT(join),
     .doc = "uneven inputs: ranks out of data (ddph_join) shadow the "
            "others' steps with zero gradients"},
    {.section = "runtime", .key = "divide_by_initial_world_size",
     .type = K_BOOL, .offset = AT(divide_by_initial_world_size),
     .doc = "under join: averages over the initial world size (else over "
            "the ranks still training)"},
    {.section = "runtime", .key = "lanes", .type = K_INT,
     .offset = AT(lanes), .min = 1, .max = DDPH__MAX_LANES,
     .doc = "buckets in flight at once, for hooks that allow it"},
    {.section = "accumulate", .key = "steps", .type = K_INT,
     .offset = AT(accumulate_steps), .min = 1, .max = INT_MAX,
     .doc = "backward passes per synchronisation"},
    {.section = "accumulate", .key = "sync_each_batch", .type = K_BOOL,
     .offset = AT(sync_each_batch),
     .doc = "synchronise every backward pass anyway"},
    {.section = "hook", .key = "name", .type = K_STRING,
     .offset = AT(hook_name), .doc = "hook name along plugin_path or .so path"},
    {.section = "hook", .key = "wrapper", .type = K_WRAPPER,
     .offset = AT(wrapper), .doc = "none | fp16 | bf16"},
};
#undef AT
const size_t ddph__config_nkeys =
    sizeof ddph__config_keys / sizeof ddph__config_keys[0];
