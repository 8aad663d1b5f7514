/* cpu_portable.c: see cpu_portable.h. */
#include "build-config.h"

#include "device/cpu_portable.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ddph_status ddph__portable_gemm(int trans_a, int trans_b, size_t m, size_t n,
                                size_t k, float alpha, const float *a,
                                size_t lda, const float *b, size_t ldb,
                                float beta, float *c, size_t ldc,
                                ddph_err *err)
{
    /* op(B) as a row-major k x n copy, and one row of sums: each row of C
     * is then k passes over contiguous memory, vectorised across the
     * columns (which never reorders a sum). */
    float *bk = malloc((k * n + n) * sizeof *bk);
    if (!bk)
        return ddph__fail(err, DDPH_ERR_NOMEM, "gemm: out of memory");
    float *acc = bk + k * n;
    for (size_t l = 0; l < k; l++)
        for (size_t j = 0; j < n; j++)
            bk[l * n + j] = trans_b ? b[j * ldb + l] : b[l * ldb + j];
    for (size_t i = 0; i < m; i++) {
        memset(acc, 0, n * sizeof *acc);
        for (size_t l = 0; l < k; l++) {
            float ail = trans_a ? a[l * lda + i] : a[i * lda + l];
            const float *row = bk + l * n;
            for (size_t j = 0; j < n; j++)
                acc[j] += ail * row[j];
        }
        float *ci = c + i * ldc;
        if (beta == 0.0f)
            for (size_t j = 0; j < n; j++)
                ci[j] = alpha * acc[j];
        else
            for (size_t j = 0; j < n; j++)
                ci[j] = alpha * acc[j] + beta * ci[j];
    }
    free(bk);
    return DDPH_OK;
}

/* Element (r, j) of the row-major rows x cols matrix x. */
#define AT(x, r, j) (x)[(r) * cols + (j)]

ddph_status ddph__portable_qr(float *x, size_t rows, size_t cols,
                              ddph_err *err)
{
    double *tau = calloc(cols, sizeof *tau);
    if (!tau)
        return ddph__fail(err, DDPH_ERR_NOMEM, "orthogonalize: out of "
                                               "memory");
    /* sgeqrf: reflector j (slarfg's beta = -sign(alpha) |x|) zeroes
     * column j below the diagonal; its vector is kept there (v_j = 1). */
    for (size_t j = 0; j < cols; j++) {
        double alpha = AT(x, j, j), ss = 0;
        for (size_t r = j + 1; r < rows; r++)
            ss += (double)AT(x, r, j) * AT(x, r, j);
        if (ss == 0)
            continue; /* tau = 0: H_j = I */
        double beta = -copysign(sqrt(alpha * alpha + ss), alpha);
        tau[j] = (beta - alpha) / beta;
        double scale = 1.0 / (alpha - beta);
        for (size_t r = j + 1; r < rows; r++)
            AT(x, r, j) = (float)(AT(x, r, j) * scale);
        AT(x, j, j) = (float)beta;
        /* H_j on the columns to its right. */
        for (size_t c = j + 1; c < cols; c++) {
            double dot = AT(x, j, c);
            for (size_t r = j + 1; r < rows; r++)
                dot += (double)AT(x, r, j) * AT(x, r, c);
            double f = tau[j] * dot;
            AT(x, j, c) = (float)(AT(x, j, c) - f);
            for (size_t r = j + 1; r < rows; r++)
                AT(x, r, c) = (float)(AT(x, r, c) - f * AT(x, r, j));
        }
    }
    /* sorg2r: Q = H_0 ... H_{cols-1} applied to the first columns of I,
     * the last reflector first, in the storage of the reflectors. */
    for (size_t jj = cols; jj-- > 0;) {
        for (size_t c = jj + 1; c < cols; c++) {
            /* Row jj of a later column is still zero (set below when
             * that column was formed). */
            double dot = 0;
            for (size_t r = jj + 1; r < rows; r++)
                dot += (double)AT(x, r, jj) * AT(x, r, c);
            double f = tau[jj] * dot;
            AT(x, jj, c) = (float)(-f);
            for (size_t r = jj + 1; r < rows; r++)
                AT(x, r, c) = (float)(AT(x, r, c) - f * AT(x, r, jj));
        }
        for (size_t r = jj + 1; r < rows; r++)
            AT(x, r, jj) = (float)(-tau[jj] * AT(x, r, jj));
        AT(x, jj, jj) = (float)(1.0 - tau[jj]);
        for (size_t r = 0; r < jj; r++)
            AT(x, r, jj) = 0;
    }
    free(tau);
    return DDPH_OK;
}
#undef AT
