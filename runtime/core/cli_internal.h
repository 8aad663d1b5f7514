/* cli_internal.h: what the ddphook tool (cli/) uses of core beyond the
 * public API, and the tool's only way into core.
 *
 * The tool is the runtime's own front end and does two things no trainer
 * does, so they are here rather than in <ddphook/ddphook.h>:
 *  - `ddphook check` runs each hook's create() on its options as a
 *    one-rank job would, without a trainer, a context or a model: a hook
 *    probe owns that job's backend and each hook it makes;
 *  - `ddphook bench hooks --stats` prints a hook's statistics as the log
 *    does at ddph_close.
 * The tool may use the folders below core directly (the job file, the
 * loader, the CPU operations); make check-layers fails when it includes
 * another core header or calls a core function not declared here. */
#ifndef DDPH_CLI_INTERNAL_H
#define DDPH_CLI_INTERNAL_H

#include <stddef.h>

#include <ddphook/ddphook.h>
#include <ddphook/plugin.h>

#include "support/config.h"
#include "support/log.h"
#include "support/util.h"

/* A one-rank job (MPI initialised on this process alone if it is not
 * yet) on which hooks are created; one per process. */
typedef struct ddph_hook_probe ddph_hook_probe;

/* Starts the probe's job within timeout_s. */
ddph_status ddph__hook_probe_open(double timeout_s, ddph_hook_probe **out,
                                  ddph_err *err);
/* Creates hook `name` (a name or a path, from `line` of cfg's file, or 0)
 * with cfg's [hook.NAME] options as a model named `who` would, and
 * destroys it: the hook's create() verdict on its options. */
ddph_status ddph__hook_probe_create(ddph_hook_probe *p, const ddph_config *cfg,
                                    const char *name, int line,
                                    ddph_wrapper wrapper, const char *who,
                                    const ddph_logger *log, ddph_err *err);
/* Ends the probe's job (MPI finalized when the probe initialised it). */
void ddph__hook_probe_close(ddph_hook_probe *p);

/* The hook's statistics for m as one line, "name value, ..." (at most 32,
 * cut to cap), or "no statistics"; "" before finalize (model.c). */
void ddph__model_stats_line(ddph_model *m, char *out, size_t cap);

#endif
