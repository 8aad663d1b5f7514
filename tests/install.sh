#!/bin/sh
# install.sh SRC README: the README's own commands, verbatim, in a fresh
# HOME and a fresh source folder SRC (the release tarball's contents):
#  1. the quick start after its apt-get (autogen, configure --prefix
#     ~/.local, make, make install, two epochs of Fashion-MNIST);
#  2. the "Use the install" block: PATH and PKG_CONFIG_PATH as written,
#     `ddphook plugins`, a trainer built with pkg-config and run on 2
#     ranks without LD_LIBRARY_PATH, the installed template built and
#     checked with its own Makefile.
# Run by `make check-install`.  Exit 77 (skip) without mpiexec or the
# Fashion-MNIST files (apt-get install mpich dataset-fashion-mnist).
set -u
SRC=${1:?usage: install.sh SRC README}
README=${2:?usage: install.sh SRC README}
if ! command -v mpiexec >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    echo "SKIP: /usr/share/datasets/fashion-mnist missing (apt-get install dataset-fashion-mnist)"
    exit 77
fi
pass=0
fail=0
# step NAME PATTERN SCRIPT: runs SCRIPT with sh -e in SRC; PATTERN must be
# in its output.
step() {
    name=$1 pattern=$2 script=$3
    log="$SRC/../$(echo "$name" | tr -c 'a-z0-9\n' '-').log"
    if (cd "$SRC" && sh -ec "$script") >"$log" 2>&1 &&
        grep -q -- "$pattern" "$log"; then
        pass=$((pass + 1))
        echo "PASS: $name :: $(grep -- "$pattern" "$log" | tail -n 1)"
    else
        fail=$((fail + 1))
        echo "FAIL: $name (no '$pattern', or a command failed):"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
}
# A user's shell: a fresh HOME and nothing of ours in the environment.
HOME=$(cd "$SRC/.." && pwd)/home
rm -rf "$HOME"
mkdir -p "$HOME"
export HOME
unset PKG_CONFIG_PATH LD_LIBRARY_PATH DDPHOOK_LOG MAKEFLAGS MFLAGS MAKELEVEL
PATH=$(printf '%s\n' "$PATH" | tr ':' '\n' | grep -v '/\.local/bin$' | paste -sd:)
export PATH

quick=$(sed -n '/^## Quick start/,/^```$/p' "$README" | grep '^sudo apt-get' |
    sed 's/^.*dataset-fashion-mnist && //')
case $quick in
./autogen.sh*) ;;
*) echo "FAIL: cannot find the quick start's command line in $README"; exit 1 ;;
esac
step "quick start" "^summary: 2 ranks, 2 epochs" "$quick"
use=$(sed -n '/tests\/install.sh runs this block/,/^```$/p' "$README" |
    sed '1,2d;$d')
[ -n "$use" ] || { echo "FAIL: cannot find the \"Use the install\" block in $README"; exit 1; }
step "use the install: plugins, a trainer, the template" \
    "my_hook.so: conforms" "$use"
# What that block showed, one by one.
for want in "allreduce .*ABI 1\." "^minimal_trainer: 2 ranks" \
    " -I$HOME/.local/include .*my_hook.c"; do
    if grep -q -- "$want" "$SRC/../use-the-install--plugins--a-trainer--the-template.log"; then
        pass=$((pass + 1)); echo "PASS: the block printed '$want'"
    else
        fail=$((fail + 1)); echo "FAIL: the block did not print '$want'"
    fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
