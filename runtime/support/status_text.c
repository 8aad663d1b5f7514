/* status_text.c: names and messages of ddph_status, from the one X-macro
 * table in ddphook/status.h.  The switches have no default, so -Wall
 * (-Wswitch) flags a code added without a message. */
#include "build-config.h"

#include "support/status_text.h"

/* The public declarations: a prototype that differs from status_text.h's
 * is a compile error here. */
#include <ddphook/ddphook.h>

const char *ddph_strerror(ddph_status status)
{
    switch (status) {
#define DDPH__STATUS_MSG(name, value, msg)                                   \
    case DDPH_##name:                                                        \
        return msg;
        DDPH_STATUS_MAP(DDPH__STATUS_MSG)
#undef DDPH__STATUS_MSG
    }
    return "unknown status";
}

const char *ddph_status_name(ddph_status status)
{
    switch (status) {
#define DDPH__STATUS_NAME(name, value, msg)                                  \
    case DDPH_##name:                                                        \
        return "DDPH_" #name;
        DDPH_STATUS_MAP(DDPH__STATUS_NAME)
#undef DDPH__STATUS_NAME
    }
    return "DDPH_UNKNOWN";
}
