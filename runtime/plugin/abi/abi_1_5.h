/* abi_1_5.h: the plugin ABI 1.5 as released, written by
 * runtime/plugin/abi/freeze.py 5 efaaa3d; do not edit.  Each struct is
 * plugin.h's as that release shipped it, function pointers as
 * void (*)(void); the asserts hold this tree's plugin.h to it. */
#ifndef DDPH_PLUGIN_ABI_1_5_H
#define DDPH_PLUGIN_ABI_1_5_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

typedef struct ddph_stat_1_5 {
    const char *name;
    double value;
} ddph_stat_1_5;

typedef struct ddph_option_spec_1_5 {
    const char *name;
    ddph_option_type type;
    const char *default_value;
    double min, max;
    const char *doc;
} ddph_option_spec_1_5;

typedef struct ddph_tensor_view_1_5 {
    const char *name;
    size_t offset;
    size_t numel;
    int ndim;
    const int64_t *shape;
} ddph_tensor_view_1_5;

typedef struct ddph_bucket_1_5 {
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
} ddph_bucket_1_5;

typedef struct ddph_layout_1_5 {
    uint32_t struct_size;
    const char *model;
    int nbuckets;
    const ddph_bucket *buckets;
    const ddph_bucket *const *bucket_list;
} ddph_layout_1_5;

typedef struct ddph_param_view_1_5 {
    const char *name;
    void *data;
    size_t numel;
    ddph_dtype dtype;
    ddph_device device;
} ddph_param_view_1_5;

typedef struct ddph_step_info_1_5 {
    uint32_t struct_size;
    uint64_t step;
    uint64_t iteration;
    int synced;
    size_t nparams;
    const ddph_param_view *params;
    const char *model;
} ddph_step_info_1_5;

typedef struct ddph_services_1_5 {
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
} ddph_services_1_5;

typedef struct ddph_plugin_api_v1_1_5 {
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
} ddph_plugin_api_v1_1_5;

_Static_assert(offsetof(ddph_stat, name) == offsetof(ddph_stat_1_5, name),
               "ddph_stat.name moved since ABI 1.5");
_Static_assert(offsetof(ddph_stat, value) == offsetof(ddph_stat_1_5, value),
               "ddph_stat.value moved since ABI 1.5");
_Static_assert(sizeof(ddph_stat) == sizeof(ddph_stat_1_5),
               "ddph_stat is frozen and changed size since ABI 1.5");
_Static_assert(offsetof(ddph_option_spec, name) == offsetof(ddph_option_spec_1_5, name),
               "ddph_option_spec.name moved since ABI 1.5");
_Static_assert(offsetof(ddph_option_spec, type) == offsetof(ddph_option_spec_1_5, type),
               "ddph_option_spec.type moved since ABI 1.5");
_Static_assert(offsetof(ddph_option_spec, default_value) == offsetof(ddph_option_spec_1_5, default_value),
               "ddph_option_spec.default_value moved since ABI 1.5");
_Static_assert(offsetof(ddph_option_spec, min) == offsetof(ddph_option_spec_1_5, min),
               "ddph_option_spec.min moved since ABI 1.5");
_Static_assert(offsetof(ddph_option_spec, max) == offsetof(ddph_option_spec_1_5, max),
               "ddph_option_spec.max moved since ABI 1.5");
_Static_assert(offsetof(ddph_option_spec, doc) == offsetof(ddph_option_spec_1_5, doc),
               "ddph_option_spec.doc moved since ABI 1.5");
_Static_assert(sizeof(ddph_option_spec) == sizeof(ddph_option_spec_1_5),
               "ddph_option_spec is frozen and changed size since ABI 1.5");
_Static_assert(offsetof(ddph_tensor_view, name) == offsetof(ddph_tensor_view_1_5, name),
               "ddph_tensor_view.name moved since ABI 1.5");
_Static_assert(offsetof(ddph_tensor_view, offset) == offsetof(ddph_tensor_view_1_5, offset),
               "ddph_tensor_view.offset moved since ABI 1.5");
_Static_assert(offsetof(ddph_tensor_view, numel) == offsetof(ddph_tensor_view_1_5, numel),
               "ddph_tensor_view.numel moved since ABI 1.5");
_Static_assert(offsetof(ddph_tensor_view, ndim) == offsetof(ddph_tensor_view_1_5, ndim),
               "ddph_tensor_view.ndim moved since ABI 1.5");
