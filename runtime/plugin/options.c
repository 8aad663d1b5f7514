/* options.c: see options.h. */
#include "build-config.h"

#include "plugin/options.h"

#include <stdlib.h>
#include <string.h>

const char *ddph__option_type_name(ddph_option_type t)
{
    switch (t) {
    case DDPH_OPT_BOOL:
        return "bool";
    case DDPH_OPT_INT:
        return "int";
    case DDPH_OPT_REAL:
        return "real";
    case DDPH_OPT_STRING:
        return "string";
    }
    return "?";
}

static size_t schema_len(const ddph_option_spec *spec)
{
    size_t n = 0;
    while (spec && spec[n].name)
        n++;
    return n;
}

/* Parses text into v according to s; on failure writes why into `why`. */
static int parse_value(const ddph_option_spec *s, const char *text,
                       ddph_option_value *v, char *why, size_t whylen)
{
    char lo[DDPH__REAL_STR_LEN], hi[DDPH__REAL_STR_LEN];
    switch (s->type) {
    case DDPH_OPT_BOOL:
        if (!ddph__parse_bool(text, &v->b)) {
            snprintf(why, whylen, "'%s' is not true or false", text);
            return 0;
        }
        return 1;
    case DDPH_OPT_INT:
        if (!ddph__parse_int(text, &v->i)) {
            snprintf(why, whylen, "'%s' is not an integer", text);
            return 0;
        }
        if ((double)v->i < s->min || (double)v->i > s->max) {
            snprintf(why, whylen, "%s is out of range [%s, %s]", text,
                     ddph__real_str(s->min, lo), ddph__real_str(s->max, hi));
            return 0;
        }
        return 1;
    case DDPH_OPT_REAL:
        if (!ddph__parse_real(text, &v->r)) {
            snprintf(why, whylen, "'%s' is not a number", text);
            return 0;
        }
        if (v->r < s->min || v->r > s->max) {
            snprintf(why, whylen, "%s is out of range [%s, %s]", text,
                     ddph__real_str(s->min, lo), ddph__real_str(s->max, hi));
            return 0;
        }
        return 1;
    case DDPH_OPT_STRING:
        return 1;
    }
    snprintf(why, whylen, "option type %d is unknown", (int)s->type);
    return 0;
}

ddph_status ddph__options_check_schema(const char *plugin,
                                       const ddph_option_spec *spec,
                                       ddph_err *err)
{
    size_t n = schema_len(spec);
    for (size_t i = 0; i < n; i++) {
        const ddph_option_spec *s = &spec[i];
        char why[256];
        ddph_option_value v = {0};
        if (!*s->name)
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "plugin '%s': option %zu has an empty name",
                              plugin, i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(spec[j].name, s->name) == 0)
                return ddph__fail(err, DDPH_ERR_PLUGIN,
                                  "plugin '%s': option '%s' is declared twice",
                                  plugin, s->name);
        if (!s->doc || !*s->doc)
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "plugin '%s': option '%s' has no doc line",
                              plugin, s->name);
        if (!s->default_value)
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "plugin '%s': option '%s' has no default",
                              plugin, s->name);
        if ((s->type == DDPH_OPT_INT || s->type == DDPH_OPT_REAL) &&
            !(s->min <= s->max))
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "plugin '%s': option '%s' has min > max", plugin,
                              s->name);
        if (!parse_value(s, s->default_value, &v, why, sizeof why))
            return ddph__fail(err, DDPH_ERR_PLUGIN,
                              "plugin '%s': default of option '%s': %s",
                              plugin, s->name, why);
    }
    return DDPH_OK;
}

