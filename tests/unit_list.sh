#!/bin/sh
# unit_list.sh: tests/unit_list.h is the one list of check_unit's suites.
# Every name there must have its tests/unit_NAME.c among check_unit's
# sources in Makefile.am, and every tests/unit_*.c there (and in the
# tree) must be in the list: a suite left out of either would never run.
set -u
S=${DDPH_TEST_SRCDIR:?run through make check}
listed=$(sed -n 's/^ *X(\([a-z_0-9]*\)).*/\1/p' "$S/tests/unit_list.h" | sort)
built=$(sed -n '/^tests_check_unit_SOURCES/,/^[^	]/p' "$S/Makefile.am" |
    tr ' \t\\' '\n\n\n' | sed -n 's|^tests/unit_\([a-z_0-9]*\)\.c$|\1|p' | sort)
files=$(cd "$S/tests" && ls unit_*.c | sed 's/^unit_\(.*\)\.c$/\1/' | sort)
n=$(printf '%s\n' "$listed" | grep -c .)
if [ "$n" -lt 1 ]; then
    echo "FAIL: no suite in tests/unit_list.h"
    exit 1
fi
rc=0
if [ "$listed" != "$built" ]; then
    echo "FAIL: tests/unit_list.h and Makefile.am's tests_check_unit_SOURCES differ:"
    printf 'unit_list.h: %s\nMakefile.am: %s\n' "$(echo $listed)" "$(echo $built)"
    rc=1
fi
if [ "$listed" != "$files" ]; then
    echo "FAIL: tests/unit_list.h and the tests/unit_*.c files differ:"
    printf 'unit_list.h: %s\ntests/:      %s\n' "$(echo $listed)" "$(echo $files)"
    rc=1
fi
[ $rc -eq 0 ] && echo "PASS: $n suites, the same in tests/unit_list.h, Makefile.am and tests/"
exit $rc
