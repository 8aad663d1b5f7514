/* presets.c: see presets.h. */
#include "build-config.h"

#include "presets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct list {
    preset_param *p;
    int n, cap;
} list;

static void add(list *l, const char *name, int ndim, int64_t a, int64_t b,
                int64_t c, int64_t d)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->p = realloc(l->p, (size_t)l->cap * sizeof *l->p);
    }
    preset_param *p = &l->p[l->n++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    int64_t s[4] = {a, b, c, d};
    memcpy(p->shape, s, sizeof s);
}

static void gpt2(list *l)
{
    const int64_t C = 768, V = 50257, T = 1024;
    char n[48];
    add(l, "wte", 2, V, C, 0, 0);
    add(l, "wpe", 2, T, C, 0, 0);
    for (int i = 0; i < 12; i++) {
#define P(suffix, ...) (snprintf(n, sizeof n, "h%d.%s", i, suffix), add(l, n, __VA_ARGS__))
        P("ln_1.weight", 1, C, 0, 0, 0);
        P("ln_1.bias", 1, C, 0, 0, 0);
        P("attn.c_attn.weight", 2, C, 3 * C, 0, 0);
        P("attn.c_attn.bias", 1, 3 * C, 0, 0, 0);
        P("attn.c_proj.weight", 2, C, C, 0, 0);
        P("attn.c_proj.bias", 1, C, 0, 0, 0);
        P("ln_2.weight", 1, C, 0, 0, 0);
        P("ln_2.bias", 1, C, 0, 0, 0);
        P("mlp.c_fc.weight", 2, C, 4 * C, 0, 0);
        P("mlp.c_fc.bias", 1, 4 * C, 0, 0, 0);
        P("mlp.c_proj.weight", 2, 4 * C, C, 0, 0);
        P("mlp.c_proj.bias", 1, C, 0, 0, 0);
#undef P
    }
    add(l, "ln_f.weight", 1, C, 0, 0, 0);
    add(l, "ln_f.bias", 1, C, 0, 0, 0);
}

static void conv_bn(list *l, const char *prefix, int64_t out, int64_t in,
                    int64_t k)
{
    char n[48];
    snprintf(n, sizeof n, "%s.conv", prefix);
    add(l, n, 4, out, in, k, k);
    snprintf(n, sizeof n, "%s.bn.weight", prefix);
    add(l, n, 1, out, 0, 0, 0);
    snprintf(n, sizeof n, "%s.bn.bias", prefix);
    add(l, n, 1, out, 0, 0, 0);
}

static void resnet50(list *l)
{
    static const int blocks[4] = {3, 4, 6, 3};
    conv_bn(l, "stem", 64, 3, 7);
    int64_t in = 64;
    for (int s = 0; s < 4; s++) {
        int64_t w = 64 << s;
        for (int b = 0; b < blocks[s]; b++) {
            char p[32];
            snprintf(p, sizeof p, "layer%d.%d.a", s + 1, b);
            conv_bn(l, p, w, in, 1);
            snprintf(p, sizeof p, "layer%d.%d.b", s + 1, b);
            conv_bn(l, p, w, w, 3);
            snprintf(p, sizeof p, "layer%d.%d.c", s + 1, b);
            conv_bn(l, p, 4 * w, w, 1);
            if (b == 0) {
                snprintf(p, sizeof p, "layer%d.%d.down", s + 1, b);
                conv_bn(l, p, 4 * w, in, 1);
            }
            in = 4 * w;
        }
    }
    add(l, "fc.weight", 2, 1000, 2048, 0, 0);
    add(l, "fc.bias", 1, 1000, 0, 0, 0);
}

static void mlp(list *l)
{
    add(l, "fc1.weight", 2, 512, 784, 0, 0);
    add(l, "fc1.bias", 1, 512, 0, 0, 0);
    add(l, "fc2.weight", 2, 256, 512, 0, 0);
    add(l, "fc2.bias", 1, 256, 0, 0, 0);
    add(l, "fc3.weight", 2, 10, 256, 0, 0);
    add(l, "fc3.bias", 1, 10, 0, 0, 0);
}

int preset_load(const char *name, preset_param **out, int *n)
{
    list l = {0};
    if (strcmp(name, "gpt2-124m") == 0)
        gpt2(&l);
    else if (strcmp(name, "resnet50") == 0)
        resnet50(&l);
    else if (strcmp(name, "mlp") == 0)
        mlp(&l);
    else
        return 0;
    *out = l.p;
    *n = l.n;
    return 1;
}

size_t preset_numel(const preset_param *p, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t e = 1;
        for (int d = 0; d < p[i].ndim; d++)
            e *= (size_t)p[i].shape[d];
        total += e;
    }
    return total;
}