ddph_status ddph__options_build(const char *plugin,
                                const ddph_option_spec *spec,
                                const ddph_hook_section *section,
                                const char *file, ddph_options **out,
                                ddph_err *err)
{
    ddph_status st = ddph__options_check_schema(plugin, spec, err);
    if (st != DDPH_OK)
        return st;
    size_t n = schema_len(spec);
    ddph_options *o = calloc(1, sizeof *o);
    if (!o || !(o->values = calloc(n ? n : 1, sizeof *o->values))) {
        free(o);
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    }
    o->spec = spec;
    o->n = n;
    char why[256];
    for (size_t i = 0; i < n; i++) {
        parse_value(&spec[i], spec[i].default_value, &o->values[i], why,
                    sizeof why);
        o->values[i].s = ddph__strdup(spec[i].default_value);
        if (!o->values[i].s) {
            ddph__options_free(o);
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        }
    }
    for (size_t k = 0; section && k < section->nkv; k++) {
        const ddph_kv *kv = &section->kv[k];
        size_t i = 0;
        while (i < n && strcmp(spec[i].name, kv->key) != 0)
            i++;
        if (i == n) {
            const char **names = malloc((n ? n : 1) * sizeof *names);
            for (size_t j = 0; names && j < n; j++)
                names[j] = spec[j].name;
            const char *near = names ? ddph__nearest(kv->key, names, n) : NULL;
            if (near)
                st = ddph__fail(err, DDPH_ERR_OPTION,
                                "%s:%d: hook '%s' has no option '%s'; did you "
                                "mean '%s'?",
                                file, kv->line, plugin, kv->key, near);
            else
                st = ddph__fail(err, DDPH_ERR_OPTION,
                                "%s:%d: hook '%s' has no option '%s' (see "
                                "`ddphook describe %s`)",
                                file, kv->line, plugin, kv->key, plugin);
            free(names);
            ddph__options_free(o);
            return st;
        }
        ddph_option_value v = {0};
        if (!parse_value(&spec[i], kv->value, &v, why, sizeof why)) {
            ddph__options_free(o);
            return ddph__fail(err, DDPH_ERR_OPTION,
                              "%s:%d: [hook.%s] %s (%s): %s", file, kv->line,
                              section->hook, kv->key,
                              ddph__option_type_name(spec[i].type), why);
        }
        v.s = ddph__strdup(kv->value);
        v.line = kv->line;
        if (!v.s) {
            ddph__options_free(o);
            return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
        }
        free(o->values[i].s);
        o->values[i] = v;
    }
    *out = o;
    return DDPH_OK;
}

size_t ddph__options_each_error(const char *plugin,
                                const ddph_option_spec *spec,
                                const ddph_hook_section *section,
                                const char *file,
                                void (*report)(void *user, const char *msg),
                                void *user)
{
    ddph_err e;
    ddph_options *o;
    size_t bad = 0;
    if (ddph__options_check_schema(plugin, spec, &e) != DDPH_OK) {
        report(user, e.msg);
        return 1;
    }
    if (!section) {
        if (ddph__options_build(plugin, spec, NULL, file, &o, &e) != DDPH_OK)
            return report(user, e.msg), 1;
        ddph__options_free(o);
        return 0;
    }
    /* One key at a time: a refused key does not hide the next. */
    for (size_t k = 0; k < section->nkv; k++) {
        ddph_hook_section one = *section;
        one.kv = &section->kv[k];
        one.nkv = 1;
        if (ddph__options_build(plugin, spec, &one, file, &o, &e) != DDPH_OK) {
            report(user, e.msg);
            bad++;
        } else
            ddph__options_free(o);
    }
    return bad;
}

int ddph__options_line_named(const ddph_options *o, const char *text)
{
    for (size_t i = 0; o && i < o->n; i++) {
        const char *name = o->spec[i].name;
        size_t len = strlen(name);
        if (!o->values[i].line)
            continue;
        /* The name as a word, not inside a longer one. */
        for (const char *at = strstr(text, name); at; at = strstr(at + 1, name)) {
            char before = at == text ? ' ' : at[-1], after = at[len];
            int inside = (before == '_' || (before >= 'a' && before <= 'z')) ||
                         (after == '_' || (after >= 'a' && after <= 'z'));
            if (!inside)
                return o->values[i].line;
        }
    }
    return 0;
}

void ddph__options_free(ddph_options *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++)
        free(o->values[i].s);
    free(o->values);
    free(o);
}

void ddph__options_print(const ddph_options *o, FILE *out, const char *prefix)
{
    /* Values as values: "0.05" and "5e-2", "yes" and "true" are equal. */
    for (size_t i = 0; o && i < o->n; i++) {
        const ddph_option_value *v = &o->values[i];
        fprintf(out, "%s%s = ", prefix, o->spec[i].name);
        switch (o->spec[i].type) {
        case DDPH_OPT_BOOL:
            fprintf(out, "%s\n", v->b ? "true" : "false");
            break;
        case DDPH_OPT_INT:
            fprintf(out, "%lld\n", (long long)v->i);
            break;
        case DDPH_OPT_REAL:
            fprintf(out, "%.17g\n", v->r);
            break;
        default:
            fprintf(out, "%s\n", v->s);
        }
    }
}

static const ddph_option_value *find(const ddph_options *o, const char *name)
{
    for (size_t i = 0; o && i < o->n; i++)
        if (strcmp(o->spec[i].name, name) == 0)
            return &o->values[i];
    return NULL;
}

int ddph__opt_bool(const ddph_options *o, const char *name)
{
    const ddph_option_value *v = find(o, name);
    return v ? v->b : 0;
}

int64_t ddph__opt_int(const ddph_options *o, const char *name)
{
    const ddph_option_value *v = find(o, name);
    return v ? v->i : 0;
}

double ddph__opt_real(const ddph_options *o, const char *name)
{
    const ddph_option_value *v = find(o, name);
    return v ? v->r : 0;
}

const char *ddph__opt_string(const ddph_options *o, const char *name)
{
    const ddph_option_value *v = find(o, name);
    return v ? v->s : NULL;
}
