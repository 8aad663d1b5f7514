/* loader.c: see loader.h. */
#include "build-config.h"

#include "plugin/loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "plugin/elf_check.h"
#include "support/safe_open.h"
#include "plugin/options.h"


/* Hook names: plugin.h's rule, letters, digits, '_' and '-', 1 to
 * DDPH_PLUGIN_NAME_MAX of them. */
static int valid_name(const char *name)
{
    size_t n = 0;
    for (const char *c = name; *c; c++, n++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || (*c >= 'A' && *c <= 'Z')))
            return 0;
    return n > 0 && n <= DDPH_PLUGIN_NAME_MAX;
}

static int is_hook_file(const struct dirent *de)
{
    size_t n = strlen(de->d_name);
    return n > 3 && strcmp(de->d_name + n - 3, ".so") == 0;
}

int ddph__plugin_dir_list(const char *dir, char ***files)
{
    struct dirent **list;
    int n = scandir(dir, &list, is_hook_file, alphasort);
    if (n < 0)
        return -1;
    char **names = calloc((size_t)n + 1, sizeof *names);
    int ok = names != NULL;
    for (int i = 0; i < n; i++) {
        if (ok && !(names[i] = ddph__strdup(list[i]->d_name)))
            ok = 0;
        free(list[i]);
    }
    free(list);
    if (!ok) {
        ddph__names_free(names, (size_t)n);
        errno = ENOMEM;
        return -1;
    }
    *files = names;
    return n;
}

void ddph__names_free(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t ddph__plugin_names(const char *plugin_path, char ***names)
{
    size_t n = 0, cap = 0;
    char **out = NULL;
    char *dirs = ddph__strdup(plugin_path ? plugin_path : "");
    char *save = NULL;
    for (char *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d;
         d = strtok_r(NULL, ":", &save)) {
        char **files;
        int nf = ddph__plugin_dir_list(d, &files);
        for (int i = 0; i < nf; i++) {
            files[i][strlen(files[i]) - 3] = '\0'; /* the stem */
            if (!valid_name(files[i]))
                continue;
            if (n == cap) {
                size_t c = cap ? 2 * cap : 16;
                char **grown = realloc(out, c * sizeof *grown);
                if (!grown)
                    continue;
                out = grown;
                cap = c;
            }
            out[n++] = files[i];
            files[i] = NULL;
        }
        if (nf > 0)
            ddph__names_free(files, (size_t)nf);
    }
    free(dirs);
    if (n)
        qsort(out, n, sizeof *out, compare_names);
    size_t u = 0; /* a name in two folders: the first one loads */
    for (size_t i = 0; i < n; i++) {
        if (u && strcmp(out[u - 1], out[i]) == 0)
            free(out[i]);
        else
            out[u++] = out[i];
    }
    *names = out;
    return u;
}

/* " (did you mean 'X'?)" when a hook along plugin_path is a likely typo of
 * name, else "". */
static void suggest_name(const char *name, const char *plugin_path,
                         char *buf, size_t size)
{
    char **names;
    size_t n = ddph__plugin_names(plugin_path, &names);
    const char *near = ddph__nearest(name, (const char *const *)names, n);
    if (near)
        snprintf(buf, size, " (did you mean '%s'?)", near);
    else if (size)
        buf[0] = '\0';
    ddph__names_free(names, n);
}

ddph_status ddph__plugin_resolve(const char *name_or_path,
                                 const char *plugin_path, char **path_out,
                                 ddph_err *err)
{
    struct stat sb;
    if (strchr(name_or_path, '/')) {
        if (stat(name_or_path, &sb) != 0) {
            int why = errno;
            /* A hook shipped as source (examples/post_localsgd) is built
             * with the Makefile next to where the .so will be. */
            char hint[DDPH__ERR_LEN / 2] = "";
            char *copy = ddph__strdup(name_or_path);
            if (copy && why == ENOENT) {
                char *folder = dirname(copy);
                char mk[PATH_MAX];
                snprintf(mk, sizeof mk, "%s/Makefile", folder);
                if (access(mk, R_OK) == 0)
                    snprintf(hint, sizeof hint,
                             " (not built yet? run: make -C %s)", folder);
            }
            free(copy);
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "hook plugin %s: %s%s", name_or_path,
                              strerror(why), hint);
        }
        *path_out = ddph__strdup(name_or_path);
        return *path_out ? DDPH_OK
                         : ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    if (!valid_name(name_or_path))
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
        snprintf(tried + used, sizeof tried - used, "%s%s%s", used ? ", " : "",
                 cand, stat(d, &sb) != 0 ? " (the folder does not exist)" : "");
        free(cand);
    }
    free(dirs);
    char near[128];
    suggest_name(name_or_path, plugin_path, near, sizeof near);
    return ddph__fail(err, DDPH_ERR_PLUGIN,
                      "hook '%s' not found%s; paths tried: %s (`ddphook "
                      "plugins` lists the hooks; set [runtime] plugin_path, "
                      "or give [hook] name as a path)",
                      name_or_path, near,
                      tried[0] ? tried : "(plugin_path is empty)");
}


