#!/bin/sh
# capi_layout.sh: the Python bridge's ctypes copies of the C API's structs
# and constants (python/ddphook/_capi.py) match the C layout this build
# compiled: every size, member offset and value tests/tools/capi_layout
# prints must be what ctypes computes.  A member moved or added on one side
# only would hand Python garbage without any error.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
PY=${PYTHON:-python3}
if [ "$PY" = : ] || ! command -v "$PY" >/dev/null 2>&1; then
    echo "SKIP: no Python 3 (the bridge's layout is checked with it)"
    exit 77
fi
facts=$("$B/tests/tools/capi_layout") || { echo "FAIL: tests/tools/capi_layout"; exit 1; }
printf '%s\n' "$facts" | "$PY" -c '
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location("capi", sys.argv[1])
capi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capi)
bad, n = [], 0
seen = {}
for line in sys.stdin:
    kind, *rest = line.split()
    n += 1
    if kind == "size":
        cls, size = getattr(capi, rest[0]), int(rest[1])
        seen[rest[0]] = set()
        if ctypes.sizeof(cls) != size:
            bad.append("sizeof(%s) is %d in ctypes, %d in C" % (rest[0], ctypes.sizeof(cls), size))
    elif kind == "field":
        cls, member, off = getattr(capi, rest[0]), rest[1], int(rest[2])
        seen[rest[0]].add(member)
        got = getattr(cls, member, None)
        if got is None:
            bad.append("%s has no member %s (C offset %d)" % (rest[0], member, off))
        elif got.offset != off:
            bad.append("%s.%s is at %d in ctypes, %d in C" % (rest[0], member, got.offset, off))
    elif kind == "const":
        got = getattr(capi, rest[0], None)
        if got != int(rest[1]):
            bad.append("%s is %r in _capi.py, %s in C" % (rest[0], got, rest[1]))
for name, members in seen.items():
    extra = [f[0] for f in getattr(capi, name)._fields_ if f[0] not in members]
    if extra:
        bad.append("%s has members C does not print: %s" % (name, ", ".join(extra)))
for b in bad:
    print("FAIL: " + b)
if not bad:
    print("PASS: %d sizes, offsets and constants of _capi.py match the C API" % n)
sys.exit(1 if bad else 0)
' "$S/python/ddphook/_capi.py"
