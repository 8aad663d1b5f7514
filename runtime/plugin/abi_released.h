/* abi_released.h: the plugin ABI as released, checked by the compiler.
 *
 * The structs below are ddphook/plugin.h's as release 0.5.1 shipped them
 * (ABI 1.4; tests/abi_1_4/ holds those headers whole), every function
 * pointer written as void (*)(void), which has the same layout.  1.4 is a
 * superset of the other released minors, 1.2 (0.1.0, 0.2.0) and 1.3
 * (0.3.0, 0.4.0): each only appended, so 1.2's tables end before
 * ddph_plugin_api_v1.tolerance and 1.2's and 1.3's services before
 * progress.  1.0 and 1.1 were never released.
 *
 * Every member of a released struct must keep its offset in this tree's
 * plugin.h (DDPH_ABI_KEPT); a frozen struct (no struct_size, handed out in
 * arrays) must keep its size too (DDPH_ABI_FROZEN), and a growable one may
 * only grow (DDPH_ABI_GROWN).  A release that appends to a struct adds a
 * copy here for its minor; nothing here may be edited. */
#ifndef DDPH_PLUGIN_ABI_RELEASED_H
#define DDPH_PLUGIN_ABI_RELEASED_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

typedef struct ddph_option_spec_1_4 {
    const char *name;
    ddph_option_type type;
    const char *default_value;
    double min, max;
    const char *doc;
} ddph_option_spec_1_4;

typedef struct ddph_tensor_view_1_4 {
    const char *name;
    size_t offset;
    size_t numel;
    int ndim;
    const int64_t *shape;
} ddph_tensor_view_1_4;

typedef struct ddph_param_view_1_4 {
    const char *name;
    void *data;
    size_t numel;
    ddph_dtype dtype;
    ddph_device device;
} ddph_param_view_1_4;

typedef struct ddph_stat_1_4 {
    const char *name;
    double value;
} ddph_stat_1_4;

typedef struct ddph_bucket_1_4 {
    uint32_t struct_size;
    int index;
    int count;
    int is_last;
    uint64_t iteration;
    ddph_dtype dtype;
    ddph_device device;
    void *buffer;
    size_t numel;
    size_t ntensors;
    const ddph_tensor_view *tensors;
    const char *model;
    double divided_by;
} ddph_bucket_1_4;

typedef struct ddph_layout_1_4 {
    uint32_t struct_size;
    const char *model;
    int nbuckets;
    const ddph_bucket *buckets;
} ddph_layout_1_4;

typedef struct ddph_step_info_1_4 {
    uint32_t struct_size;
    uint64_t step;
    uint64_t iteration;
    int synced;
    size_t nparams;
    const ddph_param_view *params;
    const char *model;
} ddph_step_info_1_4;

typedef struct ddph_services_1_4 {
    uint32_t struct_size;
    uint32_t abi_minor;
    int rank;
    int world_size;
    ddph_group *world;
    void (*group_rank)(void);
    void (*group_size)(void);
    void (*group_intra_node)(void);
    void (*group_split)(void);
    void (*allreduce)(void);
    void (*allgather)(void);
    void (*broadcast)(void);
    void (*reduce_scatter)(void);
    void (*cast)(void);
    void (*divide)(void);
    void (*gemm)(void);
    void (*orthogonalize)(void);
    void (*alloc)(void);
    void (*free)(void);
    void (*log)(void);
    void (*set_error)(void);
    void (*opt_bool)(void);
    void (*opt_int)(void);
    void (*opt_real)(void);
    void (*opt_string)(void);
    void *native_stream;
    void *host;
    ddph_device device;
    void (*axpy)(void);
    void (*copy)(void);
    void (*zero)(void);
    void (*allgatherv)(void);
    void (*alltoall)(void);
    void (*iallreduce)(void);
    void (*iallgather)(void);
    void (*iallgatherv)(void);
    void (*ialltoall)(void);
    void (*wait)(void);
    void (*test)(void);
    void (*topk)(void);
    void (*gather)(void);
    void (*scatter_add)(void);
    void (*absmax)(void);
    void (*quantize_int8)(void);
    void (*dequantize_int8)(void);
    void (*progress)(void);
    void (*pack_signs)(void);
    void (*unpack_signs)(void);
    void (*chunk_abs_sum)(void);
    void (*chunk_abs_max)(void);
} ddph_services_1_4;

typedef struct ddph_plugin_api_v1_1_4 {
    uint32_t abi_major;
    uint32_t abi_minor;
    uint32_t struct_size;
    const char *name;
    const char *version;
    const char *description;
    const ddph_option_spec *options;
    void (*create)(void);
    void (*destroy)(void);
    void (*on_bucket)(void);
    void (*on_step_end)(void);
    void (*save)(void);
    void (*load)(void);
    void (*stats)(void);
    uint32_t flags;
    void (*on_layout)(void);
    double tolerance;
} ddph_plugin_api_v1_1_4;

