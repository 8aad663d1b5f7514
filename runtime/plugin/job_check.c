/* job_check.c: see job_check.h. */
#include "build-config.h"

#include "plugin/job_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"

/* The name a chosen hook answers to: itself, or for a path the name its
 * plugin declares (the file stem when it cannot be loaded now: why goes
 * to *why, the first such hook's, at its line, for a section that then
 * names no hook; otherwise loading it for real reports it later, with
 * the model). */
static char *hook_name_of(const ddph_config *cfg, const char *value, int line,
                          ddph_err *why, int *failed)
{
    if (!strchr(value, '/'))
        return ddph__strdup(value);
    ddph_plugin *p;
    ddph_err e;
    if (ddph__plugin_load(value, NULL, cfg->allow_insecure_plugins, &p, &e) ==
        DDPH_OK) {
        char *name = ddph__strdup(p->api.name);
        ddph__plugin_unload(p);
        return name;
    }
    if (!*failed) {
        *failed = 1;
        ddph__fail(why, DDPH_ERR_CONFIG, "%s:%d: %s", cfg->path, line, e.msg);
    }
    const char *base = strrchr(value, '/') + 1;
    char *name = ddph__strdup(base);
    if (name && strlen(name) > 3 && strcmp(name + strlen(name) - 3, ".so") == 0)
        name[strlen(name) - 3] = '\0';
    return name;
}

static int in_list(const char *name, char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] && strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* Whether the path `value` names a file `hook`.so: a hook loaded by
 * path whose file was renamed without its declared name. */
static int stem_is(const char *value, const char *hook)
{
    const char *slash = strrchr(value, '/');
    if (!slash)
        return 0;
    size_t n = strlen(hook);
    return strncmp(slash + 1, hook, n) == 0 && strcmp(slash + 1 + n, ".so") == 0;
}

ddph_status ddph__job_check_hook_sections(const ddph_config *cfg,
                                          ddph_warn_fn warn, void *user,
                                          ddph_err *err)
{
    if (cfg->nhook_sections == 0)
        return DDPH_OK;
    size_t nchosen = 1 + cfg->nmodels;
    char **used = calloc(nchosen, sizeof *used);
    if (!used)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    ddph_err unloadable;
    int failed = 0;
    used[0] = hook_name_of(cfg, cfg->hook_name, cfg->hook_line, &unloadable,
                           &failed);
    for (size_t i = 0; i < cfg->nmodels; i++)
        if (cfg->models[i].hook)
            used[1 + i] = hook_name_of(cfg, cfg->models[i].hook,
                                       cfg->models[i].hook_line, &unloadable,
                                       &failed);
    char **found;
    size_t nfound = ddph__plugin_names(cfg->plugin_path, &found);
    /* Suggestions come from both lists. */
    const char **cands = calloc(nchosen + nfound + 1, sizeof *cands);
    size_t ncands = 0;
    for (size_t i = 0; cands && i < nchosen; i++)
        if (used[i])
            cands[ncands++] = used[i];
    for (size_t i = 0; cands && i < nfound; i++)
        cands[ncands++] = found[i];
    ddph_status st = cands ? DDPH_OK
                           : ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == DDPH_OK && i < cfg->nhook_sections; i++) {
        const ddph_hook_section *hs = &cfg->hook_sections[i];
        if (in_list(hs->hook, used, nchosen))
            continue;
        if (in_list(hs->hook, found, nfound)) {
            if (warn) {
                char msg[DDPH__ERR_LEN];
                snprintf(msg, sizeof msg,
                         "%s:%d: [hook.%s]: no model of this job uses hook "
                         "'%s' ([hook] name = %s), so these options are "
                         "ignored",
                         cfg->path, hs->line, hs->hook, hs->hook,
                         cfg->hook_name);
                warn(user, msg);
            }
            continue;
        }
        if (failed) { /* the section may be that hook's: the cause first */
            st = ddph__fail(err, DDPH_ERR_CONFIG, "%s", unloadable.msg);
            break;
        }
        for (size_t j = 0; j < nchosen && st == DDPH_OK; j++) {
            const char *value = j == 0 ? cfg->hook_name
                                       : cfg->models[j - 1].hook;
            if (value && used[j] && stem_is(value, hs->hook))
                st = ddph__fail(err, DDPH_ERR_CONFIG,
                                "%s:%d: [hook.%s]: %s declares itself hook "
                                "'%s' (its name in ddph_plugin_v1, not its "
                                "file's), so its options go under "
                                "[hook.%s]",
                                cfg->path, hs->line, hs->hook, value,
                                used[j], used[j]);
        }
        if (st != DDPH_OK)
            break;
        const char *near = ddph__nearest(hs->hook, cands, ncands);
        char hint[160] = "";
        if (near)
            snprintf(hint, sizeof hint, "; did you mean [hook.%s]?", near);
        st = ddph__fail(err, DDPH_ERR_CONFIG,
                        "%s:%d: [hook.%s]: no hook '%s' along plugin_path "
                        "(%s)%s",
                        cfg->path, hs->line, hs->hook, hs->hook,
                        cfg->plugin_path, hint);
    }
    free(cands);
    ddph__names_free(found, nfound);
    ddph__names_free(used, nchosen);
    return st;
}

ddph_status ddph__job_check_models(const ddph_config *cfg,
                                   const char *const *created, size_t n,
                                   ddph_err *err)
{
    for (size_t i = 0; i < cfg->nmodels; i++) {
        const ddph_model_section *ms = &cfg->models[i];
        int seen = 0;
        for (size_t j = 0; j < n && !seen; j++)
            seen = strcmp(created[j], ms->model) == 0;
        if (seen)
            continue;
        const char *near = ddph__nearest(ms->model, created, n);
        char hint[160] = "";
        if (near)
            snprintf(hint, sizeof hint, "; did you mean [model.%s]?", near);
        return ddph__fail(err, DDPH_ERR_CONFIG,
                          "%s:%d: [model.%s]: the trainer created no model "
                          "'%s' before its first step, so this section would "
                          "never apply%s",
                          cfg->path, ms->line, ms->model, ms->model, hint);
    }
    return DDPH_OK;
}
