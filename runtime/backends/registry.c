/* registry.c: see registry.h.  Adding a backend is a folder of its own
 * and a line in `registry` below. */
#include "build-config.h"

#include "backends/registry.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "support/safe_open.h"

#ifndef DDPH_BACKEND_DIR
#define DDPH_BACKEND_DIR "/usr/local/lib/ddphook/backends"
#endif

/* The MPI backend's table (backends/mpi/mpi_backend.c). */
extern const ddph_backend_ops ddph__mpi_backend;

#ifdef HAVE_NCCL
#define NCCL_HINT                                                              \
    "this ddphook was built with it: is the module installed, with CUDA's "   \
    "libraries and a driver on this machine?"
#else
#define NCCL_HINT "this ddphook was configured without CUDA/NCCL"
#endif

static const ddph_backend_entry registry[] = {
    /* name  kind                  built in            launched by */
    {"mpi", DDPH__BACKEND_JOB, &ddph__mpi_backend,
     "PMI_RANK PMI_SIZE PMIX_RANK OMPI_COMM_WORLD_SIZE", NULL},
    {"nccl", DDPH__BACKEND_DEVICE, NULL, NULL, NCCL_HINT},
    /* Set by the PyTorch bridge once it attached the script's store, and
     * by torchrun; a C trainer under torchrun alone is refused. */
    {"torch", DDPH__BACKEND_JOB, NULL,
     "DDPH_TORCH_ATTACHED TORCHELASTIC_RUN_ID",
     "it is built where configure finds libtorch-dev and pybind11"},
};
enum { NBACKENDS = sizeof registry / sizeof registry[0] };

const ddph_backend_entry *ddph__backend_find(const char *name)
{
    for (int i = 0; name && i < NBACKENDS; i++)
        if (strcmp(registry[i].name, name) == 0)
            return &registry[i];
    return NULL;
}

void ddph__backend_names(char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < NBACKENDS && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "",
                              registry[i].name);
}

/* Whether one of the space-separated variables is set. */
static int any_set(const char *vars)
{
    char name[64];
    while (vars && *vars) {
        size_t len = strcspn(vars, " ");
        if (len > 0 && len < sizeof name) {
            memcpy(name, vars, len);
            name[len] = '\0';
            if (getenv(name))
                return 1;
        }
        vars += len + (vars[len] == ' ');
    }
    return 0;
}

const ddph_backend_entry *ddph__backend_launched(void)
{
    for (int i = 0; i < NBACKENDS; i++)
        if (registry[i].kind == DDPH__BACKEND_JOB &&
            any_set(registry[i].launched_by))
            return &registry[i];
    return &registry[0];
}

/* ---- modules ----------------------------------------------------------- */

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
/* Each module's entry's result, once loaded (deliberately never
 * dlclose'd: CUDA's runtime, for one, cannot be unloaded). */
static const void *loaded[NBACKENDS];

/* The module's entry symbol's result, under load_lock. */
static ddph_status load_locked(const ddph_backend_entry *e,
                               const char *symbol, const void **out,
                               ddph_err *err)
{
    size_t slot = (size_t)(e - registry);
    if (loaded[slot]) {
        *out = loaded[slot];
        return DDPH_OK;
    }
    const char *dir = getenv("DDPH_BACKEND_DIR");
    if (!dir || !*dir)
        dir = DDPH_BACKEND_DIR;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s.so", dir, e->name) >=
        sizeof path)
        return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                          "DDPH_BACKEND_DIR is too long");
    void *dl = NULL;
    ddph_status st = ddph__module_open(path, &dl, err);
    if (st != DDPH_OK) {
        ddph__err_prefix(err, "the %s backend is not available (%s)",
                         e->name,
                         e->missing_hint ? e->missing_hint
                                         : "is its module installed?");
        return st;
    }
    void *sym = dlsym(dl, symbol);
    const void *(*entry)(void) = NULL;
    if (sym)
        memcpy(&entry, &sym, sizeof entry);
    const void *table = entry ? entry() : NULL;
    if (!table)
        return ddph__fail(err, DDPH_ERR_ABI,
                          "backend module %s has no %s table", path, symbol);
    loaded[slot] = table;
    *out = table;
    return DDPH_OK;
}

/* A table's version and size against this library's. */
static ddph_status check_version(const char *name, uint32_t version,
                                 uint32_t size, uint32_t want_version,
                                 size_t want_size, ddph_err *err)
{
    if (version == want_version && size == want_size)
        return DDPH_OK;
    return ddph__fail(err, DDPH_ERR_ABI,
                      "the %s backend module is version %u (%u bytes), this "
                      "libddphook needs version %u (%zu bytes): install the "
                      "module built with this library",
                      name, version, size, want_version, want_size);
}

ddph_status ddph__backend_load_job(const ddph_backend_entry *e,
                                   const ddph_backend_ops **out,
                                   ddph_err *err)
{
    if (e->kind != DDPH__BACKEND_JOB)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "%s is a device backend, not a job backend",
                          e->name);
    if (e->builtin) {
        *out = e->builtin;
        return DDPH_OK;
    }
    const void *table = NULL;
    pthread_mutex_lock(&load_lock);
    ddph_status st =
        load_locked(e, DDPH__BACKEND_MODULE_SYMBOL, &table, err);
    pthread_mutex_unlock(&load_lock);
    const ddph_backend_ops *ops = table;
    if (st == DDPH_OK)
        st = check_version(e->name, ops->version, ops->struct_size,
                           DDPH__BACKEND_VERSION, sizeof *ops, err);
    if (st == DDPH_OK)
        *out = ops;
    return st;
}

ddph_status ddph__backend_load_device(const ddph_backend_entry *e,
                                      const ddph_gpu_ops **out, ddph_err *err)
{
    if (e->kind != DDPH__BACKEND_DEVICE)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "%s is a job backend, not a device backend",
                          e->name);
    const void *table = NULL;
    pthread_mutex_lock(&load_lock);
    ddph_status st = load_locked(e, DDPH__GPU_MODULE_SYMBOL, &table, err);
    pthread_mutex_unlock(&load_lock);
    const ddph_gpu_ops *ops = table;
    if (st == DDPH_OK)
        st = check_version(e->name, ops->version, ops->struct_size,
                           DDPH__GPU_MODULE_VERSION, sizeof *ops, err);
    if (st == DDPH_OK) {
        ddph__dev_use_cuda(ops->device_ops);
        *out = ops;
    }
    return st;
}
