/* idx.c: see idx.h.  IDX: big-endian magic (2051 images, 2049 labels),
 * the dimensions, then unsigned bytes. */
#include "idx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int read_be32(gzFile f, uint32_t *v)
{
    unsigned char b[4];
    if (gzread(f, b, 4) != 4)
        return 0;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return 1;
}

static gzFile open_idx(const char *dir, const char *prefix, const char *kind,
                       char *path, size_t len)
{
    snprintf(path, len, "%s/%s-%s.gz", dir, prefix, kind);
    gzFile f = gzopen(path, "rb");
    if (!f) { /* an uncompressed copy works too */
        snprintf(path, len, "%s/%s-%s", dir, prefix, kind);
        f = gzopen(path, "rb");
    }
    return f;
}

int idx_load(const char *dir, const char *prefix, size_t limit, dataset *out,
             char *msg, size_t msglen)
{
    memset(out, 0, sizeof *out);
    char ipath[4096], lpath[4096];
    gzFile fi = open_idx(dir, prefix, "images-idx3-ubyte", ipath, sizeof ipath);
    gzFile fl = open_idx(dir, prefix, "labels-idx1-ubyte", lpath, sizeof lpath);
    uint32_t magic, n, rows, cols, nl;
    int ok = 0;
    if (!fi || !fl) {
        snprintf(msg, msglen, "%s: cannot open (apt-get install "
                              "dataset-fashion-mnist, or --data DIR)",
                 fi ? lpath : ipath);
        goto out;
    }
    if (!read_be32(fi, &magic) || magic != 2051 || !read_be32(fi, &n) ||
        !read_be32(fi, &rows) || !read_be32(fi, &cols) || rows * cols == 0 ||
        rows * cols > 1 << 20) {
        snprintf(msg, msglen, "%s: not an IDX image file", ipath);
        goto out;
    }
    if (!read_be32(fl, &magic) || magic != 2049 || !read_be32(fl, &nl) ||
        nl != n) {
        snprintf(msg, msglen, "%s: not an IDX label file for %u images",
                 lpath, n);
        goto out;
    }
    out->n = limit && limit < n ? limit : n;
    out->dim = (size_t)rows * cols;
    unsigned char *raw = malloc(out->n * out->dim);
    out->x = malloc(out->n * out->dim * sizeof *out->x);
    out->y = malloc(out->n);
    if (!raw || !out->x || !out->y) {
        free(raw);
        snprintf(msg, msglen, "out of memory");
        goto out;
    }
    if (gzread(fi, raw, (unsigned)(out->n * out->dim)) != (int)(out->n * out->dim) ||
        gzread(fl, out->y, (unsigned)out->n) != (int)out->n) {
        free(raw);
        snprintf(msg, msglen, "%s: truncated", ipath);
        goto out;
    }
    for (size_t i = 0; i < out->n * out->dim; i++)
        out->x[i] = raw[i] / 255.0f;
    free(raw);
    ok = 1;
out:
    if (fi)
        gzclose(fi);
    if (fl)
        gzclose(fl);
    if (!ok)
        idx_free(out);
    return ok;
}

void idx_free(dataset *d)
{
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}
