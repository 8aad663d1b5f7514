/* hook_stats.h: the `stats` entry point's contract, written once for the
 * shipped hooks: up to `max` of the hook's `n` figures go to `out`, and
 * the return value is how many it has (docs/abi.md). */
#ifndef DDPH_HOOK_STATS_H
#define DDPH_HOOK_STATS_H

#include <stddef.h>

#include <ddphook/plugin.h>

static inline size_t hook_stats_put(const ddph_stat *all, size_t n,
                                    ddph_stat *out, size_t max)
{
    for (size_t i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n;
}

#endif
