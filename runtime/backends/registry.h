/* registry.h: the backends this ddphook knows, by the name [runtime]
 * backend gives them, and the loading of those that are modules.
 *
 * A job backend (backend.h) joins the ranks and carries the control plane
 * and the host collectives: MPI is built in.  A device backend (gpu.h)
 * runs the hooks' collectives on GPU memory over the job backend the
 * launcher chose.  A module is <backend dir>/NAME.so, the backend dir
 * being $DDPH_BACKEND_DIR when set (a build tree, a relocated install),
 * else the installed <pkglibdir>/backends; it is opened with the plugin
 * loader's checks (owner, mode, every folder and link on the way), once
 * per process, and never unloaded. */
#ifndef DDPH_REGISTRY_H
#define DDPH_REGISTRY_H

#include <stddef.h>

#include "backends/backend.h"
#include "backends/gpu.h"

typedef enum {
    DDPH__BACKEND_JOB = 1,    /* backend.h's table */
    DDPH__BACKEND_DEVICE = 2, /* gpu.h's table, over the launcher's job */
} ddph_backend_kind;

typedef struct ddph_backend_entry {
    const char *name; /* [runtime] backend = NAME */
    ddph_backend_kind kind;
    /* A job backend built into the library, or NULL: the module NAME.so. */
    const ddph_backend_ops *builtin;
    /* A job backend: the variables its launcher sets, separated by
     * spaces; with [runtime] backend unset, the first entry whose
     * launcher set one runs the job (NULL: never chosen so). */
    const char *launched_by;
    /* Why the module may be missing, for the message when it is. */
    const char *missing_hint;
} ddph_backend_entry;

/* The entry named `name`, or NULL. */
const ddph_backend_entry *ddph__backend_find(const char *name);
/* Every name the registry has, ", "-separated, for messages. */
void ddph__backend_names(char *out, size_t cap);
/* The job backend of a job file that names none: the launcher's (by the
 * variables it set), else MPI's (a singleton, or a launcher it knows). */
const ddph_backend_entry *ddph__backend_launched(void);

/* A job backend's table: built in, or its module, loaded once.  The
 * message names the file and why it could not be used (not installed, a
 * library missing, another version). */
ddph_status ddph__backend_load_job(const ddph_backend_entry *e,
                                   const ddph_backend_ops **out,
                                   ddph_err *err);
/* A device backend's table, likewise. */
ddph_status ddph__backend_load_device(const ddph_backend_entry *e,
                                      const ddph_gpu_ops **out, ddph_err *err);

#endif
