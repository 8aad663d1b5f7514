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
#include <link.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/options.h"

/* Majors the loader can explain but not load; raise when v2 exists. */
#define NEWEST_MAJOR_TO_PROBE 9

/* Hook names: letters, digits, '_' and '-', 1 to 64 of them. */
static int valid_name(const char *name)
{
    size_t n = 0;
    for (const char *c = name; *c; c++, n++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || (*c >= 'A' && *c <= 'Z')))
            return 0;
    return n > 0 && n <= 64;
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

static const char *who_writes(mode_t mode)
{
    return mode & S_IWOTH ? "other users" : "its group";
}

static int trusted_owner(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* The rule of ld.so's secure mode, sudo and sshd's StrictModes, applied
 * to the file that is then loaded, not to a name looked up twice: the
 * path is walked from "/" one component at a time, each opened with
 * O_NOFOLLOW relative to the folder before it and checked as it is
 * opened; links are read and followed here.  Every folder on the way must
 * be owned by root or this user and writable by no one else, except that
 * a folder other than the plugin's own may be world-writable if it is
 * sticky, as /tmp is (there only an entry's owner can replace it); every
 * link must be owned by root or this user (its owner chooses where it
 * points); the file must be a regular file owned by root or this user and
 * writable by no one else.  The descriptor returned is the file checked:
 * check_elf reads it and dlopen loads it through /proc/self/fd. */
#define MAX_LINKS 40

typedef struct walk {
    const char *kind;  /* "hook plugin", "GPU backend module": messages */
    const char *given; /* the path as given, for messages */
    char where[PATH_MAX]; /* the path walked so far, links resolved */
    int check;            /* 0: allow_insecure_plugins */
} walk;

static ddph_status walk_fail(walk *w, ddph_err *err, ddph_status st,
                             const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ddph_status walk_fail(walk *w, ddph_err *err, ddph_status st,
                             const char *fmt, ...)
{
    char why[DDPH__ERR_LEN / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return ddph__fail(err, st, "%s %s %s%s%s%s: %s",
                      st == DDPH_ERR_INSECURE ? "refusing" : "cannot load",
                      w->kind, w->given, strcmp(w->where, w->given) ? " (at " : "",
                      strcmp(w->where, w->given) ? w->where : "",
                      strcmp(w->where, w->given) ? ")" : "", why);
}

/* A folder on the way: own_folder is the one that holds the plugin. */
static ddph_status check_folder(walk *w, const struct stat *sb, int own_folder,
                                ddph_err *err)
{
    if (!w->check)
        return DDPH_OK;
    if (!trusted_owner(sb->st_uid))
        return walk_fail(w, err, DDPH_ERR_INSECURE,
                         "%s %s is owned by uid %u, neither root nor you, "
                         "who could replace it (set [runtime] "
                         "allow_insecure_plugins = true to load it anyway)",
                         own_folder ? "its folder" : "the folder", w->where,
                         (unsigned)sb->st_uid);
    if ((sb->st_mode & (S_IWGRP | S_IWOTH)) &&
        (own_folder || !(sb->st_mode & S_ISVTX)))
        return walk_fail(w, err, DDPH_ERR_INSECURE,
                         "%s %s is writable by %s, who could replace it%s "
                         "(chmod go-w the folder, or set [runtime] "
                         "allow_insecure_plugins = true)",
                         own_folder ? "its folder" : "the folder", w->where,
                         who_writes(sb->st_mode),
                         sb->st_mode & S_ISVTX ? " (sticky, as /tmp, is not "
                                                 "enough for the plugin's "
                                                 "own folder)"
                                               : "");
    return DDPH_OK;
}

static void where_push(walk *w, const char *name)
{
    size_t n = strlen(w->where);
    snprintf(w->where + n, sizeof w->where - n, "%s%s",
             n && w->where[n - 1] == '/' ? "" : "/", name);
}

static void where_pop(walk *w)
{
    char *slash = strrchr(w->where, '/');
    if (slash && slash != w->where)
        *slash = '\0';
    else
        strcpy(w->where, "/");
}

/* Opens `given` for reading as described above; *fd_out on success. */
static ddph_status open_plugin(const char *kind, const char *given, int check,
                               int *fd_out, ddph_err *err)
{
    walk w = {.kind = kind, .given = given, .check = check};
    snprintf(w.where, sizeof w.where, "/");
    /* The components still to walk; a link's target is put in front. */
    char todo[2 * PATH_MAX];
    if (given[0] == '/')
        snprintf(todo, sizeof todo, "%s", given);
    else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return walk_fail(&w, err, DDPH_ERR_PLUGIN, "getcwd: %s",
                             strerror(errno));
        if ((size_t)snprintf(todo, sizeof todo, "%s/%s", cwd, given) >=
            sizeof todo)
            return walk_fail(&w, err, DDPH_ERR_PLUGIN, "path too long");
    }
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat sb;
    if (dir < 0 || fstat(dir, &sb) != 0)
        return walk_fail(&w, err, DDPH_ERR_PLUGIN, "/: %s", strerror(errno));
    ddph_status st = check_folder(&w, &sb, 0, err);
    int links = 0, fd = -1;
    char *rest = todo;
    while (st == DDPH_OK) {
        while (*rest == '/')
            rest++;
        if (!*rest) {
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN,
                           "is a folder, not a file");
            break;
        }
        char name[NAME_MAX + 1];
        size_t n = strcspn(rest, "/");
        if (n > NAME_MAX) {
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s",
                           strerror(ENAMETOOLONG));
            break;
        }
        memcpy(name, rest, n);
        name[n] = '\0';
        rest += n;
        while (*rest == '/')
            rest++;
        int last = *rest == '\0';
        if (strcmp(name, ".") == 0)
            continue;
        int next = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (strcmp(name, "..") == 0)
            where_pop(&w);
        else
            where_push(&w, name);
        if (next < 0 || fstat(next, &sb) != 0) {
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s", strerror(errno));
            if (next >= 0)
                close(next);
            break;
        }
        if (S_ISLNK(sb.st_mode)) {
            char target[PATH_MAX];
            ssize_t tn = readlinkat(next, "", target, sizeof target - 1);
            close(next);
            if (check && !trusted_owner(sb.st_uid)) {
                st = walk_fail(&w, err, DDPH_ERR_INSECURE,
                               "the link %s is owned by uid %u, neither root "
                               "nor you, who could point it elsewhere (set "
                               "[runtime] allow_insecure_plugins = true to "
                               "load it anyway)",
                               w.where, (unsigned)sb.st_uid);
                break;
            }
            if (tn < 0 || ++links > MAX_LINKS) {
                st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s",
                               strerror(tn < 0 ? errno : ELOOP));
                break;
            }
            target[tn] = '\0';
            where_pop(&w);
            char joined[2 * PATH_MAX];
            if ((size_t)snprintf(joined, sizeof joined, "%s/%s", target,
                                 rest) >= sizeof joined) {
                st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "path too long");
                break;
            }
            memcpy(todo, joined, strlen(joined) + 1);
            rest = todo;
            if (target[0] == '/') {
                close(dir);
                snprintf(w.where, sizeof w.where, "/");
                dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (dir < 0 || fstat(dir, &sb) != 0) {
                    st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "/: %s",
                                   strerror(errno));
                    break;
                }
                st = check_folder(&w, &sb, 0, err);
            }
            continue;
        }
        if (S_ISDIR(sb.st_mode)) {
            close(dir);
            dir = next;
            if (last)
                st = walk_fail(&w, err, DDPH_ERR_PLUGIN,
                               "is a folder, not a file");
            else
                st = check_folder(&w, &sb, 0, err);
            continue;
        }
        close(next);
        if (!last || !S_ISREG(sb.st_mode)) {
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s",
                           last ? "not a regular file" : strerror(ENOTDIR));
            break;
        }
        /* The plugin itself, and its own folder (no sticky exemption). */
        struct stat folder;
        if (check && !trusted_owner(sb.st_uid))
            st = walk_fail(&w, err, DDPH_ERR_INSECURE,
                           "the file is owned by uid %u, neither root nor "
                           "you (set [runtime] allow_insecure_plugins = true "
                           "to load it anyway)",
                           (unsigned)sb.st_uid);
        else if (check && (sb.st_mode & (S_IWGRP | S_IWOTH)))
            st = walk_fail(&w, err, DDPH_ERR_INSECURE,
                           "the file is writable by %s (chmod go-w it, or "
                           "set [runtime] allow_insecure_plugins = true)",
                           who_writes(sb.st_mode));
        else if (fstat(dir, &folder) != 0)
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s", strerror(errno));
        else {
            char file_where[PATH_MAX];
            snprintf(file_where, sizeof file_where, "%s", w.where);
            where_pop(&w);
            st = check_folder(&w, &folder, 1, err);
            snprintf(w.where, sizeof w.where, "%s", file_where);
        }
        if (st != DDPH_OK)
            break;
        /* O_NONBLOCK: never wait on a FIFO swapped in by a trusted user;
         * the same inode as the one checked, or it is refused. */
        fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat opened;
        if (fd < 0 || fstat(fd, &opened) != 0 || opened.st_dev != sb.st_dev ||
            opened.st_ino != sb.st_ino) {
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s",
                           fd < 0 ? strerror(errno)
                                  : "the file changed while it was checked");
            if (fd >= 0)
                close(fd);
            fd = -1;
        }
        break;
    }
    if (dir >= 0)
        close(dir);
    if (st == DDPH_OK)
        *fd_out = fd;
    return st;
}

