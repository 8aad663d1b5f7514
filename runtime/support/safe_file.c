/* safe_file.c: see safe_file.h. */
#include "build-config.h"

#include "support/safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

ddph_status ddph__file_write_atomic(const char *path, const void *data,
                                    size_t len, const char *what,
                                    ddph_err *err)
{
    size_t n = strlen(path);
    char *tmp = malloc(n + 8);
    if (!tmp)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".XXXXXX", 8);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        ddph_status st = ddph__fail(err, DDPH_ERR_IO,
                                    "%s %s: cannot create a temporary file "
                                    "beside it: %s",
                                    what, path, strerror(errno));
        free(tmp);
        return st;
    }
    const unsigned char *bytes = data;
    size_t done = 0;
    int bad = 0;
    while (done < len && !bad) {
        ssize_t w = write(fd, bytes + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        bad = w <= 0;
        done += w > 0 ? (size_t)w : 0;
    }
    bad = bad || fsync(fd) != 0;
    int saved = errno;
    bad = close(fd) != 0 || bad;
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        saved = errno;
    }
    ddph_status st = DDPH_OK;
    if (bad) {
        st = ddph__fail(err, DDPH_ERR_IO, "%s %s: cannot write: %s", what,
                        path, strerror(saved));
        unlink(tmp);
    } else {
        /* The rename itself must survive a crash. */
        st = ddph__dir_sync(path, what, err);
    }
    free(tmp);
    return st;
}

ddph_status ddph__dir_sync(const char *path, const char *what, ddph_err *err)
{
    char *dir = ddph__strdup(path);
    if (!dir)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int bad = dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL);
    ddph_status st = bad ? ddph__fail(err, DDPH_ERR_IO,
                                      "%s %s: cannot sync its folder: %s",
                                      what, path, strerror(errno))
                         : DDPH_OK;
    if (dfd >= 0)
        close(dfd);
    free(dir);
    return st;
}

ddph_status ddph__file_read_regular(const char *path, size_t max_bytes,
                                    const char *limit_why,
                                    unsigned char **data, size_t *len,
                                    ddph_err *err)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ddph__fail(err, DDPH_ERR_IO, "%s: %s", path,
                          errno == ELOOP ? "is a symbolic link (refused)"
                                         : strerror(errno));
    ddph_status st = ddph__fd_read_regular(fd, path, max_bytes, limit_why,
                                           data, len, err);
    close(fd);
    return st;
}

ddph_status ddph__fd_read_regular(int fd, const char *path, size_t max_bytes,
                                  const char *limit_why, unsigned char **data,
                                  size_t *len, ddph_err *err)
{
    *data = NULL;
    *len = 0;
    struct stat sb;
    ddph_status st = DDPH_OK;
    unsigned char *buf = NULL;
    size_t got = 0;
    if (fstat(fd, &sb) != 0)
        st = ddph__fail(err, DDPH_ERR_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = ddph__fail(err, DDPH_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size > max_bytes)
        st = ddph__fail(err, DDPH_ERR_IO,
                        "%s: %lld bytes is more than %zu, the most %s "
                        "(refused before reading)",
                        path, (long long)sb.st_size, max_bytes, limit_why);
    else if (!(buf = malloc((size_t)sb.st_size + 1)))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "%s: out of memory", path);
    while (st == DDPH_OK && got < (size_t)sb.st_size) {
        ssize_t r = pread(fd, buf + got, (size_t)sb.st_size - got,
                          (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            st = ddph__fail(err, DDPH_ERR_IO, "%s: %s", path,
                            r < 0 ? strerror(errno) : "changed while read");
        else
            got += (size_t)r;
    }
    if (st != DDPH_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *len = got;
    return DDPH_OK;
}

/* Who holds the lock file fd: its text, or "pid unknown" while the holder
 * has not written it yet. */
static void lock_holder(int fd, char *who, size_t n)
{
    ssize_t r = pread(fd, who, n - 1, 0);
    who[r > 0 ? r : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
    if (!who[0])
        snprintf(who, n, "pid unknown");
}

ddph_status ddph__file_lock(const char *path, const char *what, int *fd_out,
                            ddph_err *err)
{
    *fd_out = -1;
    /* The holder removes the file as it lets go: a lock taken on a file
     * no longer at path guards nothing, so take the one that is there. */
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return ddph__fail(err, DDPH_ERR_IO, "cannot create the lock file "
                              "%s: %s", path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int saved = errno;
            char who[256];
            lock_holder(fd, who, sizeof who);
            close(fd);
            if (saved == EWOULDBLOCK)
                return ddph__fail(err, DDPH_ERR_STATE,
                                  "another job (%s) is saving to %s (its "
                                  "lock %s is held): give each job its own "
                                  "checkpoint path",
                                  who, what, path);
            return ddph__fail(err, DDPH_ERR_IO, "cannot lock %s: %s", path,
                              strerror(saved));
        }
        struct stat held, there;
        if (fstat(fd, &held) == 0 && lstat(path, &there) == 0 &&
            held.st_dev == there.st_dev && held.st_ino == there.st_ino) {
            char host[128] = "?", who[256];
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = '\0';
            int n = snprintf(who, sizeof who, "pid %ld on %s\n",
                             (long)getpid(), host);
            if (ftruncate(fd, 0) != 0 || pwrite(fd, who, (size_t)n, 0) != n) {
                ddph_status st = ddph__fail(err, DDPH_ERR_IO,
                                            "cannot write the lock file %s: "
                                            "%s",
                                            path, strerror(errno));
                ddph__file_unlock(path, fd);
                return st;
            }
            *fd_out = fd;
            return DDPH_OK;
        }
        close(fd);
    }
    return ddph__fail(err, DDPH_ERR_IO,
                      "cannot lock %s: it is replaced faster than it can be "
                      "locked",
                      path);
}

void ddph__file_unlock(const char *path, int fd)
{
    if (fd < 0)
        return;
    /* Removed while still held, so that no one locks it in between. */
    unlink(path);
    close(fd);
}
