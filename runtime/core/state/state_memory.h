/* state_memory.h: a rank's hook state as bytes in memory instead of a
 * file: the bytes of its state file (state_file.h: header, every model's
 * hook state, crc32), with generation 0 and save id 0.  Saving is this
 * rank alone (no collective); loading is collective, with every check a
 * file load makes (checksum, format version, world size, rank, models,
 * hooks, layout) and all or nothing on every rank. */
#ifndef DDPH_STATE_MEMORY_H
#define DDPH_STATE_MEMORY_H

#include <stddef.h>

#include "core/context.h"

/* This rank's state into *data (malloc'd, *len bytes; the caller frees
 * it).  Between steps only. */
ddph_status ddph__state_save_memory(ddph_ctx *ctx, void **data, size_t *len,
                                    ddph_err *err);
ddph_status ddph__state_load_memory(ddph_ctx *ctx, const void *data,
                                    size_t len, ddph_err *err);

#endif