/* The machine this library was built for, to match against the file's. */
#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#else
#define HOST_MACHINE EM_NONE /* not checked */
#endif

/* Looks at the file before dlopen runs any of its code (constructors run
 * inside dlopen): a complete ELF shared object of this machine whose
 * dynamic symbol table defines the entry symbol.  libelf reads the file
 * with read(), so a truncated file is an error here, not a SIGBUS inside
 * dlopen's mapping. */
static ddph_status check_elf(int fd, const char *path, ddph_err *err)
{
    if (elf_version(EV_CURRENT) == EV_NONE)
        return ddph__fail(err, DDPH_ERR_PLUGIN, "libelf: %s",
                          elf_errmsg(-1));
    struct stat sb;
    ddph_status st = DDPH_OK;
    Elf *elf = NULL;
    GElf_Ehdr eh;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a regular file", path);
        goto out;
    }
    elf = elf_begin(fd, ELF_C_READ, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not an ELF shared object (%s)",
                        path, elf_errno() ? elf_errmsg(-1)
                                          : "no ELF header");
        goto out;
    }
    if (eh.e_type != ET_DYN ||
        eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        (HOST_MACHINE != EM_NONE && eh.e_machine != HOST_MACHINE)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a shared object for this "
                        "machine (ELF type %u, class %u, machine %u)",
                        path, (unsigned)eh.e_type,
                        (unsigned)eh.e_ident[EI_CLASS],
                        (unsigned)eh.e_machine);
        goto out;
    }
    /* dlopen maps every loadable segment: one past the end of the file is
     * a SIGBUS when touched.  The section headers must be there too. */
    uint64_t size = (uint64_t)sb.st_size;
    int truncated = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize > size ||
                    eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > size;
    for (int k = 0; !truncated && k < eh.e_phnum; k++) {
        GElf_Phdr ph;
        truncated = !gelf_getphdr(elf, k, &ph) ||
                    (ph.p_type == PT_LOAD && ph.p_offset + ph.p_filesz > size);
    }
    if (truncated) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a complete ELF shared object "
                        "(truncated: its headers reach past its %llu bytes)",
                        path, (unsigned long long)size);
        goto out;
    }
    /* The ddph_plugin_vN symbols it defines, by major. */
    unsigned majors = 0;
    int complete = 1, found_dynsym = 0;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) {
            complete = 0;
            break;
        }
        if (sh.sh_type != SHT_DYNSYM)
            continue;
        found_dynsym = 1;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (!data || sh.sh_entsize == 0) {
            complete = 0;
            break;
        }
        size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t k = 0; k < n; k++) {
            GElf_Sym sym;
            if (!gelf_getsym(data, (int)k, &sym))
                break;
            const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
            unsigned major;
            char extra;
            if (name && sym.st_shndx != SHN_UNDEF &&
                sscanf(name, "ddph_plugin_v%u%c", &major, &extra) == 1 &&
                major <= NEWEST_MAJOR_TO_PROBE)
                majors |= 1u << major;
        }
    }
    if (!complete || elf_errno() != 0) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a complete ELF shared object "
                        "(truncated or damaged: %s)",
                        path, elf_errmsg(-1));
    } else if (!(majors & (1u << DDPH_PLUGIN_ABI_MAJOR))) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s has no entry symbol %s%s (is it a "
                        "ddphook hook? build it with DDPH_PLUGIN_EXPORT)",
                        path, DDPH_PLUGIN_ENTRY_V1,
                        found_dynsym ? "" : " (no dynamic symbol table)");
        /* Name the majors the file does export, newer or retired. */
        for (int major = NEWEST_MAJOR_TO_PROBE; major >= 0; major--)
            if (majors & (1u << major)) {
                st = ddph__fail(
                    err, DDPH_ERR_ABI,
                    "hook plugin %s exports ddph_plugin_v%d only: ABI major "
                    "%d is %s; this host supports major %d (%s)",
                    path, major, major,
                    major > DDPH_PLUGIN_ABI_MAJOR ? "newer than this host"
                                                  : "no longer supported",
                    DDPH_PLUGIN_ABI_MAJOR, DDPH_PLUGIN_ENTRY_V1);
                break;
            }
    }
