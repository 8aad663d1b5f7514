#!/bin/sh
# check_one.sh NAME [RANKS]: one test, with the environment make check
# gives it (`make check-one T=NAME [N=RANKS]` runs this).  NAME is, in this
# order of lookup:
#   - a test of `make check` (tests/faults.sh, tests/check_gpt, ...);
#   - a suite of tests/check_unit (tests/unit_list.h: reducer, config, ...),
#     or SUITE:CASE for one test case of it;
#   - a scenario of tests/mpi/test_runtime (`test_runtime --list`), run
#     under mpiexec on RANKS ranks (default: the first count it lists).
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check-one T=NAME}
S=${DDPH_TEST_SRCDIR:?run through make check-one T=NAME}
[ -n "${1:-}" ] || { echo "usage: make check-one T=NAME [N=RANKS]" >&2; exit 2; }
name=$1
ranks=${2:-}
case $name in
tests/*)
    if [ -x "$B/$name" ] && [ ! -d "$B/$name" ]; then
        exec "$B/$name"
    elif [ -f "$S/$name" ]; then
        exec sh "$S/$name"
    fi
    echo "check-one: no test $name in $B or $S" >&2
    exit 2
    ;;
esac
suite=${name%%:*}
tcase=
[ "$suite" != "$name" ] && tcase=${name#*:}
# The suite's name for Check is its suite_create's (rng: powersgd_rng).
ck=
if grep -q "^ *X($suite)" "$S/tests/unit_list.h"; then
    ck=$(sed -n 's/.*suite_create("\([^"]*\)").*/\1/p' "$S/tests/unit_$suite.c")
elif cat "$S"/tests/unit_*.c | grep -q "suite_create(\"$suite\")"; then
    ck=$suite
fi
if [ -n "$ck" ]; then
    if [ -n "$tcase" ]; then
        CK_RUN_SUITE=$ck CK_RUN_CASE=$tcase exec "$B/tests/check_unit"
    fi
    CK_RUN_SUITE=$ck exec "$B/tests/check_unit"
fi
# "NAME RANKS FAILS LIMIT": RANKS a comma list, FAILS 1 when the job is
# meant to fail (its rank 0 then prints "ok NAME"), LIMIT in seconds.
line=$("$B/tests/mpi/test_runtime" --list | awk -v n="$name" '$1 == n')
if [ -z "$line" ]; then
    echo "check-one: '$name' is no test of make check (tests/...), no suite of" >&2
    echo "tests/unit_list.h and no scenario of 'tests/mpi/test_runtime --list'" >&2
    exit 2
fi
set -- $line
[ -n "$ranks" ] || ranks=${2%%,*}
DDPH_TEST_TMPDIR="$B/tests/out/check-one"
mkdir -p "$DDPH_TEST_TMPDIR" || exit 1
export DDPH_TEST_TMPDIR
if [ "$3" = 1 ]; then
    # As run_mpi.sh: a job that fails on purpose passes when rank 0 says so.
    out=$(timeout "$4" "$MPIEXEC" -disable-auto-cleanup -n "$ranks" \
        "$B/tests/mpi/test_runtime" "$name" </dev/null 2>&1)
    printf '%s\n' "$out"
    printf '%s\n' "$out" | grep -q "^ok $name\$"
    exit $?
fi
exec timeout "$4" "$MPIEXEC" -n "$ranks" "$B/tests/mpi/test_runtime" "$name" </dev/null
