/* cli_internal.c: the hook probe of cli_internal.h. */
#include "build-config.h"

#include "core/cli_internal.h"

#include "backends/registry.h"
#include "plugin/hook.h"

struct ddph_hook_probe {
    ddph_backend job; /* the launcher's job backend */
    int open;
};

/* Static, and its state never freed on a broken job: a job that breaks
 * leaves requests pending into it (backend.h, close). */
static ddph_hook_probe probe;

ddph_status ddph__hook_probe_open(double timeout_s, ddph_hook_probe **out,
                                  ddph_err *err)
{
    if (probe.open)
        return ddph__fail(err, DDPH_ERR_STATE, "a hook probe is already open");
    ddph_status st = ddph__backend_load_job(ddph__backend_launched(),
                                            &probe.job.ops, err);
    const ddph_backend_args args = {.timeout_s = timeout_s};
    if (st == DDPH_OK)
        st = probe.job.ops->open(&args, &probe.job.state, err);
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
    ddph_status st = ddph__hook_create(
        cfg, name, line, wrapper, who, p->job.ops->comm(p->job.state), NULL,
        NULL, log, &h, err);
    ddph__hook_destroy(h);
    return st;
}

void ddph__hook_probe_close(ddph_hook_probe *p)
{
    if (!p || !p->open)
        return;
    ddph_err e;
    p->job.ops->close(p->job.state, &e);
    p->open = 0;
}
