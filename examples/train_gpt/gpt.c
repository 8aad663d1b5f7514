/* gpt.c: see gpt.h.  Row-major throughout; a linear layer's weight is
 * out x in, as PyTorch's nn.Linear keeps it. */
#include "gpt.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* SLEEF's four-lane expf on x86-64 (SSE2 is its baseline); elsewhere, and
 * in the double build, libm's expf one at a time. */
#if defined(HAVE_SLEEF) && !defined(GPT_DOUBLE) && defined(__SSE2__)
#include <sleef.h>
#define GPT_SLEEF 1
#endif

/* Element-wise math in the model's own precision: in float, as PyTorch
 * does on the CPU. */
#ifdef GPT_DOUBLE
#define GEMM cblas_dgemm
#define EXP exp
#else
#define GEMM cblas_sgemm
#define EXP expf
#endif

/* ---- parameters ------------------------------------------------------------ */

static const char *const tensor_names[GPT_NTENSORS] = {
    "wte",      "wpe",   "ln1w", "ln1b", "qkvw",       "qkvb",
    "attprojw", "attprojb", "ln2w", "ln2b", "fcw",      "fcb",
    "fcprojw",  "fcprojb",  "lnfw", "lnfb",
};

const char *gpt_tensor_name(int t) { return tensor_names[t]; }

int gpt_per_layer(int t) { return t >= GPT_LN1W && t <= GPT_FCPROJB; }

/* Slices of tensor t: one per layer, or the whole tensor. */
static int slice_count(const gpt_config *c, int t)
{
    return gpt_per_layer(t) ? c->layers : 1;
}

/* Room for the most slices a tensor has, in gpt.grad_at. */
static int slots_per_tensor(const gpt_config *c)
{
    return c->layers > 1 ? c->layers : 1;
}

size_t gpt_slice_size(const gpt_config *c, int t)
{
    size_t C = (size_t)c->width;
    switch (t) {
    case GPT_WTE: return (size_t)c->vocab * C;
    case GPT_WPE: return (size_t)c->context * C;
    case GPT_QKVW: return 3 * C * C;
    case GPT_QKVB: return 3 * C;
    case GPT_ATTPROJW: return C * C;
    case GPT_FCW: return 4 * C * C;
    case GPT_FCB: return 4 * C;
    case GPT_FCPROJW: return C * 4 * C;
    default: return C; /* LayerNorm gains and biases, projection biases */
    }
}

size_t gpt_tensor_size(const gpt_config *c, int t)
{
    return gpt_slice_size(c, t) * (gpt_per_layer(t) ? (size_t)c->layers : 1);
}

size_t gpt_param_count(const gpt_config *c)
{
    size_t n = 0;
    for (int t = 0; t < GPT_NTENSORS; t++)
        n += gpt_tensor_size(c, t);
    return n;
}

/* ---- activations ------------------------------------------------------------- */

/* One forward pass's activations, as offsets into gpt.acts (and the same
 * layout in gpt.dacts for their gradients). */
typedef struct layout {
    size_t encoded;                       /* B T C */
    size_t ln1, ln1_mean, ln1_rstd;       /* per layer: BTC, BT, BT */
    size_t qkv, att, atty, attproj, res2; /* BT3C, BHTT, BTC, BTC, BTC */
    size_t ln2, ln2_mean, ln2_rstd;
    size_t fch, fch_sig, fch_gelu;        /* BT4C each */
    size_t fcproj, res3;                  /* BTC, BTC */
    size_t per_layer;                     /* stride between layers */
    size_t layers;                        /* where layer 0 starts */
    size_t lnf, lnf_mean, lnf_rstd, logits; /* BTC, BT, BT, BTV */
    size_t total;
} layout;