#define DDPH_ABI_KEPT(type, member)                                        \
    _Static_assert(offsetof(type, member) == offsetof(type##_1_4, member),  \
                   #type "." #member " moved since ABI 1.4")
#define DDPH_ABI_FROZEN(type)                                               \
    _Static_assert(sizeof(type) == sizeof(type##_1_4),                      \
                   #type " is frozen and changed size since ABI 1.4")
#define DDPH_ABI_GROWN(type)                                                \
    _Static_assert(sizeof(type) >= sizeof(type##_1_4),                      \
                   #type " shrank since ABI 1.4")

DDPH_ABI_KEPT(ddph_option_spec, name);
DDPH_ABI_KEPT(ddph_option_spec, type);
DDPH_ABI_KEPT(ddph_option_spec, default_value);
DDPH_ABI_KEPT(ddph_option_spec, min);
DDPH_ABI_KEPT(ddph_option_spec, max);
DDPH_ABI_KEPT(ddph_option_spec, doc);
DDPH_ABI_FROZEN(ddph_option_spec);
DDPH_ABI_KEPT(ddph_tensor_view, name);
DDPH_ABI_KEPT(ddph_tensor_view, offset);
DDPH_ABI_KEPT(ddph_tensor_view, numel);
DDPH_ABI_KEPT(ddph_tensor_view, ndim);
DDPH_ABI_KEPT(ddph_tensor_view, shape);
DDPH_ABI_FROZEN(ddph_tensor_view);
DDPH_ABI_KEPT(ddph_param_view, name);
DDPH_ABI_KEPT(ddph_param_view, data);
DDPH_ABI_KEPT(ddph_param_view, numel);
DDPH_ABI_KEPT(ddph_param_view, dtype);
DDPH_ABI_KEPT(ddph_param_view, device);
DDPH_ABI_FROZEN(ddph_param_view);
DDPH_ABI_KEPT(ddph_stat, name);
DDPH_ABI_KEPT(ddph_stat, value);
DDPH_ABI_FROZEN(ddph_stat);
DDPH_ABI_KEPT(ddph_bucket, struct_size);
DDPH_ABI_KEPT(ddph_bucket, index);
DDPH_ABI_KEPT(ddph_bucket, count);
DDPH_ABI_KEPT(ddph_bucket, is_last);
DDPH_ABI_KEPT(ddph_bucket, iteration);
DDPH_ABI_KEPT(ddph_bucket, dtype);
DDPH_ABI_KEPT(ddph_bucket, device);
DDPH_ABI_KEPT(ddph_bucket, buffer);
DDPH_ABI_KEPT(ddph_bucket, numel);
DDPH_ABI_KEPT(ddph_bucket, ntensors);
DDPH_ABI_KEPT(ddph_bucket, tensors);
DDPH_ABI_KEPT(ddph_bucket, model);
DDPH_ABI_KEPT(ddph_bucket, divided_by);
DDPH_ABI_GROWN(ddph_bucket);
DDPH_ABI_KEPT(ddph_layout, struct_size);
DDPH_ABI_KEPT(ddph_layout, model);
DDPH_ABI_KEPT(ddph_layout, nbuckets);
DDPH_ABI_KEPT(ddph_layout, buckets);
DDPH_ABI_GROWN(ddph_layout);
DDPH_ABI_KEPT(ddph_step_info, struct_size);
DDPH_ABI_KEPT(ddph_step_info, step);
DDPH_ABI_KEPT(ddph_step_info, iteration);
DDPH_ABI_KEPT(ddph_step_info, synced);
DDPH_ABI_KEPT(ddph_step_info, nparams);
DDPH_ABI_KEPT(ddph_step_info, params);
DDPH_ABI_KEPT(ddph_step_info, model);
DDPH_ABI_GROWN(ddph_step_info);
DDPH_ABI_KEPT(ddph_services, struct_size);
DDPH_ABI_KEPT(ddph_services, abi_minor);
DDPH_ABI_KEPT(ddph_services, rank);
DDPH_ABI_KEPT(ddph_services, world_size);
DDPH_ABI_KEPT(ddph_services, world);
DDPH_ABI_KEPT(ddph_services, group_rank);
DDPH_ABI_KEPT(ddph_services, group_size);
DDPH_ABI_KEPT(ddph_services, group_intra_node);
DDPH_ABI_KEPT(ddph_services, group_split);
DDPH_ABI_KEPT(ddph_services, allreduce);
DDPH_ABI_KEPT(ddph_services, allgather);
DDPH_ABI_KEPT(ddph_services, broadcast);
DDPH_ABI_KEPT(ddph_services, reduce_scatter);
DDPH_ABI_KEPT(ddph_services, cast);
DDPH_ABI_KEPT(ddph_services, divide);
DDPH_ABI_KEPT(ddph_services, gemm);
DDPH_ABI_KEPT(ddph_services, orthogonalize);
DDPH_ABI_KEPT(ddph_services, alloc);
DDPH_ABI_KEPT(ddph_services, free);
DDPH_ABI_KEPT(ddph_services, log);
DDPH_ABI_KEPT(ddph_services, set_error);
DDPH_ABI_KEPT(ddph_services, opt_bool);
DDPH_ABI_KEPT(ddph_services, opt_int);
DDPH_ABI_KEPT(ddph_services, opt_real);
DDPH_ABI_KEPT(ddph_services, opt_string);
DDPH_ABI_KEPT(ddph_services, native_stream);
DDPH_ABI_KEPT(ddph_services, host);
DDPH_ABI_KEPT(ddph_services, device);
DDPH_ABI_KEPT(ddph_services, axpy);
DDPH_ABI_KEPT(ddph_services, copy);
DDPH_ABI_KEPT(ddph_services, zero);
DDPH_ABI_KEPT(ddph_services, allgatherv);
DDPH_ABI_KEPT(ddph_services, alltoall);
DDPH_ABI_KEPT(ddph_services, iallreduce);
DDPH_ABI_KEPT(ddph_services, iallgather);
DDPH_ABI_KEPT(ddph_services, iallgatherv);
DDPH_ABI_KEPT(ddph_services, ialltoall);
DDPH_ABI_KEPT(ddph_services, wait);
DDPH_ABI_KEPT(ddph_services, test);
DDPH_ABI_KEPT(ddph_services, topk);
DDPH_ABI_KEPT(ddph_services, gather);
DDPH_ABI_KEPT(ddph_services, scatter_add);
DDPH_ABI_KEPT(ddph_services, absmax);
DDPH_ABI_KEPT(ddph_services, quantize_int8);
DDPH_ABI_KEPT(ddph_services, dequantize_int8);
DDPH_ABI_KEPT(ddph_services, progress);
DDPH_ABI_KEPT(ddph_services, pack_signs);
DDPH_ABI_KEPT(ddph_services, unpack_signs);
DDPH_ABI_KEPT(ddph_services, chunk_abs_sum);
DDPH_ABI_KEPT(ddph_services, chunk_abs_max);
DDPH_ABI_GROWN(ddph_services);
DDPH_ABI_KEPT(ddph_plugin_api_v1, abi_major);
DDPH_ABI_KEPT(ddph_plugin_api_v1, abi_minor);
DDPH_ABI_KEPT(ddph_plugin_api_v1, struct_size);
DDPH_ABI_KEPT(ddph_plugin_api_v1, name);
DDPH_ABI_KEPT(ddph_plugin_api_v1, version);
DDPH_ABI_KEPT(ddph_plugin_api_v1, description);
DDPH_ABI_KEPT(ddph_plugin_api_v1, options);
DDPH_ABI_KEPT(ddph_plugin_api_v1, create);
DDPH_ABI_KEPT(ddph_plugin_api_v1, destroy);
DDPH_ABI_KEPT(ddph_plugin_api_v1, on_bucket);
DDPH_ABI_KEPT(ddph_plugin_api_v1, on_step_end);
DDPH_ABI_KEPT(ddph_plugin_api_v1, save);
DDPH_ABI_KEPT(ddph_plugin_api_v1, load);
DDPH_ABI_KEPT(ddph_plugin_api_v1, stats);
DDPH_ABI_KEPT(ddph_plugin_api_v1, flags);
DDPH_ABI_KEPT(ddph_plugin_api_v1, on_layout);
DDPH_ABI_KEPT(ddph_plugin_api_v1, tolerance);
DDPH_ABI_GROWN(ddph_plugin_api_v1);

/* The size of ddph_bucket, the stride of ddph_layout.buckets, that a
 * plugin built for ABI minor `minor` indexes with.  Minors 0 and 1 had no
 * divided_by (and no on_layout); 2 to 4 had 1.4's; 5 is this tree's.  A
 * minor that appends to ddph_bucket adds its size here. */
static inline size_t ddph__abi_bucket_size(uint32_t minor)
{
    if (minor <= 1)
        return offsetof(ddph_bucket_1_4, divided_by);
    if (minor <= 4)
        return sizeof(ddph_bucket_1_4);
    return sizeof(ddph_bucket);
}

#endif
