/* config_write.c: job files written by the runtime: the resolved job
 * (ddph__config_print, what `ddphook check --verbose` and ddph_describe
 * show) and single keys (ddph__config_write_kv). */
#include "build-config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "support/config.h"
#include "support/config_keys.h"

int ddph__config_write_kv(FILE *f, const char *key, const char *value)
{
    /* Well inside inih's 198 characters, with room for the indent. */
    enum { PIECE = 120 };
    if (fprintf(f, "%s = ", key) < 0)
        return 0;
    size_t n = strlen(value);
    while (n > PIECE) {
        size_t cut = PIECE;
        while (cut > PIECE / 2 && value[cut - 1] != '/' && value[cut - 1] != ':')
            cut--;
        while (cut < n && (isspace((unsigned char)value[cut]) ||
                           isspace((unsigned char)value[cut - 1])))
            cut++;
        if (fprintf(f, "%.*s\n    ", (int)cut, value) < 0)
            return 0;
        value += cut;
        n -= cut;
    }
    return fprintf(f, "%s\n", value) >= 0;
}

void ddph__config_print(const ddph_config *cfg, FILE *out)
{
    const char *section = "";
    const char *base = (const char *)cfg;
    fprintf(out, "; resolved from %s\n", cfg->path);
    for (size_t i = 0; i < ddph__config_nkeys; i++) {
        const key_spec *k = &ddph__config_keys[i];
        if (strcmp(section, k->section) != 0) {
            fprintf(out, "%s[%s]\n", i ? "\n" : "", k->section);
            section = k->section;
        }
        if (k->type == K_STRING && !*(char *const *)(base + k->offset)) {
            fprintf(out, "; %s = (not set)  ; %s\n", k->key, k->doc);
            continue;
        }
        fprintf(out, "%s = ", k->key);
        switch (k->type) {
        case K_REAL:
            if (k->auto_ok && *(const double *)(base + k->offset) == DDPH_CAP_AUTO)
                fputs("auto", out);
            else
                fprintf(out, "%.17g", *(const double *)(base + k->offset));
            break;
        case K_INT:
            fprintf(out, "%d", *(const int *)(base + k->offset));
            break;
        case K_BOOL:
            fputs(*(const int *)(base + k->offset) ? "true" : "false", out);
            break;
        case K_STRING:
            fputs(*(char *const *)(base + k->offset), out);
            break;
        case K_BACKEND:
            fputs(cfg->backend, out);
            break;
        case K_WRAPPER:
            fputs(ddph__wrapper_name(cfg->wrapper), out);
            break;
        }
        fprintf(out, "%*s; %s\n", 1, "", k->doc);
    }
    for (size_t i = 0; i < cfg->nmodels; i++) {
        const ddph_model_section *m = &cfg->models[i];
        fprintf(out, "\n[model.%s]\n", m->model);
        if (m->hook)
            fprintf(out, "hook = %s\n", m->hook);
        if (m->wrapper_set)
            fprintf(out, "wrapper = %s\n", ddph__wrapper_name(m->wrapper));
        if (m->accumulate_steps)
            fprintf(out, "accumulate_steps = %d\n", m->accumulate_steps);
    }
}
