#!/bin/sh
# check_layers.sh: the runtime's layer rule, checked on what was built
# (make check-layers, part of make check).
#
# The runtime's folders stack support -> device -> backends -> plugin ->
# core, and the command-line tool (cli) sits on top: a folder may use its
# own files and the folders below it, and the public headers
# (<ddphook/...>).  Each backend is a folder of its own in backends/
# (backends/mpi, backends/nccl, ...): only its own files and the tool
# include its headers or call its functions, the rest of the runtime
# reaches it through backends/'s neutral tables; <mpi.h> is included in
# backends/mpi and the tool only.
# Checked here, folder by folder:
#  - every #include of a runtime header (in every source and header of
#    the runtime and the tool) names the same or a lower folder;
#  - every undefined symbol of a folder's objects (nm) that another
#    runtime file defines is defined in the same or a lower folder;
#  - the tool reaches core only through the public API (ddph_*) and
#    core/cli_internal.h: no other core header, no other core symbol;
#  - a backend's headers and functions are used in its own folder, by the
#    tool, and (its table only) by backends/registry.c;
#  - no symbol is defined by two files of the runtime (a copy of a file
#    compiled into a second object).
# Each violation is printed as "FILE: WHAT (defined in FOLDER/FILE.c)".
#
# usage: check_layers.sh --srcdir DIR [--nm NM] --objects "LIB.lo ..."
#            --tool-objects "CLI.o ..." --sources "FILE ..."
# Objects are libtool objects (.lo, read for the object they name) or
# plain ones (.o), relative to the current (build) directory; sources are
# relative to DIR.  It fails when it finds nothing to check.
set -u

srcdir= nm=nm objects= tool_objects= sources=
while [ $# -gt 0 ]; do
    case $1 in
    --srcdir) srcdir=$2 ;;
    --nm) nm=$2 ;;
    --objects) objects=$2 ;;
    --tool-objects) tool_objects=$2 ;;
    --sources) sources=$2 ;;
    *) echo "check_layers.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift 2
done
if [ -z "$srcdir" ] || [ -z "$objects" ] || [ -z "$sources" ]; then
    echo "check-layers: FAIL: no objects or no sources to check" >&2
    exit 1
fi

sources=$(printf '%s\n' $sources | sort -u)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_layers.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# The folder of a path: runtime/backends/nccl/x.c -> backends, cli/x.c ->
# cli.
folder_of() {
    case $1 in
    runtime/*) echo "$1" | cut -d/ -f2 ;;
    cli/*) echo cli ;;
    *) echo "?" ;;
    esac
}

# The backend a path belongs to: runtime/backends/mpi/x.c -> mpi; "-" for
# every other path (the neutral files of backends/ included).
backend_of() {
    case $1 in
    runtime/backends/*/*) echo "$1" | cut -d/ -f3 ;;
    *) echo - ;;
    esac
}

# The source of an object: runtime/backends/mpi/libddphook_core_la-mpi_wait.lo
# -> runtime/backends/mpi/mpi_wait.c (automake's per-target prefix ends in
# '-'; the project's file names have none).
source_of() {
    echo "$1" | sed 's|[^/]*-\([^/-]*\)\.l\{0,1\}o$|\1.c|; s|\.l\{0,1\}o$|.c|'
}

# The object file a libtool object names (PIC if built, else non-PIC).
object_file() {
    case $1 in
    *.lo)
        dir=$(dirname "$1")
        pic=$(sed -n "s/^pic_object='\(.*\)'$/\1/p" "$1" 2>/dev/null)
        plain=$(sed -n "s/^non_pic_object='\(.*\)'$/\1/p" "$1" 2>/dev/null)
        if [ -n "$pic" ] && [ "$pic" != none ]; then
            echo "$dir/$pic"
        elif [ -n "$plain" ] && [ "$plain" != none ]; then
            echo "$dir/$plain"
        fi
        ;;
    *) echo "$1" ;;
    esac
}

# ---- the symbols: one line per symbol, "ROLE FOLDER SOURCE SYMBOL TYPE" --
nobj=0
missing=0
for role in lib tool; do
    if [ $role = lib ]; then list=$objects; else list=$tool_objects; fi
    for lo in $list; do
        o=$(object_file "$lo")
        if [ -z "$o" ] || [ ! -f "$o" ]; then
            echo "check-layers: $lo: no object file (build first)" >&2
            missing=$((missing + 1))
            continue
        fi
        src=$(source_of "$lo")
        f=$(folder_of "$src")
        $nm -P "$o" >"$tmp/nm" 2>/dev/null || {
            echo "check-layers: $nm -P $o failed" >&2
            missing=$((missing + 1))
            continue
        }
        echo "$f" >>"$tmp/folders"
        awk -v role=$role -v f="$f" -v s="$src" -v b="$(backend_of "$src")" \
            'NF >= 2 { print role, f, s, $1, $2, b }' "$tmp/nm" >>"$tmp/syms"
        nobj=$((nobj + 1))
    done
done
if [ "$nobj" -eq 0 ] || [ "$missing" -gt 0 ]; then
    echo "check-layers: FAIL: $nobj objects read, $missing missing" >&2
    exit 1
fi

