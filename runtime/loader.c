/* loader.c: see loader.h. */
#include "build-config.h"

#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "options.h"

/* Majors the loader can explain but not load; raise when v2 exists. */
#define NEWEST_MAJOR_TO_PROBE 9

ddph_status ddph__plugin_resolve(const char *name_or_path,
                                 const char *plugin_path, char **path_out,
                                 ddph_err *err)
{
    struct stat sb;
    if (strchr(name_or_path, '/')) {
        if (stat(name_or_path, &sb) != 0)
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "hook plugin %s: %s (path tried: %s)",
                              name_or_path, strerror(errno), name_or_path);
        *path_out = ddph__strdup(name_or_path);
        return *path_out ? DDPH_OK
                         : ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    for (const char *c = name_or_path; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || (*c >= 'A' && *c <= 'Z')))
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "hook name '%s' has characters other than "
                              "letters, digits, '_' and '-' (give a path "
                              "with a '/' to load a file)",
                              name_or_path);
    char tried[DDPH__ERR_LEN / 2] = "";
    char *dirs = ddph__strdup(plugin_path ? plugin_path : "");
    if (!dirs)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        size_t n = strlen(d) + strlen(name_or_path) + 5;
        char *cand = malloc(n);
        if (!cand) {
            free(dirs);
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        }
        snprintf(cand, n, "%s/%s.so", d, name_or_path);
        if (stat(cand, &sb) == 0) {
            free(dirs);
            *path_out = cand;
            return DDPH_OK;
        }
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "",
                 cand);
        free(cand);
    }
    free(dirs);
    return ddph__fail(err, DDPH_ERR_PLUGIN,
                      "hook '%s' not found; paths tried: %s (set "
                      "[runtime] plugin_path, or give [hook] name as a path)",
                      name_or_path, tried[0] ? tried : "(plugin_path is empty)");
}

static ddph_status check_secure(const char *path, ddph_err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ddph__fail(err, DDPH_ERR_PLUGIN, "hook plugin %s: %s", path,
                          strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ddph__fail(err, DDPH_ERR_PLUGIN,
                          "hook plugin %s is not a regular file", path);
    if (sb.st_mode & S_IWOTH)
        return ddph__fail(err, DDPH_ERR_INSECURE,
                          "refusing hook plugin %s: the file is writable by "
                          "other users (chmod o-w it, or set [runtime] "
                          "allow_insecure_plugins = true)",
                          path);
    char *copy = ddph__strdup(path);
    if (!copy)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    const char *dir = dirname(copy);
    ddph_status st = DDPH_OK;
    if (stat(dir, &sb) == 0 && (sb.st_mode & S_IWOTH))
        st = ddph__fail(err, DDPH_ERR_INSECURE,
                        "refusing hook plugin %s: its folder %s is writable "
                        "by other users, who could replace it (chmod o-w the "
                        "folder, or set [runtime] allow_insecure_plugins = "
                        "true)",
                        path, dir);
    free(copy);
    return st;
}

/* Validates the copied table; the message names the plugin file. */
static ddph_status check_table(const ddph_plugin *p, ddph_err *err)
{
    const ddph_plugin_api_v1 *a = &p->api;
    if (a->abi_major != DDPH_PLUGIN_ABI_MAJOR)
        return ddph__fail(err, DDPH_ERR_ABI,
                          "hook plugin %s: %s returned a table of ABI major "
                          "%u; this host supports major %u",
                          p->path, DDPH_PLUGIN_ENTRY_V1, a->abi_major,
                          DDPH_PLUGIN_ABI_MAJOR);
    if (p->plugin_size < DDPH__PLUGIN_V1_MIN_SIZE)
        return ddph__fail(err, DDPH_ERR_ABI,
                          "hook plugin %s: struct_size %u is smaller than "
                          "the %zu bytes every v1 table must have (up to "
                          "on_bucket)",
                          p->path, p->plugin_size,
                          (size_t)DDPH__PLUGIN_V1_MIN_SIZE);
    static const struct {
        const char *name;
        size_t offset;
    } required[] = {
        {"name", offsetof(ddph_plugin_api_v1, name)},
        {"version", offsetof(ddph_plugin_api_v1, version)},
        {"description", offsetof(ddph_plugin_api_v1, description)},
        {"create", offsetof(ddph_plugin_api_v1, create)},
        {"destroy", offsetof(ddph_plugin_api_v1, destroy)},
        {"on_bucket", offsetof(ddph_plugin_api_v1, on_bucket)},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        void *member;
        memcpy(&member, (const char *)a + required[i].offset, sizeof member);
        if (!member)
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "hook plugin %s: required member '%s' is NULL",
                              p->path, required[i].name);
    }
    if ((a->save == NULL) != (a->load == NULL))
        return ddph__fail(err, DDPH_ERR_PLUGIN,
                          "hook plugin %s: 'save' and 'load' must both be set "
                          "or both be NULL",
                          p->path);
    return ddph__options_check_schema(a->name, a->options, err);
}