static layout plan(const gpt_config *c, int B)
{
    size_t T = (size_t)c->context, C = (size_t)c->width;
    size_t BT = (size_t)B * T, H = (size_t)c->heads, V = (size_t)c->vocab;
    layout a;
    size_t at = 0;
#define TAKE(field, n) (a.field = at, at += (n))
    TAKE(encoded, BT * C);
    a.layers = at;
    at = 0; /* offsets within one layer */
    TAKE(ln1, BT * C);
    TAKE(ln1_mean, BT);
    TAKE(ln1_rstd, BT);
    TAKE(qkv, BT * 3 * C);
    TAKE(att, (size_t)B * H * T * T);
    TAKE(atty, BT * C);
    TAKE(attproj, BT * C);
    TAKE(res2, BT * C);
    TAKE(ln2, BT * C);
    TAKE(ln2_mean, BT);
    TAKE(ln2_rstd, BT);
    TAKE(fch, BT * 4 * C);
    TAKE(fch_sig, BT * 4 * C);
    TAKE(fch_gelu, BT * 4 * C);
    TAKE(fcproj, BT * C);
    TAKE(res3, BT * C);
    a.per_layer = at;
    at = a.layers + a.per_layer * (size_t)c->layers;
    TAKE(lnf, BT * C);
    TAKE(lnf_mean, BT);
    TAKE(lnf_rstd, BT);
    TAKE(logits, BT * V);
#undef TAKE
    a.total = at;
    return a;
}

int gpt_create(gpt *m, const gpt_config *cfg, int batch)
{
    memset(m, 0, sizeof *m);
    if (cfg->width % cfg->heads != 0 || batch < 1)
        return -1;
    m->cfg = *cfg;
    m->batch = batch;
    size_t n = gpt_param_count(cfg);
    m->params = calloc(n, sizeof *m->params);
    m->grads = calloc(n, sizeof *m->grads);
    layout a = plan(cfg, batch);
    m->nacts = a.total;
    m->acts = calloc(a.total, sizeof *m->acts);
    m->dacts = calloc(a.total, sizeof *m->dacts);
    m->probs = calloc((size_t)batch * cfg->context * cfg->vocab,
                      sizeof *m->probs);
    m->grad_at = calloc((size_t)GPT_NTENSORS * slots_per_tensor(cfg),
                        sizeof *m->grad_at);
    if (!m->params || !m->grads || !m->acts || !m->dacts || !m->probs ||
        !m->grad_at) {
        gpt_free(m);
        return -1;
    }
    size_t at = 0;
    for (int t = 0; t < GPT_NTENSORS; t++) {
        m->tensor[t] = m->params + at;
        m->grad[t] = m->grads + at;
        for (int l = 0; l < slice_count(cfg, t); l++)
            gpt_place_grad(m, t, l,
                           m->grad[t] + gpt_slice_size(cfg, t) * (size_t)l);
        at += gpt_tensor_size(cfg, t);
    }
    return 0;
}

static real **grad_slot(const gpt *m, int t, int l)
{
    return &m->grad_at[t * slots_per_tensor(&m->cfg) + l];
}

real *gpt_grad_at(const gpt *m, int t, int l) { return *grad_slot(m, t, l); }

void gpt_place_grad(gpt *m, int t, int l, real *at)
{
    *grad_slot(m, t, l) = at;
}

void gpt_zero_grads(gpt *m)
{
    for (int t = 0; t < GPT_NTENSORS; t++)
        for (int l = 0; l < slice_count(&m->cfg, t); l++)
            memset(gpt_grad_at(m, t, l), 0,
                   gpt_slice_size(&m->cfg, t) * sizeof(real));
}

void gpt_free(gpt *m)
{
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->dacts);
    free(m->probs);
    free(m->grad_at);
    memset(m, 0, sizeof *m);
}

uint64_t gpt_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double gpt_rng_uniform(uint64_t *s)
{
    return (double)(gpt_rng_next(s) >> 11) * 0x1.0p-53;
}

static double rng_normal(uint64_t *s)
{
    double u1 = gpt_rng_uniform(s), u2 = gpt_rng_uniform(s);
    return sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
}

void gpt_init(gpt *m, uint64_t seed)
{
    const gpt_config *c = &m->cfg;
    uint64_t s = seed;
    double resid = 0.02 / sqrt(2.0 * c->layers);
    for (int t = 0; t < GPT_NTENSORS; t++) {
        size_t n = gpt_tensor_size(c, t);
        real *p = m->tensor[t];
        int gain = t == GPT_LN1W || t == GPT_LN2W || t == GPT_LNFW;
        int matrix = t == GPT_WTE || t == GPT_WPE || t == GPT_QKVW ||
                     t == GPT_ATTPROJW || t == GPT_FCW || t == GPT_FCPROJW;
        double sd = t == GPT_ATTPROJW || t == GPT_FCPROJW ? resid : 0.02;
        for (size_t i = 0; i < n; i++)
            p[i] = gain ? 1 : matrix ? (real)(sd * rng_normal(&s)) : 0;
    }
}

