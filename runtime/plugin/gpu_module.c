/* gpu_module.c: see gpu_module.h. */
#include "build-config.h"

#include "plugin/gpu_module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/safe_open.h"

#ifndef DDPH_BACKEND_DIR
#define DDPH_BACKEND_DIR "/usr/local/lib/ddphook/backends"
#endif

#ifdef HAVE_NCCL
static const char built_with_nccl[] =
    "this ddphook was built with it: is the module installed, with CUDA's "
    "libraries and a driver on this machine?";
#else
static const char built_with_nccl[] =
    "this ddphook was configured without CUDA/NCCL";
#endif

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static const ddph_gpu_ops *loaded;

static ddph_status load_locked(const ddph_gpu_ops **out, ddph_err *err)
{
    const char *dir = getenv("DDPH_BACKEND_DIR");
    if (!dir || !*dir)
        dir = DDPH_BACKEND_DIR;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/nccl.so", dir) >= sizeof path)
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "DDPH_BACKEND_DIR is too long");
    void *dl = NULL;
    ddph_status st = ddph__module_open(path, &dl, err);
    if (st != DDPH_OK) {
        ddph__err_prefix(err, "the nccl backend is not available (%s)",
                         built_with_nccl);
        return st;
    }
    void *sym = dlsym(dl, DDPH__GPU_MODULE_SYMBOL);
    ddph_gpu_module_fn entry = NULL;
    if (sym)
        memcpy(&entry, &sym, sizeof entry);
    const ddph_gpu_ops *ops = entry ? entry() : NULL;
    /* Deliberately never dlclose'd: CUDA's runtime cannot be unloaded. */
    if (!ops)
        return ddph__fail(err, DDPH_ERR_ABI,
                          "GPU backend module %s has no %s table", path,
                          DDPH__GPU_MODULE_SYMBOL);
    if (ops->version != DDPH__GPU_MODULE_VERSION ||
        ops->struct_size != sizeof(ddph_gpu_ops))
        return ddph__fail(err, DDPH_ERR_ABI,
                          "GPU backend module %s is version %u (%u bytes), "
                          "this libddphook needs version %u (%zu bytes): "
                          "install the module built with this library",
                          path, ops->version, ops->struct_size,
                          DDPH__GPU_MODULE_VERSION, sizeof(ddph_gpu_ops));
    ddph__dev_use_cuda(ops->device_ops);
    loaded = ops;
    *out = ops;
    return DDPH_OK;
}

ddph_status ddph__gpu_load(const ddph_gpu_ops **out, ddph_err *err)
{
    pthread_mutex_lock(&load_lock);
    ddph_status st = DDPH_OK;
    if (loaded)
        *out = loaded;
    else
        st = load_locked(out, err);
    pthread_mutex_unlock(&load_lock);
    return st;
}
