/* safe_file.c: see safe_file.h. */
#include "build-config.h"

#include "support/safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