_Static_assert(offsetof(ddph_tensor_view, shape) == offsetof(ddph_tensor_view_1_5, shape),
               "ddph_tensor_view.shape moved since ABI 1.5");
_Static_assert(sizeof(ddph_tensor_view) == sizeof(ddph_tensor_view_1_5),
               "ddph_tensor_view is frozen and changed size since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, struct_size) == offsetof(ddph_bucket_1_5, struct_size),
               "ddph_bucket.struct_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, index) == offsetof(ddph_bucket_1_5, index),
               "ddph_bucket.index moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, count) == offsetof(ddph_bucket_1_5, count),
               "ddph_bucket.count moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, is_last) == offsetof(ddph_bucket_1_5, is_last),
               "ddph_bucket.is_last moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, iteration) == offsetof(ddph_bucket_1_5, iteration),
               "ddph_bucket.iteration moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, dtype) == offsetof(ddph_bucket_1_5, dtype),
               "ddph_bucket.dtype moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, device) == offsetof(ddph_bucket_1_5, device),
               "ddph_bucket.device moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, buffer) == offsetof(ddph_bucket_1_5, buffer),
               "ddph_bucket.buffer moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, numel) == offsetof(ddph_bucket_1_5, numel),
               "ddph_bucket.numel moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, ntensors) == offsetof(ddph_bucket_1_5, ntensors),
               "ddph_bucket.ntensors moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, tensors) == offsetof(ddph_bucket_1_5, tensors),
               "ddph_bucket.tensors moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, model) == offsetof(ddph_bucket_1_5, model),
               "ddph_bucket.model moved since ABI 1.5");
_Static_assert(offsetof(ddph_bucket, divided_by) == offsetof(ddph_bucket_1_5, divided_by),
               "ddph_bucket.divided_by moved since ABI 1.5");
_Static_assert(sizeof(ddph_bucket) >= sizeof(ddph_bucket_1_5),
               "ddph_bucket shrank since ABI 1.5");
_Static_assert(offsetof(ddph_layout, struct_size) == offsetof(ddph_layout_1_5, struct_size),
               "ddph_layout.struct_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_layout, model) == offsetof(ddph_layout_1_5, model),
               "ddph_layout.model moved since ABI 1.5");
_Static_assert(offsetof(ddph_layout, nbuckets) == offsetof(ddph_layout_1_5, nbuckets),
               "ddph_layout.nbuckets moved since ABI 1.5");
_Static_assert(offsetof(ddph_layout, buckets) == offsetof(ddph_layout_1_5, buckets),
               "ddph_layout.buckets moved since ABI 1.5");
_Static_assert(offsetof(ddph_layout, bucket_list) == offsetof(ddph_layout_1_5, bucket_list),
               "ddph_layout.bucket_list moved since ABI 1.5");
_Static_assert(sizeof(ddph_layout) >= sizeof(ddph_layout_1_5),
               "ddph_layout shrank since ABI 1.5");
_Static_assert(offsetof(ddph_param_view, name) == offsetof(ddph_param_view_1_5, name),
               "ddph_param_view.name moved since ABI 1.5");
_Static_assert(offsetof(ddph_param_view, data) == offsetof(ddph_param_view_1_5, data),
               "ddph_param_view.data moved since ABI 1.5");
_Static_assert(offsetof(ddph_param_view, numel) == offsetof(ddph_param_view_1_5, numel),
               "ddph_param_view.numel moved since ABI 1.5");
_Static_assert(offsetof(ddph_param_view, dtype) == offsetof(ddph_param_view_1_5, dtype),
               "ddph_param_view.dtype moved since ABI 1.5");
_Static_assert(offsetof(ddph_param_view, device) == offsetof(ddph_param_view_1_5, device),
               "ddph_param_view.device moved since ABI 1.5");
_Static_assert(sizeof(ddph_param_view) == sizeof(ddph_param_view_1_5),
               "ddph_param_view is frozen and changed size since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, struct_size) == offsetof(ddph_step_info_1_5, struct_size),
               "ddph_step_info.struct_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, step) == offsetof(ddph_step_info_1_5, step),
               "ddph_step_info.step moved since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, iteration) == offsetof(ddph_step_info_1_5, iteration),
               "ddph_step_info.iteration moved since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, synced) == offsetof(ddph_step_info_1_5, synced),
               "ddph_step_info.synced moved since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, nparams) == offsetof(ddph_step_info_1_5, nparams),
               "ddph_step_info.nparams moved since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, params) == offsetof(ddph_step_info_1_5, params),
               "ddph_step_info.params moved since ABI 1.5");
