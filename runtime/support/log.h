/* log.h: the runtime's logger.  The level comes from DDPHOOK_LOG
 * (debug|info|warn|error; default warn); every line is prefixed with
 * "ddphook[rank R]".  A logger lives in its context: no global state. */
#ifndef DDPH_LOG_H
#define DDPH_LOG_H

#include <stdarg.h>

#include <ddphook/types.h>

typedef struct ddph_logger {
    ddph_log_level level;
    int rank; /* -1 before MPI is up */
} ddph_logger;

/* Reads DDPHOOK_LOG; an unknown value keeps the default and warns once. */
void ddph__logger_init(ddph_logger *lg);
void ddph__log(const ddph_logger *lg, ddph_log_level level, const char *fmt,
               ...) __attribute__((format(printf, 3, 4)));
void ddph__vlog(const ddph_logger *lg, ddph_log_level level,
                const char *prefix, const char *fmt, va_list ap);

#endif
