/* elf_check.h: looking at a plugin file before dlopen runs any of its
 * code (constructors run inside dlopen). */
#ifndef DDPH_ELF_CHECK_H
#define DDPH_ELF_CHECK_H

#include "support/util.h"

/* The file open on fd (named `path` in messages) is a complete ELF shared
 * object of this machine whose dynamic symbol table defines the entry
 * symbol of this host's ABI major; the message names the majors it does
 * export otherwise.  libelf reads with read(), so a truncated file is an
 * error here, not a SIGBUS inside dlopen's mapping. */
ddph_status ddph__elf_check(int fd, const char *path, ddph_err *err);

#endif
