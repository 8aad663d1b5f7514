/* services.h: the ddph_services table a hook instance is handed: the
 * collectives (services.c: the MPI backend, or the GPU module's NCCL),
 * the device operations and scratch memory (services_device.c: the CPU's,
 * or the GPU module's), logging and option access, all tied to the
 * instance through services.host. */
#ifndef DDPH_SERVICES_H
#define DDPH_SERVICES_H

#include "plugin/hook.h"

void ddph__services_init(ddph_hook *h);
/* Waits for (and ends) the nonblocking requests a plugin call left
 * outstanding; returns how many there were. */
int ddph__services_settle(ddph_hook *h);

#endif
