/* make_trace: writes a gradient trace for `ddphook replay` (docs/replay.md)
 * with reproducible uniform values in [-1, 1).
 *
 *   make_trace DIR WORLD STEPS SEED NAME=AxB [NAME=A ...]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: make_trace DIR WORLD STEPS SEED NAME=AxB...\n");
        return 2;
    }
    const char *dir = argv[1];
    int world = atoi(argv[2]), steps = atoi(argv[3]);
    uint64_t seed = strtoull(argv[4], NULL, 10);
    mkdir(dir, 0777);
    char path[4096];
    snprintf(path, sizeof path, "%s/trace.ini", dir);
    FILE *ini = fopen(path, "w");
    if (!ini)
        return 1;
    fprintf(ini, "[trace]\nworld_size = %d\nsteps = %d\ndtype = f32\n", world,
            steps);
    size_t total = 0;
    for (int i = 5; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq)
            return 2;
        fprintf(ini, "\n[param.%.*s]\nshape = ", (int)(eq - argv[i]), argv[i]);
        size_t numel = 1;
        for (char *c = eq + 1; *c;) {
            char *end;
            unsigned long v = strtoul(c, &end, 10);
            numel *= v;
            fprintf(ini, "%lu%s", v, *end ? "," : "");
            c = *end ? end + 1 : end;
        }
        fputc('\n', ini);
        total += numel;
    }
    fclose(ini);
    float *v = malloc(total * sizeof *v);
    for (int r = 0; r < world; r++)
        for (int s = 0; s < steps; s++) {
            uint64_t k = splitmix64(splitmix64(splitmix64(seed) ^ (uint64_t)r) ^
                                    (uint64_t)s);
            for (size_t e = 0; e < total; e++)
                v[e] = (float)((double)(splitmix64(k + e) >> 40) / 8388608.0 - 1.0);
            snprintf(path, sizeof path, "%s/rank%d.step%d.f32", dir, r, s);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(v, sizeof *v, total, f) != total)
                return 1;
            fclose(f);
        }
    free(v);
    return 0;
}
