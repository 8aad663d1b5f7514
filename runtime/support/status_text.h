/* status_text.h: the name and the message of each ddph_status, for every
 * layer's errors and logs.  These are the public ddph_strerror and
 * ddph_status_name of <ddphook/ddphook.h>, declared here too so that the
 * layers below core need not include the trainer's API to name a status;
 * status_text.c includes both headers, so the compiler holds the two
 * declarations equal. */
#ifndef DDPH_STATUS_TEXT_H
#define DDPH_STATUS_TEXT_H

#include <ddphook/status.h>

/* Generic message for a status ("invalid job configuration"); never NULL.
 * Static storage. */
const char *ddph_strerror(ddph_status status);
/* Symbolic name of a status ("DDPH_ERR_CONFIG"); never NULL. */
const char *ddph_status_name(ddph_status status);

#endif
