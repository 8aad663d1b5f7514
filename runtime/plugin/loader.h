/* loader.h: finding and opening hook plugins.
 *
 * A hook name is looked up as <dir>/<name>.so along plugin_path; a value
 * containing '/' is used as the path itself.  The loader tries the newest
 * entry symbol it knows (ddph_plugin_api_v1), explains symbols of majors it does
 * not know, checks struct_size, required members and the option schema, and
 * refuses files or folders that other users can write unless allowed.  The
 * table is copied into a host-sized struct, zero-filled past the plugin's
 * struct_size, so an older minor's missing members read as NULL. */
#ifndef DDPH_LOADER_H
#define DDPH_LOADER_H

#include <ddphook/plugin.h>

#include "support/util.h"

/* Members up to and including on_bucket are required in every minor. */
#define DDPH__PLUGIN_V1_MIN_SIZE                                             \
    (offsetof(ddph_plugin_api_v1, on_bucket) + sizeof(void *))

typedef struct ddph_plugin {
    void *dl;
    char *path;           /* the file loaded */
    int fd;               /* the descriptor it is named after, or -1 */
    ddph_plugin_api_v1 api;   /* host-sized copy */
    uint32_t plugin_size; /* the plugin's struct_size */
    uint32_t file_crc;    /* CRC-32 of the file loaded, and its size */
    uint64_t file_size;
} ddph_plugin;

/* Resolves name_or_path to a file.  On failure the message lists every
 * path tried. */
ddph_status ddph__plugin_resolve(const char *name_or_path,
                                 const char *plugin_path, char **path_out,
                                 ddph_err *err);
/* The hook files (*.so) in one folder, sorted by name: their file names
 * in *files (free with ddph__names_free).  Returns how many, or -1 with
 * errno when the folder cannot be read. */
int ddph__plugin_dir_list(const char *dir, char ***files);
/* Every hook name along plugin_path (the stems of the *.so files that are
 * valid names), sorted and without repeats; folders that cannot be read
 * are skipped.  Returns how many. */
size_t ddph__plugin_names(const char *plugin_path, char ***names);
void ddph__names_free(char **names, size_t n);

ddph_status ddph__plugin_load(const char *name_or_path,
                              const char *plugin_path, int allow_insecure,
                              ddph_plugin **out, ddph_err *err);
void ddph__plugin_unload(ddph_plugin *p);


#endif
