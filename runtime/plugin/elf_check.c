/* elf_check.c: see elf_check.h. */
#include "build-config.h"

#include "plugin/elf_check.h"

#include <gelf.h>
#include <libelf.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <ddphook/plugin.h>

/* Majors the loader can explain but not load; raise when v2 exists. */
#define NEWEST_MAJOR_TO_PROBE 9

/* The machine this library was built for, to match against the file's. */
#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#else
#define HOST_MACHINE EM_NONE /* not checked */
#endif

/* See elf_check.h. */
ddph_status ddph__elf_check(int fd, const char *path, ddph_err *err)
{
    if (elf_version(EV_CURRENT) == EV_NONE)
        return ddph__fail(err, DDPH_ERR_PLUGIN, "libelf: %s",
                          elf_errmsg(-1));
    struct stat sb;
    ddph_status st = DDPH_OK;
    Elf *elf = NULL;
    GElf_Ehdr eh;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a regular file", path);
        goto out;
    }
    elf = elf_begin(fd, ELF_C_READ, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not an ELF shared object (%s)",
                        path, elf_errno() ? elf_errmsg(-1)
                                          : "no ELF header");
        goto out;
    }
    if (eh.e_type != ET_DYN ||
        eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        (HOST_MACHINE != EM_NONE && eh.e_machine != HOST_MACHINE)) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a shared object for this "
                        "machine (ELF type %u, class %u, machine %u)",
                        path, (unsigned)eh.e_type,
                        (unsigned)eh.e_ident[EI_CLASS],
                        (unsigned)eh.e_machine);
        goto out;
    }
    /* dlopen maps every loadable segment: one past the end of the file is
     * a SIGBUS when touched.  The section headers must be there too. */
    uint64_t size = (uint64_t)sb.st_size;
    int truncated = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize > size ||
                    eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > size;
    for (int k = 0; !truncated && k < eh.e_phnum; k++) {
        GElf_Phdr ph;
        truncated = !gelf_getphdr(elf, k, &ph) ||
                    (ph.p_type == PT_LOAD && ph.p_offset + ph.p_filesz > size);
    }
    if (truncated) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a complete ELF shared object "
                        "(truncated: its headers reach past its %llu bytes)",
                        path, (unsigned long long)size);
        goto out;
    }
    /* The ddph_plugin_vN symbols it defines, by major. */
    unsigned majors = 0;
    int complete = 1, found_dynsym = 0;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) {
            complete = 0;
            break;
        }
        if (sh.sh_type != SHT_DYNSYM)
            continue;
        found_dynsym = 1;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (!data || sh.sh_entsize == 0) {
            complete = 0;
            break;
        }
        size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t k = 0; k < n; k++) {
            GElf_Sym sym;
            if (!gelf_getsym(data, (int)k, &sym))
                break;
            const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
            unsigned major;
            char extra;
            if (name && sym.st_shndx != SHN_UNDEF &&
                sscanf(name, "ddph_plugin_v%u%c", &major, &extra) == 1 &&
                major <= NEWEST_MAJOR_TO_PROBE)
                majors |= 1u << major;
        }
    }
    if (!complete || elf_errno() != 0) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s is not a complete ELF shared object "
                        "(truncated or damaged: %s)",
                        path, elf_errmsg(-1));
    } else if (!(majors & (1u << DDPH_PLUGIN_ABI_MAJOR))) {
        st = ddph__fail(err, DDPH_ERR_PLUGIN,
                        "hook plugin %s has no entry symbol %s%s (is it a "
                        "ddphook hook? build it with DDPH_PLUGIN_EXPORT)",
                        path, DDPH_PLUGIN_ENTRY_V1,
                        found_dynsym ? "" : " (no dynamic symbol table)");
        /* Name the majors the file does export, newer or retired. */
        for (int major = NEWEST_MAJOR_TO_PROBE; major >= 0; major--)
            if (majors & (1u << major)) {
                st = ddph__fail(
                    err, DDPH_ERR_ABI,
                    "hook plugin %s exports ddph_plugin_v%d only: ABI major "
                    "%d is %s; this host supports major %d (%s)",
                    path, major, major,
                    major > DDPH_PLUGIN_ABI_MAJOR ? "newer than this host"
                                                  : "no longer supported",
                    DDPH_PLUGIN_ABI_MAJOR, DDPH_PLUGIN_ENTRY_V1);
                break;
            }
    }
out:
    if (elf)
        elf_end(elf);
    return st;
}
