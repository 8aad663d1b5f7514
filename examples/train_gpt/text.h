/* text.h: the training text for train_gpt, byte-level.
 *
 * The corpus is every plain-text file of a folder (Debian's `fortunes`
 * package: /usr/share/games/fortunes, its files without the .dat and .u8
 * index files), in name order, one after the other: about 2.6 MB.  The
 * first 90% of the bytes train, the last 10% validate (a fixed split).
 * Tokens are bytes (vocabulary 256). */
#ifndef TRAIN_GPT_TEXT_H
#define TRAIN_GPT_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct text {
    unsigned char *bytes;
    size_t size;
    size_t train_end; /* [0, train_end) trains, [train_end, size) validates */
    int files;
} text;

/* Reads the folder; 0 on success, else -1 with a message in why. */
int text_load(text *t, const char *dir, char *why, size_t cap);
void text_free(text *t);

/* Sequence `i` of the global batch of optimizer step `step`, micro-batch
 * `micro`: T + 1 training tokens from an offset drawn from (seed, step,
 * micro, i), the same on every rank, so that a run's batches do not depend
 * on the number of ranks.  inputs get the first T, targets the last T. */
void text_train_sequence(const text *t, uint64_t seed, long step, int micro,
                         int i, int T, int *inputs, int *targets);

/* Validation sequence i of n, evenly spaced over the validation bytes. */
void text_val_sequence(const text *t, int i, int n, int T, int *inputs,
                       int *targets);

/* The validation loss (mean cross-entropy, nats per byte) of a bigram
 * model counted on the training bytes, add-0.1 smoothed: the baseline a
 * transformer has to beat. */
double text_bigram_val_loss(const text *t);

#endif