_Static_assert(offsetof(ddph_step_info, model) == offsetof(ddph_step_info_1_5, model),
               "ddph_step_info.model moved since ABI 1.5");
_Static_assert(sizeof(ddph_step_info) >= sizeof(ddph_step_info_1_5),
               "ddph_step_info shrank since ABI 1.5");
_Static_assert(offsetof(ddph_services, struct_size) == offsetof(ddph_services_1_5, struct_size),
               "ddph_services.struct_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, abi_minor) == offsetof(ddph_services_1_5, abi_minor),
               "ddph_services.abi_minor moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, rank) == offsetof(ddph_services_1_5, rank),
               "ddph_services.rank moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, world_size) == offsetof(ddph_services_1_5, world_size),
               "ddph_services.world_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, world) == offsetof(ddph_services_1_5, world),
               "ddph_services.world moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, group_rank) == offsetof(ddph_services_1_5, group_rank),
               "ddph_services.group_rank moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, group_size) == offsetof(ddph_services_1_5, group_size),
               "ddph_services.group_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, group_intra_node) == offsetof(ddph_services_1_5, group_intra_node),
               "ddph_services.group_intra_node moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, group_split) == offsetof(ddph_services_1_5, group_split),
               "ddph_services.group_split moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, allreduce) == offsetof(ddph_services_1_5, allreduce),
               "ddph_services.allreduce moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, allgather) == offsetof(ddph_services_1_5, allgather),
               "ddph_services.allgather moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, broadcast) == offsetof(ddph_services_1_5, broadcast),
               "ddph_services.broadcast moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, reduce_scatter) == offsetof(ddph_services_1_5, reduce_scatter),
               "ddph_services.reduce_scatter moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, cast) == offsetof(ddph_services_1_5, cast),
               "ddph_services.cast moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, divide) == offsetof(ddph_services_1_5, divide),
               "ddph_services.divide moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, gemm) == offsetof(ddph_services_1_5, gemm),
               "ddph_services.gemm moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, orthogonalize) == offsetof(ddph_services_1_5, orthogonalize),
               "ddph_services.orthogonalize moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, alloc) == offsetof(ddph_services_1_5, alloc),
               "ddph_services.alloc moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, free) == offsetof(ddph_services_1_5, free),
               "ddph_services.free moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, log) == offsetof(ddph_services_1_5, log),
               "ddph_services.log moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, set_error) == offsetof(ddph_services_1_5, set_error),
               "ddph_services.set_error moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, opt_bool) == offsetof(ddph_services_1_5, opt_bool),
               "ddph_services.opt_bool moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, opt_int) == offsetof(ddph_services_1_5, opt_int),
               "ddph_services.opt_int moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, opt_real) == offsetof(ddph_services_1_5, opt_real),
               "ddph_services.opt_real moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, opt_string) == offsetof(ddph_services_1_5, opt_string),
               "ddph_services.opt_string moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, native_stream) == offsetof(ddph_services_1_5, native_stream),
               "ddph_services.native_stream moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, host) == offsetof(ddph_services_1_5, host),
               "ddph_services.host moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, device) == offsetof(ddph_services_1_5, device),
               "ddph_services.device moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, axpy) == offsetof(ddph_services_1_5, axpy),
               "ddph_services.axpy moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, copy) == offsetof(ddph_services_1_5, copy),
               "ddph_services.copy moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, zero) == offsetof(ddph_services_1_5, zero),
               "ddph_services.zero moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, allgatherv) == offsetof(ddph_services_1_5, allgatherv),
               "ddph_services.allgatherv moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, alltoall) == offsetof(ddph_services_1_5, alltoall),
               "ddph_services.alltoall moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, iallreduce) == offsetof(ddph_services_1_5, iallreduce),
               "ddph_services.iallreduce moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, iallgather) == offsetof(ddph_services_1_5, iallgather),
               "ddph_services.iallgather moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, iallgatherv) == offsetof(ddph_services_1_5, iallgatherv),
               "ddph_services.iallgatherv moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, ialltoall) == offsetof(ddph_services_1_5, ialltoall),
               "ddph_services.ialltoall moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, wait) == offsetof(ddph_services_1_5, wait),
               "ddph_services.wait moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, test) == offsetof(ddph_services_1_5, test),
               "ddph_services.test moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, topk) == offsetof(ddph_services_1_5, topk),
               "ddph_services.topk moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, gather) == offsetof(ddph_services_1_5, gather),
               "ddph_services.gather moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, scatter_add) == offsetof(ddph_services_1_5, scatter_add),
               "ddph_services.scatter_add moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, absmax) == offsetof(ddph_services_1_5, absmax),
               "ddph_services.absmax moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, quantize_int8) == offsetof(ddph_services_1_5, quantize_int8),
               "ddph_services.quantize_int8 moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, dequantize_int8) == offsetof(ddph_services_1_5, dequantize_int8),
               "ddph_services.dequantize_int8 moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, progress) == offsetof(ddph_services_1_5, progress),
               "ddph_services.progress moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, pack_signs) == offsetof(ddph_services_1_5, pack_signs),
               "ddph_services.pack_signs moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, unpack_signs) == offsetof(ddph_services_1_5, unpack_signs),
               "ddph_services.unpack_signs moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, chunk_abs_sum) == offsetof(ddph_services_1_5, chunk_abs_sum),
               "ddph_services.chunk_abs_sum moved since ABI 1.5");