/* Validates the copied table; the message names the plugin file. */
static ddph_status check_table(const ddph_plugin *p, ddph_err *err)
{
    const ddph_plugin_api_v1 *a = &p->api;
    /* A table too short to hold abi_major is named for its size, not as
     * "ABI major 0". */
    int holds_major = p->plugin_size >= offsetof(ddph_plugin_api_v1, abi_major) +
                                            sizeof a->abi_major;
    if (holds_major && a->abi_major != DDPH_PLUGIN_ABI_MAJOR)
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
    if (p->plugin_size >= offsetof(ddph_plugin_api_v1, tolerance) +
                              sizeof a->tolerance &&
        !(a->tolerance >= 0 && a->tolerance <= 1e6))
        return ddph__fail(err, DDPH_ERR_PLUGIN,
                          "hook plugin %s declares tolerance %g: it must be "
                          "a number from 0 to 1e6",
                          p->path, a->tolerance);
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

/* The file's CRC-32 and size: two builds of one hook (same name, version
 * and options) differ here, and the ranks compare it at finalize. */
static ddph_status file_digest(int fd, const char *path, ddph_plugin *p,
                               ddph_err *err)
{
    unsigned char buf[65536];
    uLong crc = crc32_z(0L, Z_NULL, 0);
    uint64_t size = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, (off_t)size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "hook plugin %s: cannot read it: %s", path,
                              strerror(errno));
        if (n == 0)
            break;
        crc = crc32_z(crc, buf, (size_t)n);
        size += (uint64_t)n;
    }
    p->file_crc = (uint32_t)crc;
    p->file_size = size;
    return DDPH_OK;
}

ddph_status ddph__plugin_load(const char *name_or_path,
                              const char *plugin_path, int allow_insecure,
                              ddph_plugin **out, ddph_err *err)
{
    char *path = NULL;
    ddph_status st = ddph__plugin_resolve(name_or_path, plugin_path, &path, err);
    if (st != DDPH_OK)
        return st;
    int fd = -1;
    if ((st = ddph__safe_open("hook plugin", path, !allow_insecure, &fd, err)) != DDPH_OK) {
        free(path);
        return st;
    }
    ddph_plugin *p = calloc(1, sizeof *p);
    if (!p) {
        close(fd);
        free(path);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    p->path = path;
    p->fd = -1;
    st = ddph__elf_check(fd, path, err);
    if (st == DDPH_OK)
        st = file_digest(fd, path, p, err);
    /* The very file checked: its descriptor, not its name again. */
    char by_fd[64];
    snprintf(by_fd, sizeof by_fd, "/proc/self/fd/%d", fd);
    if (st == DDPH_OK) {
        dlerror();
        p->dl = dlopen(by_fd, RTLD_NOW | RTLD_LOCAL);
        if (!p->dl) {
            const char *why = dlerror();
            st = ddph__fail(err, DDPH_ERR_PLUGIN,
                            "hook plugin %s: dlopen failed: %s%s", path,
                            why ? why : "unknown error",
                            access("/proc/self/fd", X_OK) != 0
                                ? " (plugins are loaded through /proc/self/fd:"
                                  " is /proc mounted?)"
                                : "");
        }
    }
    /* ld.so knows a loaded object by the name it was opened with, and
     * when the same file was already loaded under another name it returns
     * that object and adds this name to it.  While an object answers to
     * /proc/self/fd/N, descriptor N stays open, so that no other file can
     * be opened as N and be taken for it (a third plugin after the same
     * one twice would otherwise get the first one back). */
    if (st == DDPH_OK) {
        p->fd = fd;
        fd = -1;
    }
    if (fd >= 0)
        close(fd);
    if (st != DDPH_OK)
        goto fail;
    ddph_plugin_entry_v1 entry;
    void *sym = dlsym(p->dl, DDPH_PLUGIN_ENTRY_V1);
    if (!sym) { /* elf_check saw it: only a broken loader gets here */
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s: dlsym(%s) failed: %s", path,
                        DDPH_PLUGIN_ENTRY_V1, dlerror());
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
    if (!valid_name(p->api.name)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s declares a name with characters "
                        "other than letters, digits, '_' and '-'",
                        path);
        goto fail;
    }
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
    if (p->fd >= 0) {
        /* Still loaded (another instance holds it, or it cannot be
         * unloaded): its name stays /proc/self/fd/N, so N stays open for
         * the life of the process (one descriptor, never reused for
         * another plugin). */
        char by_fd[64];
        snprintf(by_fd, sizeof by_fd, "/proc/self/fd/%d", p->fd);
        void *still = dlopen(by_fd, RTLD_LAZY | RTLD_NOLOAD);
        if (still)
            dlclose(still);
        else
            close(p->fd);
    }
    free(p->path);
    free(p);
}