/* ---- kernels ------------------------------------------------------------------ */

/* out[N][OC] = in[N][IC] W[OC][IC]^T + bias */
static void linear_forward(real *out, const real *in, const real *w,
                           const real *bias, int N, int IC, int OC)
{
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1, in, IC, w, IC,
         0, out, OC);
    if (bias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++)
                out[(size_t)n * OC + o] += bias[o];
}

/* din += dout W; dW += dout^T in; dbias += column sums of dout */
static void linear_backward(real *din, real *dw, real *dbias, const real *dout,
                            const real *in, const real *w, int N, int IC,
                            int OC)
{
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1, dout, OC, w,
         IC, 1, din, IC);
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1, dout, OC, in,
         IC, 1, dw, IC);
    if (dbias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++)
                dbias[o] += dout[(size_t)n * OC + o];
}

static void layernorm_forward(real *out, real *mean, real *rstd,
                              const real *in, const real *w, const real *b,
                              int N, int C)
{
    for (int n = 0; n < N; n++) {
        const real *x = in + (size_t)n * C;
        double mu = 0, var = 0;
        for (int i = 0; i < C; i++)
            mu += x[i];
        mu /= C;
        for (int i = 0; i < C; i++)
            var += (x[i] - mu) * (x[i] - mu);
        var /= C;
        double r = 1.0 / sqrt(var + 1e-5);
        real *y = out + (size_t)n * C;
        for (int i = 0; i < C; i++)
            y[i] = (real)((x[i] - mu) * r) * w[i] + b[i];
        mean[n] = (real)mu;
        rstd[n] = (real)r;
    }
}

static void layernorm_backward(real *din, real *dw, real *db, const real *dout,
                               const real *in, const real *w,
                               const real *mean, const real *rstd, int N,
                               int C)
{
    for (int n = 0; n < N; n++) {
        const real *x = in + (size_t)n * C, *dy = dout + (size_t)n * C;
        real *dx = din + (size_t)n * C;
        double dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int i = 0; i < C; i++) {
            double norm = (x[i] - mean[n]) * rstd[n];
            double dnorm = (double)w[i] * dy[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int i = 0; i < C; i++) {
            double norm = (x[i] - mean[n]) * rstd[n];
            double dnorm = (double)w[i] * dy[i];
            db[i] += dy[i];
            dw[i] += (real)(norm * dy[i]);
            dx[i] += (real)((dnorm - dnorm_mean - norm * dnorm_norm_mean) *
                            rstd[n]);
        }
    }
}

/* y[i] = e^x[i] (y may be x).  SLEEF's four-lane expf (1 ulp) where the
 * build has it: the exps of GELU and the softmaxes were a fifth of a
 * step one call at a time. */
