/* hook.c: see hook.h. */
#include "build-config.h"

#include "plugin/hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/abi_released.h"
#include "plugin/services.h"
#include "support/status_text.h"

ddph_status ddph__hook_create(const ddph_config *cfg, const char *name,
                              int line, ddph_wrapper wrapper, const char *model,
                              ddph_comm comm, ddph_gpu *gpu,
                              const ddph_gpu_ops *gpu_ops,
                              const ddph_logger *log, ddph_hook **out,
                              ddph_err *err)
{
    ddph_hook *h = calloc(1, sizeof *h);
    if (!h || !(h->model = ddph__strdup(model))) {
        free(h);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    h->comm = comm;
    h->model_id = -1;
    h->gpu = gpu;
    h->gpu_ops = gpu_ops;
    h->track = DDPH_TRACK_COMM;
    h->log = log;
    h->wrapper = wrapper;
    ddph_status st = ddph__plugin_load(name, cfg->plugin_path,
                                       cfg->allow_insecure_plugins,
                                       &h->plugin, err);
    if (st != DDPH_OK) {
        if (line > 0) /* where the job file chose it */
            ddph__err_prefix(err, "%s:%d", cfg->path, line);
        goto fail;
    }
    const ddph_plugin_api_v1 *api = &h->plugin->api;
    st = ddph__options_build(api->name, api->options,
                             ddph__config_hook_section(cfg, api->name),
                             cfg->path, &h->options, err);
    if (st != DDPH_OK)
        goto fail;
    snprintf(h->prefix, sizeof h->prefix, "hook '%s' (model '%s'): ",
             api->name, model);
    ddph__services_init(h);
    h->message[0] = '\0';
    st = ddph__hook_status(h, "create",
                           api->create(&h->services, h->options, &h->state));
    if (st != DDPH_OK) {
        /* Where the job file set what create refused: the option its
         * message names, else the hook's section, else the line that
         * chose the hook. */
        const ddph_hook_section *hs = ddph__config_hook_section(cfg, api->name);
        int at = ddph__options_line_named(h->options, h->message);
        if (!at)
            at = hs ? hs->line : line;
        char where[DDPH__ERR_LEN / 2] = "";
        if (at > 0)
            snprintf(where, sizeof where, "%s:%d: ", cfg->path, at);
        st = ddph__fail(err, st < 0 ? st : DDPH_ERR_HOOK,
                        "%shook '%s' (%s): create failed: %s", where,
                        api->name, h->plugin->path,
                        h->message[0] ? h->message : ddph_strerror(st));
        h->state = NULL;
        goto fail;
    }
    *out = h;
    return DDPH_OK;
fail:
    ddph__hook_destroy(h);
    return st;
}

/* The plugin's DDPH_PLUGIN_* flags; 0 for a table that ends before them
 * (the host-sized copy of the table keeps the plugin's struct_size). */
static uint32_t plugin_flags(const ddph_hook *h)
{
    const ddph_plugin_api_v1 *api = &h->plugin->api;
    return DDPH_HAS_MEMBER(api, ddph_plugin_api_v1, flags) ? api->flags : 0;
}

int ddph__hook_concurrent(const ddph_hook *h)
{
    return (plugin_flags(h) & DDPH_PLUGIN_CONCURRENT_BUCKETS) != 0;
}

ddph_status ddph__hook_lane_view(const ddph_hook *h, int lane,
                                 struct ddph_group *world, ddph_hook **out,
                                 ddph_err *err)
{
    ddph_hook *v = malloc(sizeof *v);
    if (!v)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    *v = *h;
    v->is_lane_view = 1;
    v->track = DDPH_TRACK_COMM + lane;
    v->services.world = world;
    v->services.host = v;
    *out = v;
    return DDPH_OK;
}

void ddph__hook_destroy(ddph_hook *h)
{
    if (!h)
        return;
    if (h->is_lane_view) {
        free(h);
        return;
    }
    if (h->plugin && h->state)
        h->plugin->api.destroy(&h->services, h->state);
    ddph__options_free(h->options);
    ddph__plugin_unload(h->plugin);
    free(h->model);
    free(h);
}

ddph_dtype ddph__hook_wire_dtype(const ddph_hook *h, ddph_dtype dtype)
{
    switch (h->wrapper) {
    case DDPH_WRAP_FP16:
        return DDPH_F16;
    case DDPH_WRAP_BF16:
        return DDPH_BF16;
    case DDPH_WRAP_NONE:
        break;
    }
    return dtype;
}

/* The half type the flags ask buckets to be kept in, else dtype. */
static ddph_dtype bucket_dtype_of_flags(uint32_t flags, ddph_dtype dtype)
{
    uint32_t half = flags & (DDPH_PLUGIN_BUCKETS_F16 | DDPH_PLUGIN_BUCKETS_BF16);
    if (half == DDPH_PLUGIN_BUCKETS_F16)
        return DDPH_F16;
    if (half == DDPH_PLUGIN_BUCKETS_BF16)
        return DDPH_BF16;
    return dtype;
}

ddph_dtype ddph__hook_bucket_dtype(const ddph_hook *h, ddph_dtype dtype)
{
    ddph_dtype wire = ddph__hook_wire_dtype(h, dtype);
    return wire != dtype ? wire : bucket_dtype_of_flags(plugin_flags(h), dtype);
}

int ddph__hook_divides_first(const ddph_hook *h, ddph_dtype store_dtype)
{
    uint32_t flags = plugin_flags(h);
    /* A hook that sends a half type divides in it: a bucket of another
     * dtype (a wrapper of the other half type) is cast by the hook before
     * it is divided, which the host must leave to it. */
    return (flags & DDPH_PLUGIN_DIVIDES_FIRST) &&
           bucket_dtype_of_flags(flags, store_dtype) == store_dtype;
}

static int known_status(int st)
{
    switch (st) {
#define DDPH__STATUS_CASE(name, value, msg) case value:
        DDPH_STATUS_MAP(DDPH__STATUS_CASE)
#undef DDPH__STATUS_CASE
        return 1;
    default:
        return 0;
    }
}

ddph_status ddph__hook_status(ddph_hook *h, const char *call, int st)
{
    if (known_status(st))
        return (ddph_status)st;
    snprintf(h->message, sizeof h->message,
             "hook '%s' %s returned %d, which is not a ddph_status "
             "(ddphook/status.h)",
             h->plugin->api.name, call, st);
    return DDPH_ERR_PLUGIN;
}

/* A call that returned with nonblocking requests outstanding: they are
 * waited for (their buffers belong to the bucket), and the call fails. */
static ddph_status settle(ddph_hook *h, const char *call, ddph_status st)
{
    st = ddph__hook_status(h, call, st);
    int left = ddph__services_settle(h);
    /* The fingerprint of the call's last collective (backend_mpi.h): a
     * call whose collectives did not match its peers' fails. */
    ddph_err e;
    const ddph_comm_ops *ops = h->comm.ops;
    ddph_status fs = ops->fingerprint_settle
                         ? ops->fingerprint_settle(h->comm.self, &e)
                         : DDPH_OK;
    if (fs != DDPH_OK && st == DDPH_OK) {
        snprintf(h->message, sizeof h->message, "%s", e.msg);
        return fs;
    }
    if (left && st == DDPH_OK) {
        snprintf(h->message, sizeof h->message,
                 "%s returned with %d nonblocking request%s it never waited "
                 "for (wait for each before returning)",
                 call, left, left == 1 ? "" : "s");
        return DDPH_ERR_STATE;
    }
    return st;
}

ddph_status ddph__hook_on_bucket(ddph_hook *h, ddph_bucket *b, void *scratch,
                                 uint64_t *sent, uint64_t *received,
                                 ddph_err *err)
{
    const ddph_plugin_api_v1 *api = &h->plugin->api;
    h->call_bytes = 0;
    h->call_recv_bytes = 0;
    h->message[0] = '\0';
    ddph_dtype wire = ddph__hook_wire_dtype(h, b->dtype);
    void *grads = b->buffer;
    ddph_dtype grad_dtype = b->dtype;
    ddph_status st;
    /* fp16_compress_wrapper: the inner hook sees a low-precision copy; the
     * result is cast back into the gradients (docs/pytorch-semantics.md
     * §1). */
    const ddph_services *s = &h->services;
    if (wire != b->dtype) {
        st = s->cast(s, grads, grad_dtype, scratch, wire, b->numel, 1.0);
        if (st != DDPH_OK)
            return ddph__fail(err, st, "wrapper cast: %s", h->message);
        b->buffer = scratch;
        b->dtype = wire;
    }
    h->call_bucket = b->index;
    h->call_iteration = (int64_t)b->iteration;
    h->call_buffer = b->buffer;
    h->call_buffer_bytes = b->numel * ddph__dtype_size(b->dtype);
    volatile char frame_mark = 0;
    h->frame_top = (const char *)&frame_mark;
    st = settle(h, "on_bucket", api->on_bucket(h->state, b, s));
    h->frame_top = NULL;
    h->call_buffer = NULL;
    if (st == DDPH_OK && wire != grad_dtype) {
        st = s->cast(s, scratch, wire, grads, grad_dtype, b->numel, 1.0);
        if (st != DDPH_OK)
            ddph__fail(err, st, "wrapper cast back: %s", h->message);
    } else if (st != DDPH_OK)
        ddph__fail(err, st > 0 ? DDPH_ERR_HOOK : st, "%s",
                   h->message[0] ? h->message : "(the hook set no message)");
    b->buffer = grads;
    b->dtype = grad_dtype;
    *sent = h->call_bytes;
    *received = h->call_recv_bytes;
    return st > 0 ? DDPH_ERR_HOOK : st;
}

ddph_status ddph__hook_on_step_end(ddph_hook *h, const ddph_step_info *info,
                                   ddph_err *err)
{
    const ddph_plugin_api_v1 *api = &h->plugin->api;
    if (!api->on_step_end)
        return DDPH_OK;
    h->message[0] = '\0';
    h->call_bucket = -1;
    h->call_iteration = (int64_t)info->step;
    volatile char frame_mark = 0;
    h->frame_top = (const char *)&frame_mark;
    ddph_status st =
        settle(h, "on_step_end", api->on_step_end(h->state, info, &h->services));
    h->frame_top = NULL;
    if (st != DDPH_OK)
        return ddph__fail(err, st > 0 ? DDPH_ERR_HOOK : st,
                          "hook '%s' on_step_end failed on model '%s' (rank "
                          "%d): %s",
                          api->name, h->model, h->services.rank,
                          h->message[0] ? h->message : "(no message)");
    return DDPH_OK;
}

ddph_status ddph__layout_for_plugin(const ddph_layout *layout, size_t stride,
                                    ddph_plugin_layout *out)
{
    size_t n = layout->nbuckets > 0 ? (size_t)layout->nbuckets : 0;
    *out = (ddph_plugin_layout){.view = *layout};
    out->list = calloc(n ? n : 1, sizeof *out->list);
    if (!out->list)
        return DDPH_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        out->list[i] = &layout->buckets[i];
    out->view.struct_size = sizeof out->view;
    out->view.bucket_list = out->list;
    if (stride >= sizeof(ddph_bucket))
        return DDPH_OK;
    /* An older plugin steps through buckets[] by its own, smaller
     * sizeof(ddph_bucket): the leading members of each, its size set. */
    out->packed = calloc(n ? n : 1, stride);
    if (!out->packed) {
        free(out->list);
        return DDPH_ERR_NOMEM;
    }
    uint32_t size = (uint32_t)stride;
    for (size_t i = 0; i < n; i++) {
        unsigned char *at = out->packed + i * stride;
        memcpy(at, &layout->buckets[i], stride);
        memcpy(at + offsetof(ddph_bucket, struct_size), &size, sizeof size);
    }
    out->view.buckets = (const ddph_bucket *)(const void *)out->packed;
    return DDPH_OK;
}

void ddph__layout_for_plugin_free(ddph_plugin_layout *l)
{
    free(l->list);
    free(l->packed);
}

ddph_status ddph__hook_on_layout(ddph_hook *h, const ddph_layout *layout,
                                 ddph_err *err)
{
    const ddph_plugin_api_v1 *api = &h->plugin->api;
    if (!DDPH_HAS_MEMBER(api, ddph_plugin_api_v1, on_layout) || !api->on_layout)
        return DDPH_OK;
    h->message[0] = '\0';
    /* The layout as the plugin's minor reads it (abi_released.h). */
    ddph_plugin_layout shown;
    if (ddph__layout_for_plugin(layout, ddph__abi_bucket_size(api->abi_minor),
                                &shown) != DDPH_OK)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st = settle(
        h, "on_layout", api->on_layout(h->state, &shown.view, &h->services));
    ddph__layout_for_plugin_free(&shown);
    if (st != DDPH_OK)
        return ddph__fail(err, st > 0 ? DDPH_ERR_HOOK : st,
                          "hook '%s' on_layout failed (rank %d): %s",
                          api->name, h->services.rank,
                          h->message[0] ? h->message : "(no message)");
    return DDPH_OK;
}

void ddph__hook_describe(const ddph_hook *h, FILE *out)
{
    const ddph_plugin_api_v1 *api = &h->plugin->api;
    fprintf(out, "hook %s %s wrapper %s\n", api->name, api->version,
            ddph__wrapper_name(h->wrapper));
    /* The build: flags, tolerance and the file's digest; the file's path
     * (after the tab) names it in a difference but is not compared, since
     * hosts may install it in different places. */
    uint32_t flags = plugin_flags(h);
    double tolerance = DDPH_HAS_MEMBER(api, ddph_plugin_api_v1, tolerance)
                           ? api->tolerance
                           : 0;
    fprintf(out, "hook build flags %#x tolerance %.17g crc32 %08x size %llu"
                 "\t(%s)\n",
            flags, tolerance, h->plugin->file_crc,
            (unsigned long long)h->plugin->file_size, h->plugin->path);
    ddph__options_print(h->options, out, "hook option ");
}
