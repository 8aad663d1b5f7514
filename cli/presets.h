/* presets.h: parameter shapes of well-known models, for `ddphook bench`:
 * gpt2-124m (its 2-D weights, biases and layer norms), resnet50 (convs,
 * batch norms, the classifier), and mlp (examples/train_mnist). */
#ifndef DDPH_CLI_PRESETS_H
#define DDPH_CLI_PRESETS_H

#include <stddef.h>
#include <stdint.h>

typedef struct preset_param {
    char name[48];
    int64_t shape[4];
    int ndim;
} preset_param;

/* Fills *out (malloc'd, registration order) and *n; 0 for an unknown name. */
int preset_load(const char *name, preset_param **out, int *n);
/* Total elements. */
size_t preset_numel(const preset_param *p, int n);

#endif
