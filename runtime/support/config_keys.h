/* config_keys.h: the keys of the fixed sections ([runtime], [accumulate],
 * [hook]): where each goes in ddph_config, its type, range and one-line
 * description; the parser (config.c) and the printer (config_write.c)
 * walk the same table. */
#ifndef DDPH_CONFIG_KEYS_H
#define DDPH_CONFIG_KEYS_H

#include <stddef.h>

#include "support/config.h"

typedef enum { K_REAL, K_INT, K_BOOL, K_STRING, K_BACKEND, K_WRAPPER } key_type;

typedef struct key_spec {
    const char *section;
    const char *key;
    key_type type;
    size_t offset;
    double min, max;
    int auto_ok; /* K_REAL: "auto" is accepted, stored as 0 */
    const char *doc;
} key_spec;


extern const key_spec ddph__config_keys[];
extern const size_t ddph__config_nkeys;

#endif
