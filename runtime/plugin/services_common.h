/* services_common.h: what services.c (the collectives) and
 * services_device.c (arithmetic and memory) share. */
#ifndef DDPH_SERVICES_COMMON_H
#define DDPH_SERVICES_COMMON_H

#include <string.h>

#include "backends/gpu.h"
#include "plugin/hook.h"

/* With backend = nccl every bucket is in GPU memory: the calls go to the
 * GPU module's table (NCCL and the CUDA kernels). */
#define ON_GPU(h) ((h)->gpu != NULL)
#define GPU(h) ((h)->gpu_ops)

static inline ddph_hook *host(const ddph_services *s)
{
    return s->host;
}

/* A backend call's status; its message, on failure, lands in the
 * instance's per-call message. */
static inline ddph_status keep(ddph_hook *h, ddph_status st, const ddph_err *e)
{
    if (st != DDPH_OK)
        memcpy(h->message, e->msg, sizeof h->message);
    return st;
}

/* Fills the arithmetic and memory members of s (services_device.c). */
void ddph__services_device_init(ddph_services *s);

#endif