static void exp_array(real *y, const real *x, size_t n)
{
    size_t i = 0;
#ifdef GPT_SLEEF
    for (; i + 4 <= n; i += 4)
        _mm_storeu_ps(y + i, Sleef_expf4_u10(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        y[i] = EXP(x[i]);
}

#define GELU_S 0.7978845608028654 /* sqrt(2 / pi) */

/* GELU's tanh form through a sigmoid, 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u):
 * one exp instead of a tanh, which glibc computes with expm1 and which
 * took a quarter of a step.  The sigmoid is kept for backward, which then
 * needs no exp. */
static void gelu_forward(real *out, real *sig, const real *in, size_t n)
{
    const real s = (real)GELU_S, c = (real)0.044715;
    for (size_t i = 0; i < n; i++) {
        real x = in[i];
        sig[i] = -2 * s * (x + c * x * x * x);
    }
    exp_array(sig, sig, n);
    for (size_t i = 0; i < n; i++) {
        sig[i] = 1 / (1 + sig[i]);
        out[i] = in[i] * sig[i];
    }
}

static void gelu_backward(real *din, const real *in, const real *sig,
                          const real *dout, size_t n)
{
    const real s = (real)GELU_S, c = (real)0.044715;
    for (size_t i = 0; i < n; i++) {
        real x = in[i], g = sig[i];
        /* d/dx x sig(2u) = sig + x 2 sig (1 - sig) u' */
        real d = g + 2 * x * g * (1 - g) * s * (1 + 3 * c * x * x);
        din[i] += d * dout[i];
    }
}

/* Causal self-attention over qkv[B][T][3C] (q, k, v side by side, head h
 * at columns h*hs of each): att[B][H][T][T] the softmax, out[B][T][C]. */
static void attention_forward(real *out, real *att, const real *qkv, int B,
                              int T, int C, int H)
{
    int hs = C / H, C3 = 3 * C;
    real scale = (real)(1.0 / sqrt((double)hs));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const real *q = qkv + (size_t)b * T * C3 + h * hs;
            const real *k = q + C, *v = q + 2 * C;
            real *p = att + ((size_t)b * H + h) * T * T;
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q,
                 C3, k, C3, 0, p, T);
            for (int t = 0; t < T; t++) {
                real *row = p + (size_t)t * T;
                real mx = row[0], sum = 0;
                for (int u = 1; u <= t; u++)
                    mx = row[u] > mx ? row[u] : mx;
                for (int u = 0; u <= t; u++)
                    row[u] -= mx;
                exp_array(row, row, (size_t)t + 1);
                for (int u = 0; u <= t; u++)
                    sum += row[u];
                real inv = 1 / sum;
                for (int u = 0; u <= t; u++)
                    row[u] *= inv;
                for (int u = t + 1; u < T; u++)
                    row[u] = 0; /* the future: masked */
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1, p, T,
                 v, C3, 0, out + (size_t)b * T * C + h * hs, C);
        }
}

/* dqkv += the gradients of q, k and v; datt is scratch (B H T T). */
static void attention_backward(real *dqkv, real *datt, const real *dout,
                               const real *qkv, const real *att, int B, int T,
                               int C, int H)
{
    int hs = C / H, C3 = 3 * C;
    real scale = (real)(1.0 / sqrt((double)hs));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t bh = ((size_t)b * H + h) * T * T;
            const real *p = att + bh;
            real *dp = datt + bh;
            const real *q = qkv + (size_t)b * T * C3 + h * hs;
            const real *k = q + C, *v = q + 2 * C;
            real *dq = dqkv + (size_t)b * T * C3 + h * hs;
            real *dk = dq + C, *dv = dq + 2 * C;
            const real *dy = dout + (size_t)b * T * C + h * hs;
            /* dP = dY V^T; dV += P^T dY */
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1, dy, C,
                 v, C3, 0, dp, T);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1, p, T,
                 dy, C, 1, dv, C3);
            /* Through the softmax: dS = P (dP - sum(P dP)), per row. */
            for (int t = 0; t < T; t++) {
                const real *pr = p + (size_t)t * T;
                real *dr = dp + (size_t)t * T;
                double dot = 0;
                for (int u = 0; u <= t; u++)
                    dot += (double)pr[u] * dr[u];
                for (int u = 0; u <= t; u++)
                    dr[u] = (real)(pr[u] * (dr[u] - dot));
                for (int u = t + 1; u < T; u++)
                    dr[u] = 0;
            }
            /* S = scale Q K^T: dQ += scale dS K; dK += scale dS^T Q */
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale,
                 dp, T, k, C3, 1, dq, C3);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dp,
                 T, q, C3, 1, dk, C3);
        }
}

/* ---- the model ------------------------------------------------------------------ */

/* A per-layer tensor's slice for layer l. */
static real *slice(real *const *base, const gpt_config *c, int t, int l)
{
    return base[t] + gpt_slice_size(c, t) * (size_t)l;
}

