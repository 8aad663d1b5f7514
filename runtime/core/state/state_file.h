/* state_file.h: hook state checkpoints.  Each rank writes its own file,
 * PATH.rank<R>, since hook state (error feedback, for one) differs per rank.
 * Layout, little-endian: "DDPHSTAT", u32 format version (3), u32 world
 * size, u32 rank, u64 generation (1 for the first save of PATH, then one
 * more than the newest generation any rank held), u64 save id (random,
 * the same on every rank of one save), u32 model count, then per model:
 * name, hook name, hook version (u32 length + bytes each), iteration
 * (u64), bucket count (u32) and each bucket's element count (u64), payload
 * length (u64), payload; last, the crc32 of every byte before it (u32,
 * crc32_z: files past 4 GiB included).
 *
 * Before it writes anything, a save checks the folder of PATH.rank<R>
 * with the load's own owner and mode rule (so a save into /tmp is refused
 * at once, not at the next load) and takes PATH.rank<R>.lock (flock, "pid
 * P on HOST" inside, removed at the end): a second job saving to PATH is
 * told so.  Both outcomes are agreed across ranks.
 *
 * Saving has two phases, so that a crash or a full disk at any point
 * leaves a loadable set: every rank writes PATH.rank<R>.next (a temporary
 * made exclusively beside it, synced, renamed, folder synced); the ranks
 * agree that all did; only then each renames .next over PATH.rank<R>.  If
 * a rank fails before the agreement, every rank removes its .next and the
 * last save stays.  A save first completes what an interrupted one left
 * (the newest generation every rank holds moves into place; incomplete
 * files and temporaries go).  Loading takes the newest generation that
 * every rank holds intact, in either file, and logs which.  Both read
 * every file's checksum before choosing: a damaged file is skipped with
 * a warning of its rank (and a save removes or replaces it), never
 * chosen over an intact older generation.
 *
 * Both calls are collective and refused inside a step or an accumulation
 * window; every rank succeeds or every rank fails with the failing rank's
 * message.  State files are opened with the plugins' owner and mode checks
 * (safe_open.h; [runtime] allow_insecure_state skips them); a link in
 * place of the file is refused.  Loading refuses anything that is not a
 * regular file, a file larger than the job's layout allows (before
 * reading it), a checksum, world size, rank or layout that does not match,
 * trailing bytes, and a hook payload that the hook's load() does not read
 * to its end.  Loading is all or nothing on every rank: each hook's state
 * is kept (its own save) until every rank has loaded every model, and put
 * back everywhere if any rank failed. */
#ifndef DDPH_STATE_FILE_H
#define DDPH_STATE_FILE_H

#include "core/context.h"
#include "core/state/state_format.h"

/* A save's folder check on this rank alone, nothing written: the
 * refusal ddph__state_save would give first (ddph_state_check). */
ddph_status ddph__state_check(const ddph_ctx *ctx, const char *path,
                              ddph_err *err);
ddph_status ddph__state_save(ddph_ctx *ctx, const char *path, ddph_err *err);
ddph_status ddph__state_load(ddph_ctx *ctx, const char *path, ddph_err *err);

/* The pieces a load from memory (state_memory.c) shares with them.
 * DDPH_OK where a save or load may run now (between steps, outside an
 * accumulation window, every model finalized). */
ddph_status ddph__state_between_steps(const ddph_ctx *ctx, const char *what,
                                      ddph_err *err);
/* Collective: every rank's st is DDPH_OK, or every rank fails with the
 * first failing rank's message. */
ddph_status ddph__state_agree(ddph_ctx *ctx, ddph_status st, ddph_err *err);
/* Collective: b (this rank's state, validated: b->pos at the first model)
 * into every model's hook, all or nothing on every rank; st is the
 * agreed outcome so far (every rank takes part whatever it is).  file
 * names b in messages. */
ddph_status ddph__state_apply(ddph_ctx *ctx, const char *file, ddph_status st,
                              ddph_state_buf *b, ddph_err *err);

#endif
