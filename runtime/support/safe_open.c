/* safe_open.c: see safe_open.h. */
#include "build-config.h"

#include "support/safe_open.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *who_writes(mode_t mode)
{
    return mode & S_IWOTH ? "other users" : "its group";
}

static int trusted_owner(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* The walk of safe_open.h, one component at a time. */
#define MAX_LINKS 40

typedef struct walk {
    const char *kind;  /* "hook plugin", "backend module": messages */
    const char *given; /* the path as given, for messages */
    const char *escape; /* the [runtime] key that skips the checks */
    char where[PATH_MAX]; /* the path walked so far, links resolved */
    int check;            /* 0: the escape key is set */
    int final_link;       /* 0: a link as the last component is refused */
    int folder;           /* 1: walk to the folder a file will be written in */
    ddph_status not_found; /* replaces DDPH_ERR_PLUGIN: see ddph_trust */
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
    if (st == DDPH_ERR_PLUGIN)
        st = w->not_found;
    return ddph__fail(err, st, "%s %s %s%s%s%s: %s",
                      st == DDPH_ERR_INSECURE ? "refusing"
                      : w->folder             ? "cannot write"
                                              : "cannot load",
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
                         "%s = true to load it anyway)",
                         own_folder ? "its folder" : "the folder", w->where,
                         (unsigned)sb->st_uid, w->escape);
    /* A shared sticky folder (/tmp, /dev/shm) cannot be made private:
     * the way out is a folder of one's own. */
    if ((sb->st_mode & (S_IWGRP | S_IWOTH)) && own_folder &&
        (sb->st_mode & S_ISVTX))
        return walk_fail(w, err, DDPH_ERR_INSECURE,
                         "its folder %s is writable by %s, who could "
                         "replace it (sticky, as /tmp, is not enough for the "
                         "file's own folder): use a folder only you can "
                         "write, e.g. $HOME/ckpt or one made with mkdir -m "
                         "700 %s/mine, or set [runtime] %s = true",
                         w->where, who_writes(sb->st_mode),
                         strcmp(w->where, "/") ? w->where : "", w->escape);
    if ((sb->st_mode & (S_IWGRP | S_IWOTH)) &&
        (own_folder || !(sb->st_mode & S_ISVTX)))
        return walk_fail(w, err, DDPH_ERR_INSECURE,
                         "%s %s is writable by %s, who could replace it "
                         "(chmod go-w the folder, or set [runtime] "
                         "%s = true)",
                         own_folder ? "its folder" : "the folder", w->where,
                         who_writes(sb->st_mode), w->escape);
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

/* See safe_open.h. */
ddph_status ddph__safe_open(const char *kind, const char *given, int check,
                            int *fd_out, ddph_err *err)
{
    const ddph_trust trust = {.kind = kind,
                              .escape = "allow_insecure_plugins",
                              .check = check,
                              .final_link = 1,
                              .not_found = DDPH_ERR_PLUGIN};
    return ddph__safe_open_as(&trust, given, fd_out, err);
}

/* Walks `start` (given itself, or in folder mode the folder that holds
 * it) from "/"; *fd_out gets the file (not in folder mode). */
static ddph_status walk_path(const walk *wp, const char *start, int *fd_out,
                             ddph_err *err)
{
    walk w = *wp;
    int check = w.check;
    snprintf(w.where, sizeof w.where, "/");
    /* The components still to walk; a link's target is put in front. */
    char todo[2 * PATH_MAX];
    if (start[0] == '/')
        snprintf(todo, sizeof todo, "%s", start);
    else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return walk_fail(&w, err, DDPH_ERR_PLUGIN, "getcwd: %s",
                             strerror(errno));
        if ((size_t)snprintf(todo, sizeof todo, "%s/%s", cwd, start) >=
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
        if (!*rest && w.folder) {
            /* The folder the file will be in: its own folder's rule. */
            struct stat own;
            st = fstat(dir, &own) != 0
                     ? walk_fail(&w, err, DDPH_ERR_PLUGIN, "%s",
                                 strerror(errno))
                     : check_folder(&w, &own, 1, err);
            break;
        }
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
        if (S_ISLNK(sb.st_mode) && last && !w.final_link) {
            close(next);
            st = walk_fail(&w, err, DDPH_ERR_PLUGIN,
                           "is a symbolic link (refused)");
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
                               "[runtime] %s = true to load it anyway)",
                               w.where, (unsigned)sb.st_uid, w.escape);
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
            if (last && !w.folder)
                st = walk_fail(&w, err, DDPH_ERR_PLUGIN,
                               "is a folder, not a file");
            else if (!last)
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
                           "you (set [runtime] %s = true to load it anyway)",
                           (unsigned)sb.st_uid, w.escape);
        else if (check && (sb.st_mode & (S_IWGRP | S_IWOTH)))
            st = walk_fail(&w, err, DDPH_ERR_INSECURE,
                           "the file is writable by %s (chmod go-w it, or "
                           "set [runtime] %s = true)",
                           who_writes(sb.st_mode), w.escape);
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
    if (st == DDPH_OK && fd_out)
        *fd_out = fd;
    return st;
}

ddph_status ddph__safe_open_as(const ddph_trust *trust, const char *given,
                               int *fd_out, ddph_err *err)
{
    walk w = {.kind = trust->kind,
              .given = given,
              .escape = trust->escape,
              .check = trust->check,
              .final_link = trust->final_link,
              .not_found = trust->not_found ? trust->not_found : DDPH_ERR_IO};
    return walk_path(&w, given, fd_out, err);
}

ddph_status ddph__safe_folder_as(const ddph_trust *trust, const char *given,
                                 ddph_err *err)
{
    /* A link naming the folder is followed, as the file's load will. */
    walk w = {.kind = trust->kind,
              .given = given,
              .escape = trust->escape,
              .check = trust->check,
              .final_link = 1,
              .folder = 1,
              .not_found = trust->not_found ? trust->not_found : DDPH_ERR_IO};
    char *copy = ddph__strdup(given);
    if (!copy)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_status st = walk_path(&w, dirname(copy), NULL, err);
    free(copy);
    return st;
}

ddph_status ddph__module_open(const char *path, void **dl, ddph_err *err)
{
    int fd = -1;
    ddph_status st = ddph__safe_open("backend module", path, 1, &fd, err);
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
                      "cannot load the backend module %s: %s", path,
                      why ? why : "unknown error");
}
