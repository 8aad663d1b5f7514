/* config_values.c: the values of a job file (booleans, integers, reals,
 * wrapper names: config.h), and a parsed configuration's lookups and
 * release. */
#include "build-config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "support/config.h"

int ddph__parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 1;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 1;
        }
    }
    return 0;
}

int ddph__parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE)
        return 0;
    *out = v;
    return 1;
}

int ddph__parse_real(const char *s, double *out)
{
    char *end;
    /* Decimal only: strtod would also take hex ("0x10"). */
    if (strpbrk(s, "xXpP"))
        return 0;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

const char *ddph__wrapper_name(ddph_wrapper w)
{
    switch (w) {
    case DDPH_WRAP_NONE:
        return "none";
    case DDPH_WRAP_FP16:
        return "fp16";
    case DDPH_WRAP_BF16:
        return "bf16";
    }
    return "?";
}

/* ---- a parsed configuration -------------------------------------------- */

void ddph__config_free(ddph_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    free(cfg->plugin_path);
    free(cfg->hook_name);
    free(cfg->trace);
    for (size_t i = 0; i < cfg->nhook_sections; i++) {
        ddph_hook_section *hs = &cfg->hook_sections[i];
        for (size_t j = 0; j < hs->nkv; j++) {
            free(hs->kv[j].key);
            free(hs->kv[j].value);
        }
        free(hs->kv);
        free(hs->hook);
    }
    free(cfg->hook_sections);
    for (size_t i = 0; i < cfg->nmodels; i++) {
        free(cfg->models[i].model);
        free(cfg->models[i].hook);
    }
    free(cfg->models);
    memset(cfg, 0, sizeof *cfg);
}

const ddph_hook_section *ddph__config_hook_section(const ddph_config *cfg,
                                                   const char *hook)
{
    for (size_t i = 0; i < cfg->nhook_sections; i++)
        if (strcmp(cfg->hook_sections[i].hook, hook) == 0)
            return &cfg->hook_sections[i];
    return NULL;
}

const ddph_model_section *ddph__config_model(const ddph_config *cfg,
                                             const char *model)
{
    for (size_t i = 0; i < cfg->nmodels; i++)
        if (strcmp(cfg->models[i].model, model) == 0)
            return &cfg->models[i];
    return NULL;
}
