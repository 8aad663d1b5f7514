/* state_file.h: hook state checkpoints.  Each rank writes its own file,
 * PATH.rank<R>, since hook state (error feedback, for one) differs per rank.
 * Layout, little-endian: "DDPHSTAT", u32 format version (2), u32 world
 * size, u32 rank, u64 generation (one random number per save, the same on
 * every rank), u32 model count, then per model: name, hook name, hook
 * version (u32 length + bytes each), iteration (u64), bucket count (u32)
 * and each bucket's element count (u64), payload length (u64), payload;
 * last, the crc32 of every byte before it (u32).
 * Both calls are collective and refused inside a step or an accumulation
 * window; every rank succeeds or every rank fails with the failing rank's
 * message.  Saving writes a temporary file made exclusively beside the
 * target, syncs it and renames it (safe_file.h); loading refuses anything
 * that is not a regular file, a file larger than the job's layout allows
 * (before reading it), a checksum, world size, rank, layout or generation
 * that does not match, trailing bytes, and a hook payload that the hook's
 * load() does not read to its end.  Loading is all or nothing on every
 * rank: each hook's state is kept (its own save) until every rank has
 * loaded every model, and put back everywhere if any rank failed. */
#ifndef DDPH_STATE_FILE_H
#define DDPH_STATE_FILE_H

#include "core/context.h"

ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err);
ddph_status ddph__state_load(ddph_ctx *ctx, const char *path, ddph_err *err);

#endif