_Static_assert(offsetof(ddph_services, chunk_abs_max) == offsetof(ddph_services_1_5, chunk_abs_max),
               "ddph_services.chunk_abs_max moved since ABI 1.5");
_Static_assert(sizeof(ddph_services) >= sizeof(ddph_services_1_5),
               "ddph_services shrank since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, abi_major) == offsetof(ddph_plugin_api_v1_1_5, abi_major),
               "ddph_plugin_api_v1.abi_major moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, abi_minor) == offsetof(ddph_plugin_api_v1_1_5, abi_minor),
               "ddph_plugin_api_v1.abi_minor moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, struct_size) == offsetof(ddph_plugin_api_v1_1_5, struct_size),
               "ddph_plugin_api_v1.struct_size moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, name) == offsetof(ddph_plugin_api_v1_1_5, name),
               "ddph_plugin_api_v1.name moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, version) == offsetof(ddph_plugin_api_v1_1_5, version),
               "ddph_plugin_api_v1.version moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, description) == offsetof(ddph_plugin_api_v1_1_5, description),
               "ddph_plugin_api_v1.description moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, options) == offsetof(ddph_plugin_api_v1_1_5, options),
               "ddph_plugin_api_v1.options moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, create) == offsetof(ddph_plugin_api_v1_1_5, create),
               "ddph_plugin_api_v1.create moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, destroy) == offsetof(ddph_plugin_api_v1_1_5, destroy),
               "ddph_plugin_api_v1.destroy moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, on_bucket) == offsetof(ddph_plugin_api_v1_1_5, on_bucket),
               "ddph_plugin_api_v1.on_bucket moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, on_step_end) == offsetof(ddph_plugin_api_v1_1_5, on_step_end),
               "ddph_plugin_api_v1.on_step_end moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, save) == offsetof(ddph_plugin_api_v1_1_5, save),
               "ddph_plugin_api_v1.save moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, load) == offsetof(ddph_plugin_api_v1_1_5, load),
               "ddph_plugin_api_v1.load moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, stats) == offsetof(ddph_plugin_api_v1_1_5, stats),
               "ddph_plugin_api_v1.stats moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, flags) == offsetof(ddph_plugin_api_v1_1_5, flags),
               "ddph_plugin_api_v1.flags moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, on_layout) == offsetof(ddph_plugin_api_v1_1_5, on_layout),
               "ddph_plugin_api_v1.on_layout moved since ABI 1.5");
_Static_assert(offsetof(ddph_plugin_api_v1, tolerance) == offsetof(ddph_plugin_api_v1_1_5, tolerance),
               "ddph_plugin_api_v1.tolerance moved since ABI 1.5");
_Static_assert(sizeof(ddph_plugin_api_v1) >= sizeof(ddph_plugin_api_v1_1_5),
               "ddph_plugin_api_v1 shrank since ABI 1.5");

#endif
