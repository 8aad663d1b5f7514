/* safe_open.h: opening a file that is then loaded into the process (a hook
 * plugin, a backend module) so that no other user can swap it.
 *
 * The rule of ld.so's secure mode, sudo and sshd's StrictModes, applied to
 * the file that is then loaded, not to a name looked up twice: the path
 * is walked from "/" one component at a time, each opened with O_NOFOLLOW
 * relative to the folder before it, and checked as it is opened; links
 * are read and followed here.  Every folder on the way is owned by root
 * or this user and writable by no one else (a folder other than the
 * file's own may be world-writable if it is sticky, as /tmp is); every
 * link is owned by root or this user; the file is a regular file owned by
 * root or this user and writable by no one else. */
#ifndef DDPH_SAFE_OPEN_H
#define DDPH_SAFE_OPEN_H

#include "support/util.h"

/* Opens `path` for reading with the checks above (`check` 0: only walks,
 * for [runtime] allow_insecure_plugins); *fd is the very file checked,
 * for elf_check.h to read and dlopen to load through /proc/self/fd.
 * Messages say "refusing KIND PATH (at WHERE): why". */
ddph_status ddph__safe_open(const char *kind, const char *path, int check,
                            int *fd, ddph_err *err);

/* The same walk for another kind of file (a hook state file): `kind`
 * names it in messages, `escape` is the [runtime] key that turns the owner
 * and mode checks off (check 0), final_link 0 refuses a link as the last
 * component. */
typedef struct ddph_trust {
    const char *kind;
    const char *escape;
    int check;
    int final_link;
    /* What a path that cannot be walked returns (a missing folder, say):
     * 0 for DDPH_ERR_IO (files); ddph__safe_open uses DDPH_ERR_PLUGIN. */
    ddph_status not_found;
} ddph_trust;
ddph_status ddph__safe_open_as(const ddph_trust *trust, const char *path,
                               int *fd, ddph_err *err);

/* Before a file is written at `path`: the folder that will hold it and
 * every folder above pass the same checks as ddph__safe_open_as applies
 * to them, so that what is written can be loaded.  Other failures say
 * "cannot write KIND PATH". */
ddph_status ddph__safe_folder_as(const ddph_trust *trust, const char *path,
                                 ddph_err *err);

/* A runtime module (the GPU backend): opened as above (never insecure)
 * and dlopen'd through its descriptor, which stays open: it is never
 * unloaded. */
ddph_status ddph__module_open(const char *path, void **dl, ddph_err *err);

#endif
