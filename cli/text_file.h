/* text_file.h: the small line-oriented files of ddphook's tools (plan's
 * calibration, a GPU profile): read strictly, a line at a time, every
 * refusal at PATH:LINE; written whole and atomically. */
#ifndef DDPH_CLI_TEXT_FILE_H
#define DDPH_CLI_TEXT_FILE_H

#include <stddef.h>
#include <stdio.h>

/* One line after the first (NUL-terminated, without its newline): 1, or
 * 0 with the reason in why. */
typedef int (*text_line_fn)(void *ctx, char *line, char *why, size_t cap);
/* After the last line: 1 if the file is complete, else 0 and why. */
typedef int (*text_done_fn)(void *ctx, char *why, size_t cap);

/* Reads `path` (a regular file of at most `limit` bytes) whose first
 * line is `magic` (else "not a WHAT", with `hint`), each other line to
 * `line`, then `done`.  1, or 0 with PATH:LINE: reason in msg. */
int text_file_read(const char *path, size_t limit, const char *what,
                   const char *magic, const char *hint, text_line_fn line,
                   text_done_fn done, void *ctx, char *msg, size_t cap);

/* Closes `f` (an open_memstream on *text, *len), replaces `path` with
 * its text atomically and frees it.  1, or 0 with the reason in msg. */
int text_file_commit(FILE *f, char **text, size_t *len, const char *path,
                     const char *what, char *msg, size_t cap);

/* A finite number, the whole of s, in [lo, hi]. */
int text_number(const char *s, double lo, double hi, double *out);
/* A hook's name as these files keep it: letters, digits, . _ / -, at
 * least one and fewer than `cap` characters. */
int text_hook_name_ok(const char *s, size_t cap);

#endif