void gpt_forward(gpt *m, const int *inputs, const int *targets, int B)
{
    const gpt_config *c = &m->cfg;
    int T = c->context, C = c->width, V = c->vocab, H = c->heads;
    int BT = B * T;
    layout a = plan(c, m->batch);
    real *A = m->acts;
    real *x = A + a.encoded;
    for (int i = 0; i < BT; i++) {
        const real *te = m->tensor[GPT_WTE] + (size_t)inputs[i] * C;
        const real *pe = m->tensor[GPT_WPE] + (size_t)(i % T) * C;
        for (int j = 0; j < C; j++)
            x[(size_t)i * C + j] = te[j] + pe[j];
    }
    real *const *P = m->tensor;
    for (int l = 0; l < c->layers; l++) {
        real *L = A + a.layers + a.per_layer * (size_t)l;
        layernorm_forward(L + a.ln1, L + a.ln1_mean, L + a.ln1_rstd, x,
                          slice(P, c, GPT_LN1W, l), slice(P, c, GPT_LN1B, l),
                          BT, C);
        linear_forward(L + a.qkv, L + a.ln1, slice(P, c, GPT_QKVW, l),
                       slice(P, c, GPT_QKVB, l), BT, C, 3 * C);
        attention_forward(L + a.atty, L + a.att, L + a.qkv, B, T, C, H);
        linear_forward(L + a.attproj, L + a.atty, slice(P, c, GPT_ATTPROJW, l),
                       slice(P, c, GPT_ATTPROJB, l), BT, C, C);
        for (size_t i = 0; i < (size_t)BT * C; i++)
            L[a.res2 + i] = x[i] + L[a.attproj + i];
        layernorm_forward(L + a.ln2, L + a.ln2_mean, L + a.ln2_rstd,
                          L + a.res2, slice(P, c, GPT_LN2W, l),
                          slice(P, c, GPT_LN2B, l), BT, C);
        linear_forward(L + a.fch, L + a.ln2, slice(P, c, GPT_FCW, l),
                       slice(P, c, GPT_FCB, l), BT, C, 4 * C);
        gelu_forward(L + a.fch_gelu, L + a.fch_sig, L + a.fch,
                     (size_t)BT * 4 * C);
        linear_forward(L + a.fcproj, L + a.fch_gelu,
                       slice(P, c, GPT_FCPROJW, l), slice(P, c, GPT_FCPROJB, l),
                       BT, 4 * C, C);
        for (size_t i = 0; i < (size_t)BT * C; i++)
            L[a.res3 + i] = L[a.res2 + i] + L[a.fcproj + i];
        x = L + a.res3;
    }
    layernorm_forward(A + a.lnf, A + a.lnf_mean, A + a.lnf_rstd, x,
                      P[GPT_LNFW], P[GPT_LNFB], BT, C);
    linear_forward(A + a.logits, A + a.lnf, P[GPT_WTE], NULL, BT, C, V);
    double loss = 0;
    for (int i = 0; i < BT; i++) {
        const real *z = A + a.logits + (size_t)i * V;
        real *p = m->probs + (size_t)i * V;
        real mx = z[0];
        double sum = 0;
        for (int v = 1; v < V; v++)
            mx = z[v] > mx ? z[v] : mx;
        for (int v = 0; v < V; v++)
            p[v] = z[v] - mx;
        exp_array(p, p, (size_t)V);
        for (int v = 0; v < V; v++)
            sum += p[v];
        real inv = (real)(1 / sum);
        for (int v = 0; v < V; v++)
            p[v] *= inv;
        if (targets)
            loss -= log(p[targets[i]] > 0 ? (double)p[targets[i]] : 1e-30);
    }
    m->loss = targets ? loss / BT : 0;
}

/* Tensors t and t + 1 (a weight and its bias, or a LayerNorm's gain and
 * shift) of layer l are complete. */
static void pair_done(gpt_grad_done_fn done, void *user, int t, int l)
{
    if (done) {
        done(user, t, l);
        done(user, t + 1, l);
    }
}

