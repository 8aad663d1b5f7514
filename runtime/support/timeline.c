/* timeline.c: see timeline.h. */
#include "build-config.h"

#include "support/timeline.h"

#include "support/safe_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ddph__timeline_init(ddph_timeline *tl, int enabled)
{
    memset(tl, 0, sizeof *tl);
    tl->enabled = enabled;
    pthread_mutex_init(&tl->mu, NULL);
    tl->origin = wall();
}

void ddph__timeline_free(ddph_timeline *tl)
{
    free(tl->ev);
    pthread_mutex_destroy(&tl->mu);
    memset(tl, 0, sizeof *tl);
}

double ddph__timeline_now(const ddph_timeline *tl)
{
    return tl->enabled ? wall() - tl->origin : 0;
}

void ddph__timeline_record(ddph_timeline *tl, int track, double start,
                           const char *fmt, ...)
{
    if (!tl->enabled)
        return;
    double now = ddph__timeline_now(tl);
    ddph_trace_event e = {.track = track,
                          .ts = (start < 0 ? now : start) * 1e6,
                          .dur = start < 0 ? -1 : (now - start) * 1e6};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.name, sizeof e.name, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&tl->mu);
    if (tl->n == tl->cap) {
        size_t cap = tl->cap ? 2 * tl->cap : 1024;
        ddph_trace_event *ev = realloc(tl->ev, cap * sizeof *ev);
        if (!ev) { /* drop the event rather than fail the step */
            pthread_mutex_unlock(&tl->mu);
            return;
        }
        tl->ev = ev;
        tl->cap = cap;
    }
    tl->ev[tl->n++] = e;
    pthread_mutex_unlock(&tl->mu);
}

/* This rank's events as JSON objects, each followed by ",\n". */
static char *serialize(const ddph_timeline *tl, int rank, double shift_us,
                       size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    /* Track DDPH_TRACK_COMM + k is communication lane k. */
    int last = DDPH_TRACK_COMM;
    for (size_t i = 0; i < tl->n; i++)
        if (tl->ev[i].track > last)
            last = tl->ev[i].track;
    for (int t = 0; t <= last; t++) {
        char name[48];
        if (t == DDPH_TRACK_COMPUTE)
            snprintf(name, sizeof name, "compute");
        else if (t == DDPH_TRACK_COMM)
            snprintf(name, sizeof name, "communication");
        else
            snprintf(name, sizeof name, "communication lane %d",
                     t - DDPH_TRACK_COMM);
        fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
                   "\"args\":{\"name\":\"%s\"}},\n",
                rank, t, name);
    }
    fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":"
               "{\"name\":\"rank %d\"}},\n",
            rank, rank);
    for (size_t i = 0; i < tl->n; i++) {
        const ddph_trace_event *e = &tl->ev[i];
        if (e->dur < 0)
            fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,"
                       "\"ts\":%.3f,\"name\":\"%s\"},\n",
                    rank, e->track, e->ts + shift_us, e->name);
        else
            fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                       "\"dur\":%.3f,\"name\":\"%s\"},\n",
                    rank, e->track, e->ts + shift_us, e->dur, e->name);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

char *ddph__timeline_part(const ddph_timeline *tl, int rank, double first,
                          size_t *len)
{
    return serialize(tl, rank, (tl->origin - first) * 1e6, len);
}

ddph_status ddph__timeline_write_parts(const char *path, const char *all,
                                       size_t total, ddph_err *err)
{
    /* Written like a checkpoint (exclusive temporary, renamed over the
     * path): a link planted at the path is replaced, never followed. */
    static const char head[] = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    static const char tail[] = "\n]}\n";
    /* Drop the last ",\n" so the array is valid JSON. */
    size_t body = total >= 2 ? total - 2 : 0;
    char *text = malloc(sizeof head + body + sizeof tail);
    if (!text)
        return ddph__fail(err, DDPH_ERR_NOMEM, "trace: out of memory");
    size_t n = sizeof head - 1;
    memcpy(text, head, n);
    if (body)
        memcpy(text + n, all, body);
    n += body;
    memcpy(text + n, tail, sizeof tail - 1);
    n += sizeof tail - 1;
    ddph_status st = ddph__file_write_atomic(path, text, n, "trace", err);
    free(text);
    return st;
}

/* s as the body of a JSON string (quotes, backslashes and control
 * characters escaped), cut to fit out. */
static void json_escape(const char *s, char *out, size_t size)
{
    size_t n = 0;
    for (; *s && n + 7 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            n += (size_t)snprintf(out + n, size - n, "\\%c", c);
        else if (c < 0x20)
            n += (size_t)snprintf(out + n, size - n, "\\u%04x", c);
        else
            out[n++] = (char)c;
    }
    out[n] = '\0';
}

ddph_status ddph__timeline_write_failed(ddph_timeline *tl, int rank,
                                        const char *path, const char *why,
                                        ddph_err *err)
{
    size_t len = 0;
    char *mine = serialize(tl, rank, 0, &len);
    char *text = NULL, *file = NULL;
    size_t tlen = 0;
    FILE *f = mine ? open_memstream(&text, &tlen) : NULL;
    if (!f) {
        free(mine);
        return ddph__fail(err, DDPH_ERR_NOMEM, "trace: out of memory");
    }
    char reason[DDPH__ERR_LEN * 2];
    json_escape(why, reason, sizeof reason);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"ended\":"
               "\"in failure\",\"rank\":%d,\"origin_unix_s\":%.6f,"
               "\"error\":\"%s\"},\"traceEvents\":[\n",
            rank, tl->origin, reason);
    fwrite(mine, 1, len, f);
    fprintf(f, "{\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f,\"name\":\"job failed\",\"args\":{\"error\":"
               "\"%s\"}}\n]}\n",
            rank, DDPH_TRACK_COMPUTE, ddph__timeline_now(tl) * 1e6, reason);
    free(mine);
    ddph_status st = DDPH_OK;
    if (fclose(f) != 0 || !(file = malloc(strlen(path) + 32)))
        st = ddph__fail(err, DDPH_ERR_NOMEM, "trace: out of memory");
    else {
        snprintf(file, strlen(path) + 32, "%s.rank%d", path, rank);
        st = ddph__file_write_atomic(file, text, tlen, "trace", err);
    }
    free(file);
    free(text);
    return st;
}