ddph_status ddph__plugin_load(const char *name_or_path,
                              const char *plugin_path, int allow_insecure,
                              ddph_plugin **out, ddph_err *err)
{
    char *path = NULL;
    ddph_status st = ddph__plugin_resolve(name_or_path, plugin_path, &path, err);
    if (st != DDPH_OK)
        return st;
    if (!allow_insecure && (st = check_secure(path, err)) != DDPH_OK) {
        free(path);
        return st;
    }
    ddph_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        free(path);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    p->path = path;
    dlerror();
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *why = dlerror();
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s: dlopen failed: %s", path,
                        why ? why : "unknown error");
        goto fail;
    }
    ddph_plugin_entry_v1 entry;
    void *sym = dlsym(p->dl, DDPH_PLUGIN_ENTRY_V1);
    if (!sym) {
        /* Name the majors the file does export, newer or retired. */
        for (int major = NEWEST_MAJOR_TO_PROBE; major >= 0; major--) {
            char name[32];
            snprintf(name, sizeof name, "ddph_plugin_v%d", major);
            if (major != DDPH_PLUGIN_ABI_MAJOR && dlsym(p->dl, name)) {
                st = ddph__fail(
                    err, DDPH_ERR_ABI,
                    "hook plugin %s exports %s only: ABI major %d is %s; "
                    "this host supports major %d (%s)",
                    path, name, major,
                    major > DDPH_PLUGIN_ABI_MAJOR ? "newer than this host"
                                                  : "no longer supported",
                    DDPH_PLUGIN_ABI_MAJOR, DDPH_PLUGIN_ENTRY_V1);
                goto fail;
            }
        }
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s has no entry symbol %s (is it a "
                        "ddphook hook? build it with DDPH_PLUGIN_EXPORT)",
                        path, DDPH_PLUGIN_ENTRY_V1);
        goto fail;
    }
    memcpy(&entry, &sym, sizeof entry);
    const ddph_plugin_api_v1 *table = entry(DDPH_PLUGIN_ABI_MINOR);
    if (!table) {
        st = ddph__fail(err, DDPH_ERR_ABI,
                        "hook plugin %s: %s(%u) returned NULL (the plugin "
                        "declined this host's ABI minor)",
                        path, DDPH_PLUGIN_ENTRY_V1, DDPH_PLUGIN_ABI_MINOR);
        goto fail;
    }
    /* Read the header first: struct_size says how much more there is. */
    p->plugin_size = table->struct_size;
    size_t n = p->plugin_size < sizeof p->api ? p->plugin_size : sizeof p->api;
    memcpy(&p->api, table, n);
    if ((st = check_table(p, err)) != DDPH_OK)
        goto fail;
    if (!strchr(name_or_path, '/') && strcmp(p->api.name, name_or_path) != 0) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s declares the name '%s', not '%s'",
                        path, p->api.name, name_or_path);
        goto fail;
    }
    *out = p;
    return DDPH_OK;
fail:
    ddph__plugin_unload(p);
    return st;
}

void ddph__plugin_unload(ddph_plugin *p)
{
    if (!p)
        return;
    if (p->dl)
        dlclose(p->dl);
    free(p->path);
    free(p);
}