void gpt_backward(gpt *m, const int *inputs, const int *targets, int B,
                  gpt_grad_done_fn done, void *user)
{
    const gpt_config *c = &m->cfg;
    int T = c->context, C = c->width, V = c->vocab, H = c->heads;
    int BT = B * T;
    layout a = plan(c, m->batch);
    real *A = m->acts, *D = m->dacts;
    memset(D, 0, m->nacts * sizeof *D);
    real *const *P = m->tensor;
    /* Softmax and cross-entropy: (p - onehot) / (B T). */
    real *dlogits = D + a.logits;
    for (int i = 0; i < BT; i++)
        for (int v = 0; v < V; v++)
            dlogits[(size_t)i * V + v] =
                (m->probs[(size_t)i * V + v] - (v == targets[i])) / BT;
    linear_backward(D + a.lnf, gpt_grad_at(m, GPT_WTE, 0), NULL, dlogits,
                    A + a.lnf, P[GPT_WTE], BT, C, V);
    const real *last = c->layers ? A + a.layers +
                                       a.per_layer * (size_t)(c->layers - 1) +
                                       a.res3
                                 : A + a.encoded;
    real *dlast = c->layers ? D + a.layers +
                                  a.per_layer * (size_t)(c->layers - 1) + a.res3
                            : D + a.encoded;
    layernorm_backward(dlast, gpt_grad_at(m, GPT_LNFW, 0),
                       gpt_grad_at(m, GPT_LNFB, 0), D + a.lnf, last,
                       P[GPT_LNFW], A + a.lnf_mean, A + a.lnf_rstd, BT, C);
    pair_done(done, user, GPT_LNFW, 0);
    for (int l = c->layers - 1; l >= 0; l--) {
        real *L = A + a.layers + a.per_layer * (size_t)l;
        real *DL = D + a.layers + a.per_layer * (size_t)l;
        const real *x = l ? L - a.per_layer + a.res3 : A + a.encoded;
        real *dx = l ? DL - a.per_layer + a.res3 : D + a.encoded;
        size_t n = (size_t)BT * C;
        /* res3 = res2 + fcproj */
        for (size_t i = 0; i < n; i++) {
            DL[a.res2 + i] += DL[a.res3 + i];
            DL[a.fcproj + i] += DL[a.res3 + i];
        }
        linear_backward(DL + a.fch_gelu, gpt_grad_at(m, GPT_FCPROJW, l),
                        gpt_grad_at(m, GPT_FCPROJB, l), DL + a.fcproj,
                        L + a.fch_gelu, slice(P, c, GPT_FCPROJW, l), BT, 4 * C,
                        C);
        pair_done(done, user, GPT_FCPROJW, l);
        gelu_backward(DL + a.fch, L + a.fch, L + a.fch_sig, DL + a.fch_gelu,
                      (size_t)BT * 4 * C);
        linear_backward(DL + a.ln2, gpt_grad_at(m, GPT_FCW, l),
                        gpt_grad_at(m, GPT_FCB, l), DL + a.fch, L + a.ln2,
                        slice(P, c, GPT_FCW, l), BT, C, 4 * C);
        pair_done(done, user, GPT_FCW, l);
        layernorm_backward(DL + a.res2, gpt_grad_at(m, GPT_LN2W, l),
                           gpt_grad_at(m, GPT_LN2B, l), DL + a.ln2, L + a.res2,
                           slice(P, c, GPT_LN2W, l), L + a.ln2_mean,
                           L + a.ln2_rstd, BT, C);
        pair_done(done, user, GPT_LN2W, l);
        /* res2 = x + attproj */
        for (size_t i = 0; i < n; i++) {
            dx[i] += DL[a.res2 + i];
            DL[a.attproj + i] += DL[a.res2 + i];
        }
        linear_backward(DL + a.atty, gpt_grad_at(m, GPT_ATTPROJW, l),
                        gpt_grad_at(m, GPT_ATTPROJB, l), DL + a.attproj,
                        L + a.atty, slice(P, c, GPT_ATTPROJW, l), BT, C, C);
        pair_done(done, user, GPT_ATTPROJW, l);
        attention_backward(DL + a.qkv, DL + a.att, DL + a.atty, L + a.qkv,
                           L + a.att, B, T, C, H);
        linear_backward(DL + a.ln1, gpt_grad_at(m, GPT_QKVW, l),
                        gpt_grad_at(m, GPT_QKVB, l), DL + a.qkv, L + a.ln1,
                        slice(P, c, GPT_QKVW, l), BT, C, 3 * C);
        pair_done(done, user, GPT_QKVW, l);
        layernorm_backward(dx, gpt_grad_at(m, GPT_LN1W, l),
                           gpt_grad_at(m, GPT_LN1B, l), DL + a.ln1, x,
                           slice(P, c, GPT_LN1W, l), L + a.ln1_mean,
                           L + a.ln1_rstd, BT, C);
        pair_done(done, user, GPT_LN1W, l);
    }
    const real *dx = D + a.encoded;
    for (int i = 0; i < BT; i++) {
        real *gte = gpt_grad_at(m, GPT_WTE, 0) + (size_t)inputs[i] * C;
        real *gpe = gpt_grad_at(m, GPT_WPE, 0) + (size_t)(i % T) * C;
        for (int j = 0; j < C; j++) {
            gte[j] += dx[(size_t)i * C + j];
            gpe[j] += dx[(size_t)i * C + j];
        }
    }
    if (done) {
        done(user, GPT_WPE, 0);
        done(user, GPT_WTE, 0);
    }
}

