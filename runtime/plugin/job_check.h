/* job_check.h: what a job file says that only makes sense against the
 * plugin path or the trainer: every [hook.NAME] section must name a hook
 * that exists, and options nobody reads are reported, so that a typo in a
 * section name never changes training silently.
 *
 * Rules (docs/config.md, "Sections nobody reads"):
 * - [hook.NAME] for a hook found neither along plugin_path nor among the
 *   hooks the job loads by path: an error naming file:line, with the
 *   nearest hook name;
 * - [hook.NAME] for a hook that exists but that neither [hook] name nor
 *   any [model.X] hook selects: a warning when the job opens;
 * - [model.NAME] for a model the trainer has not created by its first
 *   ddph_step_begin: that call fails (on every rank, since every rank
 *   reads the same file and creates the same models), naming file:line
 *   and the nearest model name. */
#ifndef DDPH_JOB_CHECK_H
#define DDPH_JOB_CHECK_H

#include <stddef.h>

#include "support/config.h"
#include "support/util.h"

/* Receives each warning, a full line without "\n". */
typedef void (*ddph_warn_fn)(void *user, const char *msg);

/* The [hook.NAME] rules above; warn may be NULL. */
ddph_status ddph__job_check_hook_sections(const ddph_config *cfg,
                                          ddph_warn_fn warn, void *user,
                                          ddph_err *err);

/* DDPH_ERR_CONFIG for the first [model.NAME] section whose model is not
 * among the n names the trainer created. */
ddph_status ddph__job_check_models(const ddph_config *cfg,
                                   const char *const *created, size_t n,
                                   ddph_err *err);

#endif
