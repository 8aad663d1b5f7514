/* log.c: see log.h.  One fprintf per line so ranks sharing a terminal do
 * not interleave within a line. */
#include "build-config.h"

#include "support/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void ddph__logger_init(ddph_logger *lg)
{
    lg->level = DDPH_LOG_WARN;
    lg->rank = -1;
    const char *env = getenv("DDPHOOK_LOG");
    if (!env || !*env)
        return;
    for (int i = 0; i < 4; i++) {
        if (strcmp(env, level_names[i]) == 0) {
            lg->level = (ddph_log_level)i;
            return;
        }
    }
    fprintf(stderr,
            "ddphook: warning: DDPHOOK_LOG=%s is not one of "
            "debug|info|warn|error; using warn\n",
            env);
}

void ddph__vlog(const ddph_logger *lg, ddph_log_level level,
                const char *prefix, const char *fmt, va_list ap)
{
    if (level < lg->level)
        return;
    char line[4096];
    vsnprintf(line, sizeof line, fmt, ap);
    char who[32] = "";
    if (lg->rank >= 0)
        snprintf(who, sizeof who, "[rank %d]", lg->rank);
    fprintf(stderr, "ddphook%s: %s%s%s%s\n", who,
            level == DDPH_LOG_DEBUG || level == DDPH_LOG_INFO ? ""
                                                              : level_names[level],
            level >= DDPH_LOG_WARN ? ": " : "", prefix ? prefix : "", line);
}

void ddph__log(const ddph_logger *lg, ddph_log_level level, const char *fmt,
               ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddph__vlog(lg, level, NULL, fmt, ap);
    va_end(ap);
}