# ---- the includes: one line per #include, "FOLDER FILE:LINE NAME" --------
nsrc=0
for s in $sources; do
    case $s in *.c | *.h | *.cu) ;; *) continue ;; esac
    if [ ! -f "$srcdir/$s" ]; then
        echo "check-layers: FAIL: source $s not found in $srcdir" >&2
        exit 1
    fi
    f=$(folder_of "$s")
    dir=$(dirname "$s")
    awk -v f="$f" -v file="$s" -v dir="$dir" -v b="$(backend_of "$s")" '
        match($0, /^[ \t]*#[ \t]*include[ \t]*[<"][^>"]+[>"]/) {
            spec = substr($0, RSTART, RLENGTH)
            sub(/^[ \t]*#[ \t]*include[ \t]*/, "", spec)
            print f, file ":" FNR, substr(spec, 1, 1), substr(spec, 2, length(spec) - 2), dir, b
        }' "$srcdir/$s" >>"$tmp/includes"
    nsrc=$((nsrc + 1))
done
if [ "$nsrc" -eq 0 ]; then
    echo "check-layers: FAIL: no source to read" >&2
    exit 1
fi
touch "$tmp/includes"

# What the tool may call in core besides the public API.
gate=runtime/core/cli_internal.h
if [ -f "$srcdir/$gate" ]; then
    grep -o 'ddph__[A-Za-z0-9_]*' "$srcdir/$gate" | sort -u >"$tmp/gate"
else
    : >"$tmp/gate"
fi

# Resolves each included name: a runtime folder (FOLDER/...), a file
# beside the includer, the SDK's public headers, or the generated
# build-config.h; other quoted names are not the project's headers.
while read -r f where kind name dir b; do
    first=${name%%/*}
    if [ "$name" != "$first" ] && [ -f "$srcdir/runtime/$name" ]; then
        echo "$f $where $first $name $b $(backend_of "runtime/$name")"
    elif [ "$kind" = '"' ] && [ -f "$srcdir/$dir/$name" ]; then
        echo "$f $where $(folder_of "$dir/$name") $name $b $(backend_of "$dir/$name")"
    elif [ "$first" = cli ] && [ -f "$srcdir/$name" ]; then
        echo "$f $where cli $name $b -"
    elif [ "$first" = ddphook ] || [ "$name" = build-config.h ]; then
        echo "$f $where sdk $name $b -"
    elif [ "$name" = mpi.h ]; then
        echo "$f $where mpi $name $b mpi"
    elif [ "$kind" = '"' ]; then
        echo "$f $where unknown $name $b -"
    fi
done <"$tmp/includes" >"$tmp/resolved"

awk -v gate="$gate" -v gatelist="$tmp/gate" \
    -v registry=runtime/backends/registry.c '
    BEGIN {
        split("support device backends plugin core cli", order, " ")
        for (i = 1; i in order; i++)
            rank[order[i]] = i
        rank["sdk"] = 0
        rank["mpi"] = 0
        while ((getline sym < gatelist) > 0)
            gated[sym] = 1
    }
    FILENAME ~ /resolved$/ {
        nincl++
        if ($3 == "unknown") {
            print $2 ": #include \"" $4 "\" (not a header of the runtime or the SDK)"
            bad++
        } else if (rank[$3] > rank[$1]) {
            print $2 ": #include \"" $4 "\" (" $3 " is above " $1 ")"
            bad++
        } else if ($6 != "-" && $6 != $5 && $1 != "cli") {
            print $2 ": #include <" $4 "> (backend " $6 "\047s own: only its folder and the tool use it)"
            bad++
        } else if ($1 == "cli" && $3 == "core" && "runtime/" $4 != gate) {
            print $2 ": #include \"" $4 "\" (the tool reaches core only through " gate ")"
            bad++
        }
        next
    }
    # symbols: ROLE FOLDER SOURCE SYMBOL TYPE
    $5 == "U" { use[++nuse] = $0; next }
    $1 == "lib" && $5 ~ /^[ABCDGRSTVWi]$/ {
        where = substr($3, 1, 8) == "runtime/" ? substr($3, 9) : $3
        # Weak definitions (V, W: the inline functions, templates and
        # type information of C++, emitted by every file that uses them) are
        # merged by the linker, not two copies.
        if (($4 in def) && def[$4] != where && $5 !~ /^[VW]$/ &&
            !weak[$4]) {
            # Two copies: a file compiled twice, or one name for two things.
            print $3 ": " $4 " (defined in " def[$4] " too)"
            bad++
        }
        def[$4] = where
        weak[$4] = $5 ~ /^[VW]$/
        deffolder[$4] = $2
        defbackend[$4] = $6
    }
    END {
        for (i = 1; i <= nuse; i++) {
            split(use[i], u, " ")
            nundef++
            if (!(u[4] in def))
                continue
            nlib++
            d = deffolder[u[4]]
            if (rank[d] > rank[u[2]]) {
                print u[3] ": " u[4] " (defined in " def[u[4]] ")"
                bad++
            } else if (defbackend[u[4]] != "-" && defbackend[u[4]] != u[6] &&
                       u[2] != "cli" && u[3] != registry) {
                print u[3] ": " u[4] " (defined in " def[u[4]] ": backend " defbackend[u[4]] "\047s own)"
                bad++
            } else if (u[2] == "cli" && d == "core" && u[4] !~ /^ddph_[a-z]/ &&
                       !(u[4] in gated)) {
                print u[3] ": " u[4] " (defined in " def[u[4]] "; the tool reaches core only through " gate ")"
                bad++
            }
        }
        printf "check-layers: %d #include lines of the runtime and the tool, " \
               "%d undefined symbols (%d defined in the runtime) checked: ", \
               nincl, nundef, nlib
        if (bad) {
            printf "%d violation%s\n", bad, bad == 1 ? "" : "s"
            exit 1
        }
        print "no folder uses one above it"
        if (nincl == 0 || nlib == 0)
            exit 1
    }' "$tmp/resolved" "$tmp/syms"
rc=$?
echo "check-layers: $nobj objects ($(sort "$tmp/folders" | uniq -c |
    awk '{printf "%s%s %d", sep, $2, $1; sep = ", "}')), $nsrc sources"
exit $rc
