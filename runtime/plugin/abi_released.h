/* abi_released.h: every released plugin ABI minor, checked by the compiler.
 *
 * runtime/plugin/abi/abi_1_MINOR.h holds each released minor's structs as
 * its release shipped them, with a _Static_assert per member that this
 * tree's plugin.h keeps its offset, per frozen struct (no struct_size,
 * handed out in arrays) that it keeps its size, and per growable one that
 * it only grows.  runtime/plugin/abi/freeze.py writes them from the
 * release's headers; a release that appends to the ABI runs it once for
 * its minor and includes the result below.  Nothing there is edited by
 * hand.  1.0 and 1.1 were never released; 1.2 shipped in 0.1.0 and 0.2.0,
 * 1.3 in 0.3.0 and 0.4.0, 1.4 in 0.5.x, 1.5 in 0.6.0 to 0.8.x; 1.6 is
 * frozen by the release that ships it (0.9.0). */
#ifndef DDPH_PLUGIN_ABI_RELEASED_H
#define DDPH_PLUGIN_ABI_RELEASED_H

#include <stddef.h>
#include <stdint.h>

#include <ddphook/plugin.h>

#include "plugin/abi/abi_1_2.h"
#include "plugin/abi/abi_1_3.h"
#include "plugin/abi/abi_1_4.h"
#include "plugin/abi/abi_1_5.h"

/* The size of ddph_bucket, the stride of ddph_layout.buckets, that a
 * plugin built for ABI minor `minor` indexes with.  Minors 0 and 1 had no
 * divided_by (and no on_layout); each released minor since has its own
 * copy; a minor newer than this tree's is refused by the loader. */
static inline size_t ddph__abi_bucket_size(uint32_t minor)
{
    switch (minor) {
    case 0:
    case 1:
        return offsetof(ddph_bucket_1_2, divided_by);
    case 2:
        return sizeof(ddph_bucket_1_2);
    case 3:
        return sizeof(ddph_bucket_1_3);
    case 4:
        return sizeof(ddph_bucket_1_4);
    case 5:
        return sizeof(ddph_bucket_1_5);
    default:
        return sizeof(ddph_bucket);
    }
}

#endif
