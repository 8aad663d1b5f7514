/* gpt.h: a GPT-style decoder-only transformer, forward and backward
 * written out (as llm.c does), with OpenBLAS for the matrix products.
 *
 * Token and position embeddings; L pre-LayerNorm blocks of causal
 * multi-head self-attention and a GELU MLP (4C wide), each with a
 * residual; a final LayerNorm; the output head tied to the token
 * embedding; softmax cross-entropy.  Sizes: vocabulary V, context T,
 * width C, heads H (C % H == 0), layers L, batch B.
 *
 * `real` is float, or double where the file is compiled with
 * -DGPT_DOUBLE (the finite-difference gradient check). */
#ifndef GPT_H
#define GPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef GPT_DOUBLE
typedef double real;
#else
typedef float real;
#endif

typedef struct gpt_config {
    int vocab, context, width, heads, layers;
} gpt_config;

/* The parameter tensors, in forward order; per-layer ones hold L slices
 * one after the other. */
enum {
    GPT_WTE,      /* V x C   token embedding, and the output head */
    GPT_WPE,      /* T x C   position embedding */
    GPT_LN1W,     /* L x C */
    GPT_LN1B,     /* L x C */
    GPT_QKVW,     /* L x 3C x C */
    GPT_QKVB,     /* L x 3C */
    GPT_ATTPROJW, /* L x C x C */
    GPT_ATTPROJB, /* L x C */
    GPT_LN2W,     /* L x C */
    GPT_LN2B,     /* L x C */
    GPT_FCW,      /* L x 4C x C */
    GPT_FCB,      /* L x 4C */
    GPT_FCPROJW,  /* L x C x 4C */
    GPT_FCPROJB,  /* L x C */
    GPT_LNFW,     /* C */
    GPT_LNFB,     /* C */
    GPT_NTENSORS
};

/* Elements of tensor t (all L slices for a per-layer tensor), and of one
 * layer's slice. */
size_t gpt_tensor_size(const gpt_config *c, int t);
size_t gpt_slice_size(const gpt_config *c, int t);
int gpt_per_layer(int t);
const char *gpt_tensor_name(int t);
size_t gpt_param_count(const gpt_config *c);

typedef struct gpt {
    gpt_config cfg;
    int batch; /* B the activations are sized for */
    real *params, *grads;       /* gpt_param_count each, tensors in order */
    real *tensor[GPT_NTENSORS]; /* into params */
    real *grad[GPT_NTENSORS];   /* into grads */
    real **grad_at; /* each slice's gradient (gpt_grad_at), layer-major
                       per tensor: GPT_NTENSORS x max(layers, 1) */
    real *acts;                 /* activations of one forward pass */
    real *dacts;                /* their gradients (backward) */
    size_t nacts;
    real *probs;                /* B x T x V softmax */
    double loss;                /* mean cross-entropy of the last forward */
} gpt;

/* Allocates a model for batches of up to `batch` sequences of cfg->context
 * tokens; 0 on success.  Parameters start at zero: gpt_init draws them. */
int gpt_create(gpt *m, const gpt_config *cfg, int batch);
void gpt_free(gpt *m);
/* GPT-2's initialisation: N(0, 0.02), residual projections scaled by
 * 1/sqrt(2L), biases 0, LayerNorm gains 1; from a splitmix64 seed. */
void gpt_init(gpt *m, uint64_t seed);

/* Forward pass over inputs[B*T] (token ids); with targets (B*T, or NULL)
 * it also computes m->loss, the mean cross-entropy. */
void gpt_forward(gpt *m, const int *inputs, const int *targets, int B);

/* Called by gpt_backward as soon as a tensor's gradient is complete, so
 * that a trainer can hand each to the reduction while backward goes on,
 * as PyTorch's per-parameter autograd hooks do: the final LayerNorm's
 * gain and shift (layer 0) first; then each block from the last, its
 * tensors in pairs from the MLP's projection back to the first
 * LayerNorm, a weight (or gain) before its bias (or shift), with the
 * block's index as the layer; the embeddings (layer 0) last. */
typedef void (*gpt_grad_done_fn)(void *user, int tensor, int layer);

/* Where tensor t's gradient for layer l (0 for a whole tensor) lives:
 * its place in m->grads, unless gpt_place_grad moved it (a trainer whose
 * gradients live in ddphook's buckets: gradient_as_bucket_view).
 * Backward, the optimizer and gpt_grad_norm go through it. */
real *gpt_grad_at(const gpt *m, int t, int l);
void gpt_place_grad(gpt *m, int t, int l, real *at);
/* Zeroes every gradient, wherever it lives. */
void gpt_zero_grads(gpt *m);

/* Backward pass of the last gpt_forward (which had targets): ADDS the
 * gradients of the mean loss into the gradients (gpt_grad_at; zero them
 * between steps, or keep them to accumulate). */
void gpt_backward(gpt *m, const int *inputs, const int *targets, int B,
                  gpt_grad_done_fn done, void *user);

/* AdamW (decoupled weight decay on matrices only, as GPT-2 trainers do)
 * at step t (from 1), on gradients scaled by grad_scale first. */
typedef struct gpt_adamw {
    real *m, *v;
    double beta1, beta2, eps, weight_decay;
} gpt_adamw;
int gpt_adamw_create(gpt_adamw *o, const gpt *m);
void gpt_adamw_free(gpt_adamw *o);
void gpt_adamw_step(gpt_adamw *o, gpt *m, double lr, double grad_scale,
                    long t);

/* The L2 norm of every gradient. */
double gpt_grad_norm(const gpt *m);

/* Samples `n` tokens after prompt[0..np-1] (np >= 1) into out; temperature
 * 1, from a splitmix64 state.  Uses batch row 0. */
void gpt_sample(gpt *m, const int *prompt, int np, int *out, int n,
                uint64_t *rng);

/* splitmix64, and a uniform double in [0, 1) from it. */
uint64_t gpt_rng_next(uint64_t *state);
double gpt_rng_uniform(uint64_t *state);

#endif
