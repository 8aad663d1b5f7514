/* safe_file.h: files the runtime writes or reads in folders that another
 * user may share (a world-writable /tmp, a job folder on a shared disk).
 *
 * Writing never goes through what is already at the target: the bytes go
 * to a temporary file made exclusively beside it (O_CREAT|O_EXCL, so never
 * through a planted link), which is synced and renamed over the target (a
 * link there is replaced, not followed).  Reading opens without following
 * a final link, refuses anything but a regular file (a FIFO or device
 * could block or never end) and checks the size before reading a byte. */
#ifndef DDPH_SAFE_FILE_H
#define DDPH_SAFE_FILE_H

#include <stddef.h>

#include "support/util.h"

/* Replaces `path` with `len` bytes of data, or leaves it as it was.
 * `what` names the file in messages ("trace", "state file"). */
ddph_status ddph__file_write_atomic(const char *path, const void *data,
                                    size_t len, const char *what,
                                    ddph_err *err);

/* Syncs the folder that holds `path`, so that a rename there survives a
 * crash. */
ddph_status ddph__dir_sync(const char *path, const char *what, ddph_err *err);

/* Reads the whole regular file `path` into *data (malloc'd, *len bytes),
 * refusing a file of more than max_bytes before reading it; `limit_why`
 * says where the limit comes from, for the message. */
ddph_status ddph__file_read_regular(const char *path, size_t max_bytes,
                                    const char *limit_why,
                                    unsigned char **data, size_t *len,
                                    ddph_err *err);

/* The same for a file already open (from the start, whatever its offset):
 * `path` only names it in messages. */
ddph_status ddph__fd_read_regular(int fd, const char *path, size_t max_bytes,
                                  const char *limit_why, unsigned char **data,
                                  size_t *len, ddph_err *err);

/* An exclusive lock that two processes writing the same files take: the
 * file `path` (created beside them, mode 0600, without following a link)
 * is flock'ed and holds "pid P on HOST".  When another process holds it,
 * fails with DDPH_ERR_STATE: "another job (pid P on HOST) is saving to
 * WHAT".  *fd holds the lock until ddph__file_unlock, which removes the
 * file (a process that dies releases it; the file then stays, unlocked). */
ddph_status ddph__file_lock(const char *path, const char *what, int *fd,
                            ddph_err *err);
void ddph__file_unlock(const char *path, int fd);

#endif
