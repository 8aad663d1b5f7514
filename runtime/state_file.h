/* state_file.h: hook state checkpoints.  Each rank writes its own file,
 * PATH.rank<R>, since hook state (error feedback, for one) differs per rank.
 * Layout, little-endian: "DDPHSTAT", u32 format version, u32 model count,
 * then per model: name, hook name, hook version (u32 length + bytes each),
 * iteration (u64), payload length (u64), payload, crc32 of the payload
 * (u32).  Written to a temporary file and renamed, so a crash never leaves
 * a half-written checkpoint under the real name. */
#ifndef DDPH_STATE_FILE_H
#define DDPH_STATE_FILE_H

#include "context.h"

ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err);
ddph_status ddph__state_load(ddph_ctx *ctx, const char *path, ddph_err *err);

#endif