/* ---- optimizer ------------------------------------------------------------------ */

int gpt_adamw_create(gpt_adamw *o, const gpt *m)
{
    size_t n = gpt_param_count(&m->cfg);
    o->m = calloc(n, sizeof *o->m);
    o->v = calloc(n, sizeof *o->v);
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->weight_decay = 0.1;
    return o->m && o->v ? 0 : -1;
}

void gpt_adamw_free(gpt_adamw *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

void gpt_adamw_step(gpt_adamw *o, gpt *m, double lr, double grad_scale,
                    long t)
{
    double b1c = 1 - pow(o->beta1, (double)t), b2c = 1 - pow(o->beta2, (double)t);
    size_t at = 0; /* the slice's place in params and the moments */
    for (int k = 0; k < GPT_NTENSORS; k++) {
        size_t n = gpt_slice_size(&m->cfg, k);
        /* Weight decay on the matrices (embeddings included), not on
         * gains and biases. */
        int decay = k == GPT_WTE || k == GPT_WPE || k == GPT_QKVW ||
                    k == GPT_ATTPROJW || k == GPT_FCW || k == GPT_FCPROJW;
        double wd = decay ? o->weight_decay : 0;
        for (int l = 0; l < slice_count(&m->cfg, k); l++, at += n) {
            const real *grad = gpt_grad_at(m, k, l);
            for (size_t i = 0; i < n; i++) {
                size_t j = at + i;
                double g = (double)grad[i] * grad_scale;
                double mm = o->beta1 * o->m[j] + (1 - o->beta1) * g;
                double vv = o->beta2 * o->v[j] + (1 - o->beta2) * g * g;
                o->m[j] = (real)mm;
                o->v[j] = (real)vv;
                double step = (mm / b1c) / (sqrt(vv / b2c) + o->eps);
                m->params[j] -= (real)(lr * (step + wd * m->params[j]));
            }
        }
    }
}

double gpt_grad_norm(const gpt *m)
{
    double s = 0; /* in the order of m->grads, wherever they live */
    for (int t = 0; t < GPT_NTENSORS; t++)
        for (int l = 0; l < slice_count(&m->cfg, t); l++) {
            const real *g = gpt_grad_at(m, t, l);
            for (size_t i = 0; i < gpt_slice_size(&m->cfg, t); i++)
                s += (double)g[i] * g[i];
        }
    return sqrt(s);
}

/* ---- sampling ------------------------------------------------------------------- */

void gpt_sample(gpt *m, const int *prompt, int np, int *out, int n,
                uint64_t *rng)
{
    int T = m->cfg.context, V = m->cfg.vocab;
    int *ctx = calloc((size_t)m->batch * T, sizeof *ctx);
    if (!ctx)
        return;
    int len = np < T ? np : T;
    memcpy(ctx, prompt + (np - len), (size_t)len * sizeof *ctx);
    for (int i = 0; i < n; i++) {
        gpt_forward(m, ctx, NULL, 1);
        const real *p = m->probs + (size_t)(len - 1) * V;
        double u = gpt_rng_uniform(rng), cdf = 0;
        int tok = V - 1;
        for (int v = 0; v < V; v++) {
            cdf += p[v];
            if (u < cdf) {
                tok = v;
                break;
            }
        }
        out[i] = tok;
        if (len < T) {
            ctx[len++] = tok;
        } else {
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof *ctx);
            ctx[T - 1] = tok;
        }
    }
    free(ctx);
}