out:
    if (elf)
        elf_end(elf);
    return st;
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

ddph_status ddph__plugin_load(const char *name_or_path,
                              const char *plugin_path, int allow_insecure,
                              ddph_plugin **out, ddph_err *err)
{
    char *path = NULL;
    ddph_status st = ddph__plugin_resolve(name_or_path, plugin_path, &path, err);
    if (st != DDPH_OK)
        return st;
    int fd = -1;
    if ((st = open_plugin("hook plugin", path, !allow_insecure, &fd, err)) != DDPH_OK) {
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
    st = check_elf(fd, path, err);
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
    /* ld.so knows a loaded object by the name it was opened with.  While
     * an object is named /proc/self/fd/N, descriptor N stays open (so no
     * other file can be opened as N and be taken for it); when the same
     * file was already loaded under another name, ld.so returned that
     * object and this descriptor is not needed. */
    struct link_map *lm = NULL;
    if (st == DDPH_OK && dlinfo(p->dl, RTLD_DI_LINKMAP, &lm) == 0 && lm &&
        lm->l_name && strcmp(lm->l_name, by_fd) == 0) {
        p->fd = fd;
        fd = -1;
    }
    if (fd >= 0)
        close(fd);
    if (st != DDPH_OK)
        goto fail;
    ddph_plugin_entry_v1 entry;
    void *sym = dlsym(p->dl, DDPH_PLUGIN_ENTRY_V1);
    if (!sym) { /* check_elf saw it: only a broken loader gets here */
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

ddph_status ddph__module_open(const char *path, void **dl, ddph_err *err)
{
    int fd = -1;
    ddph_status st = open_plugin("GPU backend module", path, 1, &fd, err);
    if (st != DDPH_OK)
        return st;
    char by_fd[64];
    snprintf(by_fd, sizeof by_fd, "/proc/self/fd/%d", fd);
    dlerror();
    /* Never unloaded: fd stays open, so that /proc/self/fd/N, ld.so's name
     * for it, never names another file. */
    *dl = dlopen(by_fd, RTLD_NOW | RTLD_LOCAL);
    if (*dl)
        return DDPH_OK;
    const char *why = dlerror();
    close(fd);
    return ddph__fail(err, DDPH_ERR_UNSUPPORTED,
                      "cannot load the GPU backend module %s: %s", path,
                      why ? why : "unknown error");
}
