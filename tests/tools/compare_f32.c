/* compare_f32: compares `ddphook replay` outputs with reference outputs.
 *
 *   compare_f32 EXPECTED_DIR ACTUAL_DIR WORLD STEPS RTOL ATOL
 *
 * For every rank R < WORLD and step S < STEPS with EXPECTED_DIR/
 * rank{R}.step{S}.out.f32 present, ACTUAL_DIR must hold the same file with
 * every element within |a - e| <= ATOL + RTOL * |e| (NaN matches NaN,
 * Inf matches the same Inf).  Prints the worst errors; exit 0 when all
 * match and at least one file was compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc((size_t)len + 4);
    *n = fread(v, 1, (size_t)len, f) / sizeof(float);
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: compare_f32 EXPECTED ACTUAL WORLD STEPS RTOL "
                        "ATOL\n");
        return 2;
    }
    int world = atoi(argv[3]), steps = atoi(argv[4]);
    double rtol = atof(argv[5]), atol = atof(argv[6]);
    int files = 0, bad = 0;
    double worst_abs = 0, worst_rel = 0;
    for (int r = 0; r < world; r++)
        for (int s = 0; s < steps; s++) {
            char pe[4096], pa[4096];
            snprintf(pe, sizeof pe, "%s/rank%d.step%d.out.f32", argv[1], r, s);
            snprintf(pa, sizeof pa, "%s/rank%d.step%d.out.f32", argv[2], r, s);
            size_t ne, na;
            float *e = slurp(pe, &ne);
            if (!e)
                continue;
            float *a = slurp(pa, &na);
            files++;
            if (!a || na != ne) {
                fprintf(stderr, "%s: %s\n", pa,
                        a ? "size differs from the reference" : "missing");
                bad++;
                free(a);
                free(e);
                continue;
            }
            size_t mism = 0, first = 0;
            for (size_t i = 0; i < ne; i++) {
                double x = a[i], y = e[i];
                if ((isnan(x) && isnan(y)) || x == y)
                    continue;
                double d = fabs(x - y);
                if (d > worst_abs)
                    worst_abs = d;
                if (y != 0 && d / fabs(y) > worst_rel)
                    worst_rel = d / fabs(y);
                if (!(d <= atol + rtol * fabs(y))) {
                    if (!mism++)
                        first = i;
                }
            }
            if (mism) {
                fprintf(stderr, "%s: %zu of %zu elements outside tolerance "
                                "(first at %zu: %.9g vs %.9g)\n",
                        pa, mism, ne, first, a[first], e[first]);
                bad++;
            }
            free(a);
            free(e);
        }
    printf("compared %d files: %d differ; max abs error %.3g, max rel error "
           "%.3g (rtol %g, atol %g)\n",
           files, bad, worst_abs, worst_rel, rtol, atol);
    return files > 0 && bad == 0 ? 0 : 1;
}
