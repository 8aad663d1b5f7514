/* state_format.h: a state file's bytes: the header (magic, format
 * version, world size, rank, generation, save id), each model's hooks'
 * states, a crc32 of it all; encoded from, and checked against, this job
 * (state_file.c writes, chooses and loads the files). */
#ifndef DDPH_STATE_FORMAT_H
#define DDPH_STATE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "core/context.h"

/* Magic, version, world size, rank, generation, save id. */
#define DDPH__STATE_HEADER_BYTES 36u
/* Save ids are random below this, so that -id fits an int64. */
#define DDPH__STATE_ID_LIMIT ((uint64_t)1 << 62)
/* Said with the size limit of ddph__state_largest. */
#define DDPH__STATE_LIMIT_WHY "a state file of this job's models can hold"

/* What messages call the bytes checked: a state file by its path, or a
 * rank's part in memory (ddph_state_load_from_memory), which is no file. */
typedef struct ddph_state_source {
    const char *name;
    int in_memory;
} ddph_state_source;

/* A state file in memory; pos: where the next read starts. */
typedef struct ddph_state_buf {
    unsigned char *data;
    size_t len, cap, pos;
} ddph_state_buf;

/* The hooks' save and load callbacks (plugin.h's writer and reader). */
ddph_status ddph__state_buf_write(void *sink, const void *data, size_t n);
ddph_status ddph__state_buf_read(void *source, void *data, size_t n);
/* Reads at b->pos: 0 when b is too short (or the string differs). */
int ddph__state_get_u32(ddph_state_buf *b, uint32_t *v);
int ddph__state_get_u64(ddph_state_buf *b, uint64_t *v);
int ddph__state_get_str_eq(ddph_state_buf *b, const char *want);

/* This rank's state file: every model's hooks' states, into b; `what`
 * names the call in messages. */
ddph_status ddph__state_encode(ddph_ctx *ctx, const char *what,
                               uint64_t generation, uint64_t id,
                               ddph_state_buf *b, ddph_err *err);
/* The largest state file this job's models can write: larger is no
 * state file of theirs. */
size_t ddph__state_largest(const ddph_ctx *ctx);
/* Checks the header (the first DDPH__STATE_HEADER_BYTES of b) against
 * this job; the generation and save id it names. */
ddph_status ddph__state_parse_header(const ddph_ctx *ctx,
                                     const ddph_state_source *src,
                                     ddph_state_buf *b, uint64_t *generation,
                                     uint64_t *id, ddph_err *err);
/* The save id of a whole state (len bytes at data: header, checksum,
 * nothing judged against a job); DDPH_ERR_IO for bytes that are not one
 * (another format, short, damaged). */
ddph_status ddph__state_intact_id(const void *data, size_t len, uint64_t *id);
/* A file whose checksum does not match is damaged (read in pieces from
 * fd, size bytes). */
ddph_status ddph__state_check_sum(int fd, const char *file, uint64_t size,
                                  ddph_err *err);
/* Checks everything in file (read into b) against this job and the
 * generation and id chosen, without touching any hook (so nothing is
 * half loaded if another rank's file is bad).  Leaves b->pos at the first
 * model. */
ddph_status ddph__state_validate(ddph_ctx *ctx, const ddph_state_source *src,
                                 uint64_t generation, uint64_t id,
                                 ddph_state_buf *b, ddph_err *err);

#endif
