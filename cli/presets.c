/* presets.c: see presets.h. */
#include "build-config.h"

#include "presets.h"
#include "trace.h"

#include <errno.h>
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

/* ResNet-18 for 32x32 images (CIFAR-10), as the PowerSGD paper's code
 * (epfml/powersgd) and most CIFAR code define it: a 3x3 stem, no pool,
 * basic blocks of two 3x3 convs, 1x1 shortcuts where the width
 * changes, 10 classes. */
static void resnet18_cifar(list *l)
{
    conv_bn(l, "stem", 64, 3, 3);
    int64_t in = 64;
    for (int s = 0; s < 4; s++) {
        int64_t w = 64 << s;
        for (int b = 0; b < 2; b++) {
            char p[32];
            snprintf(p, sizeof p, "layer%d.%d.a", s + 1, b);
            conv_bn(l, p, w, in, 3);
            snprintf(p, sizeof p, "layer%d.%d.b", s + 1, b);
            conv_bn(l, p, w, w, 3);
            if (in != w) {
                snprintf(p, sizeof p, "layer%d.%d.shortcut", s + 1, b);
                conv_bn(l, p, w, in, 1);
            }
            in = w;
        }
    }
    add(l, "fc.weight", 2, 10, 512, 0, 0);
    add(l, "fc.bias", 1, 10, 0, 0, 0);
}

/* The PowerSGD paper's language model (Vogels et al. 2019; its code's
 * define_model): a 3-layer LSTM of 650 units on 650-wide embeddings, the
 * decoder's weight tied to the encoder's, registered as PyTorch's
 * RNNModel registers them; WikiText-2's vocabulary of 33,278 words
 * (Merity et al. 2016). */
#define LSTM_VOCAB 33278
static void lstm_wikitext2(list *l)
{
    add(l, "encoder.weight", 2, LSTM_VOCAB, 650, 0, 0);
    for (int k = 0; k < 3; k++) {
        char p[48];
        snprintf(p, sizeof p, "rnn.weight_ih_l%d", k);
        add(l, p, 2, 4 * 650, 650, 0, 0);
        snprintf(p, sizeof p, "rnn.weight_hh_l%d", k);
        add(l, p, 2, 4 * 650, 650, 0, 0);
        snprintf(p, sizeof p, "rnn.bias_ih_l%d", k);
        add(l, p, 1, 4 * 650, 0, 0, 0);
        snprintf(p, sizeof p, "rnn.bias_hh_l%d", k);
        add(l, p, 1, 4 * 650, 0, 0, 0);
    }
    add(l, "decoder.bias", 1, LSTM_VOCAB, 0, 0, 0);
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

/* examples/train_gpt with its default configuration (vocab 256, context
 * 64, width 128, 4 layers), registered as train_gpt registers it. */
static void gpt_example(list *l)
{
    const int64_t V = 256, T = 64, C = 128;
    char n[48];
    add(l, "wte", 2, V, C, 0, 0);
    add(l, "wpe", 2, T, C, 0, 0);
    for (int i = 0; i < 4; i++) {
#define P(suffix, ...) (snprintf(n, sizeof n, "h%d.%s", i, suffix), add(l, n, __VA_ARGS__))
        P("ln1w", 1, C, 0, 0, 0);
        P("ln1b", 1, C, 0, 0, 0);
        P("qkvw", 2, 3 * C, C, 0, 0);
        P("qkvb", 1, 3 * C, 0, 0, 0);
        P("attprojw", 2, C, C, 0, 0);
        P("attprojb", 1, C, 0, 0, 0);
        P("ln2w", 1, C, 0, 0, 0);
        P("ln2b", 1, C, 0, 0, 0);
        P("fcw", 2, 4 * C, C, 0, 0);
        P("fcb", 1, 4 * C, 0, 0, 0);
        P("fcprojw", 2, C, 4 * C, 0, 0);
        P("fcprojb", 1, C, 0, 0, 0);
#undef P
    }
    add(l, "lnfw", 1, C, 0, 0, 0);
    add(l, "lnfb", 1, C, 0, 0, 0);
}

int preset_load(const char *name, preset_param **out, int *n)
{
    list l = {0};
    if (strcmp(name, "gpt2-124m") == 0)
        gpt2(&l);
    else if (strcmp(name, "gpt-example") == 0)
        gpt_example(&l);
    else if (strcmp(name, "resnet50") == 0)
        resnet50(&l);
    else if (strcmp(name, "mlp") == 0)
        mlp(&l);
    else if (strcmp(name, "resnet18-cifar") == 0)
        resnet18_cifar(&l);
    else if (strcmp(name, "lstm-wikitext2") == 0)
        lstm_wikitext2(&l);
    else
        return 0;
    *out = l.p;
    *n = l.n;
    return 1;
}

int preset_read_file(const char *path, preset_param **out, int *n,
                     char *msg, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(msg, cap, "%s: %s", path, strerror(errno));
        return 0;
    }
    list l = {0};
    char line[1024];
    int lineno = 0, ok = 1;
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(msg, cap, "%s:%d: line longer than %zu characters", path,
                     lineno, sizeof line - 2);
            ok = 0;
            break;
        }
        char *save = NULL, *name = strtok_r(line, " \t\r\n", &save);
        if (!name || name[0] == '#')
            continue;
        if (strlen(name) >= sizeof l.p->name) {
            snprintf(msg, cap, "%s:%d: name longer than %zu characters", path,
                     lineno, sizeof l.p->name - 1);
            ok = 0;
            break;
        }
        int64_t s[4] = {1, 1, 1, 1};
        int nd = 0;
        for (char *t; (t = strtok_r(NULL, " \t\r\n", &save));) {
            char *end;
            errno = 0;
            long long v = strtoll(t, &end, 10);
            if (errno || *end || v < 1 || v > ((int64_t)1 << 40)) {
                snprintf(msg, cap, "%s:%d: '%s' is not a dimension (1 .. "
                         "2^40)", path, lineno, t);
                ok = 0;
                break;
            }
            if (nd < 4)
                s[nd++] = v;
            else /* fold extra dimensions into the last */
                s[3] *= v;
        }
        if (ok && nd == 0) {
            snprintf(msg, cap, "%s:%d: %s has no dimensions (NAME D0 [D1 "
                     "...])", path, lineno, name);
            ok = 0;
        }
        if (ok) {
            add(&l, name, nd, s[0], s[1], s[2], s[3]);
            if (preset_numel(&l.p[l.n - 1], 1) > ((size_t)1 << 40)) {
                snprintf(msg, cap, "%s:%d: %s has more than 2^40 elements",
                         path, lineno, name);
                ok = 0;
            }
        }
    }
    if (ok && ferror(f)) {
        snprintf(msg, cap, "%s: read error", path);
        ok = 0;
    }
    fclose(f);
    if (ok && l.n == 0) {
        snprintf(msg, cap, "%s: no parameters (lines of NAME D0 [D1 ...])",
                 path);
        ok = 0;
    }
    if (!ok) {
        free(l.p);
        return 0;
    }
    *out = l.p;
    *n = l.n;
    return 1;
}

