/* cli_internal.c: the hook probe of cli_internal.h. */
#include "build-config.h"

#include "core/cli_internal.h"

#include "comm/backend_mpi.h"
#include "plugin/hook.h"

struct ddph_hook_probe {
    ddph_mpi mpi;
    int open;
};

/* Static: a job that breaks leaves requests into its ddph_mpi pending
 * (ddph__mpi_finalize), so it must outlive the probe. */
static ddph_hook_probe probe;

ddph_status ddph__hook_probe_open(double timeout_s, ddph_hook_probe **out,
                                  ddph_err *err)
{
    if (probe.open)
        return ddph__fail(err, DDPH_ERR_STATE, "a hook probe is already open");
    ddph_status st = ddph__mpi_init(&probe.mpi, NULL, NULL, timeout_s, err);
    if (st != DDPH_OK)
        return st;
    probe.open = 1;
    *out = &probe;
    return DDPH_OK;
}

ddph_status ddph__hook_probe_create(ddph_hook_probe *p, const ddph_config *cfg,
                                    const char *name, int line,
                                    ddph_wrapper wrapper, const char *who,
                                    const ddph_logger *log, ddph_err *err)
{
    ddph_hook *h = NULL;
    ddph_status st = ddph__hook_create(cfg, name, line, wrapper, who,
                                       ddph__mpi_comm(&p->mpi), NULL, NULL,
                                       log, &h, err);
    ddph__hook_destroy(h);
    return st;
}

void ddph__hook_probe_close(ddph_hook_probe *p)
{
    if (!p || !p->open)
        return;
    ddph_err e;
    ddph__mpi_finalize(&p->mpi, &e);
    p->open = 0;
}
