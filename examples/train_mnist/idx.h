/* idx.h: reading the IDX files of MNIST-style data sets (gzip or plain,
 * through zlib), e.g. Debian's dataset-fashion-mnist. */
#ifndef TRAIN_MNIST_IDX_H
#define TRAIN_MNIST_IDX_H

#include <stddef.h>
#include <stdint.h>

typedef struct dataset {
    size_t n;        /* examples */
    size_t dim;      /* pixels per example */
    float *x;        /* n x dim, scaled to [0, 1] */
    uint8_t *y;      /* n labels */
} dataset;

/* Loads DIR/{prefix}-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz
 * (prefix "train" or "t10k"); limit > 0 keeps the first `limit`
 * examples.  Returns 0 and a message on failure. */
int idx_load(const char *dir, const char *prefix, size_t limit, dataset *out,
             char *msg, size_t msglen);
void idx_free(dataset *d);

#endif