int preset_from_trace(const char *dir, preset_param **out, int *n,
                      ddph_dtype *dtype, char *msg, size_t cap)
{
    trace tr;
    if (!trace_open(dir, &tr, msg, cap))
        return 0;
    preset_param *pp = calloc(tr.nparams ? (size_t)tr.nparams : 1, sizeof *pp);
    if (!pp) {
        snprintf(msg, cap, "out of memory");
        trace_close(&tr);
        return 0;
    }
    for (int i = 0; i < tr.nparams; i++) {
        snprintf(pp[i].name, sizeof pp[i].name, "%s", tr.params[i].name);
        pp[i].ndim = tr.params[i].ndim > 4 ? 4 : tr.params[i].ndim;
        memcpy(pp[i].shape, tr.params[i].shape, sizeof pp[i].shape);
        for (int d = 4; d < tr.params[i].ndim; d++) /* fold extra dims */
            pp[i].shape[3] *= tr.params[i].shape[d];
    }
    *out = pp;
    *n = tr.nparams;
    *dtype = tr.dtype;
    trace_close(&tr);
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

int preset_work_of(const char *name, preset_work *out)
{
    static const struct {
        const char *name;
        preset_work w;
    } works[] = {
        /* 6 N T + 12 L T^2 C for training (Kaplan et al. 2020, PaLM's
         * appendix B): a third of it forward. */
        {"gpt2-124m", {2.0 * 124.4e6 * 1024 + 4.0 * 12 * 1024.0 * 1024 * 768,
                       8, "sequence of 1024 tokens",
                       "2 N T + 4 L T^2 C (Kaplan et al. 2020)"}},
        {"resnet50", {2 * 4.09e9, 32, "224x224 image",
                      "4.09 G multiply-adds (He et al. 2016)"}},
        {"gpt-example", {2.0 * 834304 * 64 + 4.0 * 4 * 64 * 64 * 128, 8,
                         "sequence of 64 tokens", "2 N T + 4 L T^2 C"}},
        {"resnet18-cifar", {2 * 0.556e9, 128, "32x32 image",
                            "0.556 G multiply-adds (CIFAR ResNet-18)"}},
        /* A token: the 3 layers' 8 products of 650 x 650 and the tied
         * decoder's 650 x vocabulary; 30 tokens a sequence (BPTT), 64
         * sequences a GPU (the paper's code). */
        {"lstm-wikitext2", {2.0 * 30 * (3 * 8 * 650.0 * 650 + 650.0 * LSTM_VOCAB),
                            64, "sequence of 30 tokens",
                            "2 FLOPs a multiply-add of the LSTM's and decoder's products"}},
        {"mlp", {2.0 * (784 * 512 + 512 * 256 + 256 * 10), 64,
                 "28x28 image", "2 FLOPs a weight (dense layers)"}},
    };
    for (size_t i = 0; i < sizeof works / sizeof works[0]; i++)
        if (strcmp(name, works[i].name) == 0) {
            *out = works[i].w;
            return 1;
        }
    return 0;
}

const preset_device *preset_device_find(const char *name)
{
    /* NVIDIA's data sheets: SXM parts, dense (no sparsity) rates. */
    static const preset_device devices[] = {
        {"v100", "V100 SXM2", 125e12, 15.7e12, 900e9, 150e9},
        {"a100", "A100 SXM 80GB", 312e12, 19.5e12, 2039e9, 300e9},
        {"h100", "H100 SXM", 989e12, 67e12, 3350e9, 450e9},
    };
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
        if (strcmp(name, devices[i].name) == 0)
            return &devices[i];
    return NULL;
}
