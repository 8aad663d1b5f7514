/* options.h: a hook's options: its schema (declared by the plugin) checked
 * for sanity, and the [hook.NAME] keys of the job INI validated against it
 * (unknown key with a suggestion, wrong type, out of range: file and
 * line).  The result is the opaque ddph_options handed to create(). */
#ifndef DDPH_OPTIONS_H
#define DDPH_OPTIONS_H

#include <stdio.h>

#include <ddphook/plugin.h>

#include "support/config.h"
#include "support/util.h"

typedef struct ddph_option_value {
    int b;
    int64_t i;
    double r;
    char *s;     /* the value as text (default or INI) */
    int line;    /* 0 = default */
} ddph_option_value;

struct ddph_options {
    const ddph_option_spec *spec;
    size_t n;
    ddph_option_value *values;
};

/* Checks the plugin's own table: names present and unique, known types,
 * defaults that parse and lie in range, docs present. */
ddph_status ddph__options_check_schema(const char *plugin,
                                       const ddph_option_spec *spec,
                                       ddph_err *err);
/* Builds the option set from defaults and `section` (may be NULL);
 * `file` is the INI path for messages. */
ddph_status ddph__options_build(const char *plugin,
                                const ddph_option_spec *spec,
                                const ddph_hook_section *section,
                                const char *file, ddph_options **out,
                                ddph_err *err);
void ddph__options_free(ddph_options *o);
/* Every key of `section` that ddph__options_build would refuse, each
 * message given to report in the file's line order; returns how many. */
size_t ddph__options_each_error(const char *plugin,
                                const ddph_option_spec *spec,
                                const ddph_hook_section *section,
                                const char *file,
                                void (*report)(void *user, const char *msg),
                                void *user);
/* The job-file line of the option set in the file whose name `text`
 * mentions (a hook's create() message names the option it refuses), or
 * 0 when none is. */
int ddph__options_line_named(const ddph_options *o, const char *text);
/* "k=v" lines, one per option, in schema order. */
void ddph__options_print(const ddph_options *o, FILE *out,
                         const char *prefix);
const char *ddph__option_type_name(ddph_option_type t);

/* The accessors in the services table. */
int ddph__opt_bool(const ddph_options *o, const char *name);
int64_t ddph__opt_int(const ddph_options *o, const char *name);
double ddph__opt_real(const ddph_options *o, const char *name);
const char *ddph__opt_string(const ddph_options *o, const char *name);

#endif
