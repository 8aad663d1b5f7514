#!/usr/bin/env python3
"""freeze.py: writes runtime/plugin/abi/abi_1_MINOR.h, the plugin ABI's
structs as a release shipped them, from that release's headers.

    python3 runtime/plugin/abi/freeze.py MINOR [GIT_REVISION]

run from the top of the source tree when a release appends to the plugin
ABI (and once for each minor released before this script existed).  The
headers are read from GIT_REVISION (`git show REV:sdk/include/...`), or
from the working tree without one; their DDPH_PLUGIN_ABI_MINOR must be
MINOR.  Every `struct NAME { ... }` of plugin.h and types.h is copied as
NAME_1_MINOR with each function pointer written as void (*)(void) (the
same layout), followed by one _Static_assert per member that the current
plugin.h keeps its offset, and per struct that a frozen one (no
struct_size: handed out in arrays) keeps its size or a growable one only
grows.  The output is committed and never edited by hand."""
import re
import subprocess
import sys

HEADERS = ("sdk/include/ddphook/types.h", "sdk/include/ddphook/plugin.h")


def read(path, rev):
    if rev is None:
        with open(path) as f:
            return f.read()
    return subprocess.run(["git", "show", "%s:%s" % (rev, path)],
                          check=True, capture_output=True, text=True).stdout


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def structs(text):
    """(name, [(declaration, [members])]) for each struct with a body."""
    out = []
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{(.*?)\}\s*\w*\s*;", text, re.S):
        decls = []
        for raw in m.group(2).split(";"):
            d = " ".join(raw.split())
            if not d:
                continue
            fn = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", d)
            if fn:
                decls.append(("void (*%s)(void)" % fn.group(1), [fn.group(1)]))
                continue
            head, _, rest = d.partition(",")
            first = re.search(r"(\w+)\s*(\[[^]]*\])?\s*$", head).group(1)
            others = [re.search(r"(\w+)", r).group(1) for r in rest.split(",") if rest]
            decls.append((d, [first] + others))
        out.append((m.group(1), decls))
    return out


def main():
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit():
        sys.exit(__doc__)
    minor = int(sys.argv[1])
    rev = sys.argv[2] if len(sys.argv) == 3 else None
    texts = [read(h, rev) for h in HEADERS]
    found = re.search(r"#define\s+DDPH_PLUGIN_ABI_MINOR\s+(\d+)", texts[1])
    if not found or int(found.group(1)) != minor:
        sys.exit("freeze.py: %s's plugin.h is ABI minor %s, not %d"
                 % (rev or "the working tree", found and found.group(1), minor))
    sfx = "_1_%d" % minor
    guard = "DDPH_PLUGIN_ABI_1_%d_H" % minor
    lines = ["/* abi%s.h: the plugin ABI 1.%d as released, written by" % (sfx, minor),
             " * runtime/plugin/abi/freeze.py %d%s; do not edit.  Each struct is"
             % (minor, " " + rev if rev else ""),
             " * plugin.h's as that release shipped it, function pointers as",
             " * void (*)(void); the asserts hold this tree's plugin.h to it. */",
             "#ifndef " + guard, "#define " + guard, "",
             "#include <stddef.h>", "#include <stdint.h>", "",
             "#include <ddphook/plugin.h>", ""]
    asserts = []
    for name, decls in structs("\n".join(strip_comments(t) for t in texts)):
        lines.append("typedef struct %s%s {" % (name, sfx))
        members = []
        for decl, names in decls:
            lines.append("    %s;" % decl)
            members += names
        lines += ["} %s%s;" % (name, sfx), ""]
        for m in members:
            asserts.append("_Static_assert(offsetof(%s, %s) == offsetof(%s%s, %s),"
                           % (name, m, name, sfx, m))
            asserts.append('               "%s.%s moved since ABI 1.%d");' % (name, m, minor))
        if "struct_size" in members:
            asserts.append("_Static_assert(sizeof(%s) >= sizeof(%s%s),"
                           % (name, name, sfx))
            asserts.append('               "%s shrank since ABI 1.%d");' % (name, minor))
        else:
            asserts.append("_Static_assert(sizeof(%s) == sizeof(%s%s),"
                           % (name, name, sfx))
            asserts.append('               "%s is frozen and changed size since ABI 1.%d");'
                           % (name, minor))
    lines += asserts + ["", "#endif", ""]
    with open("runtime/plugin/abi/abi%s.h" % sfx, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
