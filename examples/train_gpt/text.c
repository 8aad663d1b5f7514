/* text.c: see text.h. */
#define _GNU_SOURCE
#include "text.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpt.h"

static int wanted(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    if (d->d_name[0] == '.')
        return 0;
    if (n > 4 && (strcmp(d->d_name + n - 4, ".dat") == 0 ||
                  strcmp(d->d_name + n - 3, ".u8") == 0))
        return 0;
    return 1;
}

int text_load(text *t, const char *dir, char *why, size_t cap)
{
    memset(t, 0, sizeof *t);
    struct dirent **names;
    int n = scandir(dir, &names, wanted, alphasort);
    if (n < 0) {
        snprintf(why, cap, "%s: %s (apt-get install fortunes)", dir,
                 strerror(errno));
        return -1;
    }
    size_t cap_bytes = 0;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        struct stat st;
        FILE *f = NULL;
        if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            (f = fopen(path, "rb")) != NULL) {
            size_t need = t->size + (size_t)st.st_size;
            if (need > cap_bytes) {
                cap_bytes = need * 2;
                unsigned char *grown = realloc(t->bytes, cap_bytes);
                if (!grown) {
                    snprintf(why, cap, "out of memory reading %s", path);
                    rc = -1;
                } else {
                    t->bytes = grown;
                }
            }
            if (rc == 0) {
                t->size += fread(t->bytes + t->size, 1, (size_t)st.st_size, f);
                t->files++;
            }
            fclose(f);
        }
        free(names[i]);
    }
    free(names);
    if (rc == 0 && t->size < 4096) {
        snprintf(why, cap, "%s: %zu bytes of text in %d files; train_gpt "
                           "needs a few thousand (apt-get install fortunes)",
                 dir, t->size, t->files);
        rc = -1;
    }
    if (rc != 0) {
        text_free(t);
        return rc;
    }
    t->train_end = t->size / 10 * 9;
    return 0;
}

void text_free(text *t)
{
    free(t->bytes);
    memset(t, 0, sizeof *t);
}

static void sequence_at(const text *t, size_t at, int T, int *inputs,
                        int *targets)
{
    for (int j = 0; j < T; j++) {
        inputs[j] = t->bytes[at + (size_t)j];
        targets[j] = t->bytes[at + (size_t)j + 1];
    }
}

void text_train_sequence(const text *t, uint64_t seed, long step, int micro,
                         int i, int T, int *inputs, int *targets)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t)step * 1000003u ^
                 (uint64_t)micro * 7919u ^ (uint64_t)i * 104729u;
    gpt_rng_next(&s);
    size_t span = t->train_end - (size_t)T - 1;
    sequence_at(t, (size_t)(gpt_rng_next(&s) % span), T, inputs, targets);
}

void text_val_sequence(const text *t, int i, int n, int T, int *inputs,
                       int *targets)
{
    size_t span = t->size - t->train_end - (size_t)T - 1;
    sequence_at(t, t->train_end + span / (size_t)n * (size_t)i, T, inputs,
                targets);
}

double text_bigram_val_loss(const text *t)
{
    static double counts[256][256];
    double rows[256] = {0};
    memset(counts, 0, sizeof counts);
    for (size_t i = 0; i + 1 < t->train_end; i++) {
        counts[t->bytes[i]][t->bytes[i + 1]] += 1;
        rows[t->bytes[i]] += 1;
    }
    const double alpha = 0.1;
    double loss = 0;
    size_t n = 0;
    for (size_t i = t->train_end; i + 1 < t->size; i++, n++) {
        unsigned a = t->bytes[i], b = t->bytes[i + 1];
        loss -= log((counts[a][b] + alpha) / (rows[a] + 256 * alpha));
    }
    return n ? loss / (double)n : 0;
}
