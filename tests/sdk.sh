#!/bin/sh
# sdk.sh: the hook author's path, end to end.  Installs this build into a
# temporary root; builds examples/post_localsgd and the installed template
# with their own Makefiles against the installed SDK (pkg-config only, no
# path into the source tree); replays PyTorch's post-local-SGD vectors (when
# present); checks the averaging schedule on 4 ranks with subgroups of 2;
# and runs the installed ddphook-plugin-test on every shipped hook, the
# templates and post_localsgd, failing on any failed row; and on a 1-bit
# hook with error feedback done right and done wrong (it must fail each
# wrong one, under --valgrind with one verdict on every rank; started
# without mpiexec, the 1-4 rank sweep).  A hook
# that must pass runs every check; one that must fail runs only the group
# of checks that catches it (--only), on the rank counts it shows on.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?}
OUT="$B/tests/out/sdk"
rm -rf "$OUT"
mkdir -p "$OUT"
export DDPH_TEST_TMPDIR="$OUT" # test_runtime's job files (scenario_util.c)
pass=0
fail=0
skipped=""   # the parts a missing prerequisite left out, said at the end
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
ko() { fail=$((fail + 1)); echo "FAIL: $1"; }

root="$OUT/root"
if ${MAKE:-make} -C "$B" install DESTDIR="$root" >"$OUT/install.log" 2>&1; then
    ok "make install DESTDIR=$root"
else
    ko "make install"; cat "$OUT/install.log"; exit 1
fi
pc=$(find "$root" -name ddphook.pc | head -n 1)
bindir=$(dirname "$(find "$root" -name ddphook-plugin-test -type f | head -n 1)")
template=$(find "$root" -type d -name template -path '*ddphook*' | head -n 1)
# build NAME FOLDER: copies FOLDER and builds it with its own Makefile.
build() {
    rm -rf "$OUT/$1"
    cp -R "$2" "$OUT/$1"
    chmod -R u+w "$OUT/$1"
    if PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root" \
            ${MAKE:-make} -C "$OUT/$1" >"$OUT/$1.log" 2>&1; then
        ok "$1 built against the installed SDK"
    else
        ko "building $1"; cat "$OUT/$1.log"; exit 1
    fi
    # Every include path must come from the installed root, none from the tree.
    for flag in $(grep -o -- '-I[^ ]*' "$OUT/$1.log"); do
        case "$flag" in
        -I"$root"/*) ;;
        *) ko "$1: the build used $flag, outside the installed SDK" ;;
        esac
    done
}
build post_localsgd "$S/examples/post_localsgd"
build template "$template"
so="$OUT/post_localsgd/post_localsgd.so"

V=${REFERENCE_VECTORS:-}
if [ -f "$V/ws2/inputs/trace.ini" ]; then
    for w in 2 4; do
        for case in post_localSGD:true post_localSGD_nosync:false; do
            folder=${case%%:*}
            job="$OUT/$folder-$w.ini"
            printf '[runtime]\nbucket_cap_mb = 0.0078125\nfirst_bucket_cap_mb = 0.0078125\ntimeout_s = 60\n[hook]\nname = %s\n[hook.post_localsgd]\nstart_localSGD_iter = 2\nsubgroup_size = 2\npost_local_gradient_allreduce = %s\n' \
                "$so" "${case#*:}" > "$job"
            if timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
                    --trace "$V/ws$w/inputs" --out "$OUT/$folder-$w" </dev/null >/dev/null &&
                res=$("$B/tests/tools/compare_f32" "$V/ws$w/$folder" "$OUT/$folder-$w" "$w" 6 1e-5 0); then
                ok "$folder ws$w: $res"
            else
                ko "$folder ws$w: ${res:-replay failed}"
            fi
        done
    done
else
    skipped="$skipped; reference vectors not found at '$V' (--with-reference-vectors=DIR): post-local-SGD vector replays not run"
fi

if out=$(DDPH_TEST_LOCALSGD="$so" timeout 120 "$MPIEXEC" -n 4 \
        "$B/tests/mpi/test_runtime" local-sgd </dev/null 2>&1); then
    ok "averaging schedule on 4 ranks, subgroups of 2 (periodic, hierarchical); f32, bf16 and f64 parameters averaged together"
else
    ko "averaging schedule"; printf '%s\n' "$out" | sed 's/^/    /'
fi
# The conformance tester, as installed, on every hook.
# conform RANKS PLUGIN [ARGS...] (4 ranks on 2 busy cores take minutes:
# training included, so the generous timeout)
conform() {
    n=$1; shift
    if out=$(timeout 600 "$MPIEXEC" -n "$n" "$bindir/ddphook-plugin-test" "$@" </dev/null 2>&1); then
        ok "ddphook-plugin-test -n $n $(basename "$1") ${2:-} ${3:-} :: $(printf '%s\n' "$out" | tail -n 1)"
    else
        ko "ddphook-plugin-test -n $n $*"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
P="$DDPH_TEST_PLUGIN_DIR"
# Leaks and memory errors: every shipped hook under valgrind on 1 and 2
# ranks (one rank's paths and the peers'), and on 4 those that size and
# index buffers by the world size themselves (int8's per-rank chunks, some
# of them empty on 4 ranks; top-k's and signsgd's W received messages),
# judged as everywhere else (no --rtol: each hook's declared tolerance or
# error feedback).
SHIPPED="allreduce fp16 bf16 powersgd batched_powersgd topk int8 signsgd"
if command -v valgrind >/dev/null 2>&1; then
    for n in 1 2; do
        for h in $SHIPPED; do
            conform "$n" "$P/$h.so" --steps 3 --valgrind \
                --suppressions "$S/sdk/valgrind.supp"
        done
    done
    for h in topk int8 signsgd; do
        conform 4 "$P/$h.so" --steps 3 --valgrind \
            --suppressions "$S/sdk/valgrind.supp"
    done
else
    skipped="$skipped; valgrind not found (apt-get install valgrind): leak checks not run"
fi
# Every shipped hook and the template with their defaults on 1, 2 and 4
# ranks, then in the phases options choose: lossless top-k; PowerSGD
# compressing from step 2; no --rtol anywhere.
for n in 1 2 4; do
    for h in $SHIPPED; do
        conform "$n" "$P/$h.so"
    done
    conform "$n" "$OUT/template/my_hook.so"
    conform "$n" "$OUT/template/ef_signs.so"
    conform "$n" "$OUT/template/qsgd.so"
done
for n in 2 4; do
    conform "$n" "$P/topk.so" --option ratio=1
done
for n in 1 2; do
    conform "$n" "$P/powersgd.so" --option start_powerSGD_iter=2
    conform "$n" "$P/batched_powersgd.so" --option start_powerSGD_iter=2
    conform "$n" "$so" --option start_localSGD_iter=100
done
# `ddphook plan` prices the template built out of tree, given as a
# relative path to its .so, from the collectives its dry run issues.
if (cd "$OUT/template" && "$B/ddphook" plan --model mlp --hooks ./my_hook.so \
        --no-calibration --compute 0 --plugin-path "$P" --csv "$OUT/plan.csv") \
        >"$OUT/plan.txt" 2>&1 &&
        awk -F, '$1 == "./my_hook.so" && $2 > 0 && $6 > 0 { f = 1 } END { exit !f }' "$OUT/plan.csv"; then
    ok "ddphook plan --hooks ./my_hook.so (the template, out of tree)"
else
    ko "ddphook plan on the template:"; cat "$OUT/plan.txt" "$OUT/plan.csv"
fi
# The template under valgrind too.
command -v valgrind >/dev/null 2>&1 &&
    conform 2 "$OUT/template/my_hook.so" --steps 3 --valgrind \
        --suppressions "$S/sdk/valgrind.supp"
# Wrong compressors fail, each on the row that catches it: zeros from an
# "exact" hook; any hook held to --rtol 10; zeros, and 0.9 of the average,
# from hooks that claim error feedback.
# refuse_on N NAME ROW ARGS...: the tester on N ranks fails ARGS with a FAIL
# line matching ROW (and no "conforms", nor "passed"); refuse: the same on
# 2 ranks.
refuse_on() {
    n=$1 name=$2 row=$3
    shift 3
    if out=$(timeout 600 "$MPIEXEC" -n "$n" "$bindir/ddphook-plugin-test" "$@" </dev/null 2>&1); then
        ko "$name passed the tester"; printf '%s\n' "$out" | sed 's/^/    /'
    elif printf '%s\n' "$out" | grep -q "^FAIL  $row" &&
        ! printf '%s\n' "$out" | grep -q "conforms\|: passed "; then
        ok "$name fails :: $(printf '%s\n' "$out" | grep "^FAIL  $row" | head -n 1)"
    else
        ko "$name: no failing '$row' row, or 'conforms' printed"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
refuse() { refuse_on 2 "$@"; }
FK="$DDPH_TEST_FAKE_DIR"
# The failing row says where its largest error is (an off-by-one shows
# as a tensor's last element).
refuse "a hook that returns zeros" "f32 buckets: close to average .*; the largest at step [0-9]*, tensor [0-9]*, element [0-9]* of [0-9]*" \
    "$FK/zeroes.so" --only numerics
refuse "a hook that returns zeros, at --rtol 10" "tolerance" "$FK/zeroes.so" \
    --rtol 10 --only numerics
refuse "zeros under a claim of error feedback" "error feedback" \
    "$FK/zeroes_ef.so" --only error-feedback
refuse "0.9 of the average under a claim of error feedback" "error feedback" \
    "$FK/scaled_ef.so" --only error-feedback
command -v valgrind >/dev/null 2>&1 &&
    refuse "zeros, under valgrind" "f32 buckets: close to average" "$FK/zeroes.so" \
        --steps 3 --valgrind --suppressions "$S/sdk/valgrind.supp" --only numerics
# A 1-bit hook with error feedback (tests/fake_plugins/ef_sign.c): right,
# it conforms on 1 to 4 ranks; each way of getting it wrong fails on the
# row that catches it (the training row's excess over the exact run's is
# printed).
# Right, it conforms started without mpiexec: the tester runs itself on 1,
# 2, 3 and 4 ranks and prints one verdict.
if out=$(MPIEXEC="$MPIEXEC" timeout 900 "$bindir/ddphook-plugin-test" \
        "$FK/ef_sign.so" </dev/null 2>&1) &&
    printf '%s\n' "$out" | grep -q "^world sizes: 1 PASS, 2 PASS, 3 PASS, 4 PASS$" &&
    [ "$(printf '%s\n' "$out" | tail -n 1)" = "$FK/ef_sign.so: conforms" ]; then
    ok "ddphook-plugin-test ef_sign.so, no mpiexec :: $(printf '%s\n' "$out" | grep '^world sizes')"
else
    ko "ddphook-plugin-test ef_sign.so without mpiexec: no 1-4 sweep that conforms"
    printf '%s\n' "$out" | sed 's/^/    /'
fi
# Wrong in ways that show at some world sizes only, or at none of the
# per-step rows: each fails the sweep (started without mpiexec) on the row
# that catches it.
# refuse_sweep NAME ROW ARGS...: as refuse, started without mpiexec, with
# one verdict after a 'world sizes' line.
refuse_sweep() {
    name=$1 row=$2
    shift 2
    out=$(MPIEXEC="$MPIEXEC" timeout 900 "$bindir/ddphook-plugin-test" "$@" </dev/null 2>&1)
    if [ $? -ne 0 ] && printf '%s\n' "$out" | grep -q "^FAIL  $row" &&
        printf '%s\n' "$out" | grep -q "^world sizes: .*FAIL" &&
        [ "$(printf '%s\n' "$out" | tail -n 1)" = "$1: FAILED" ]; then
        ok "$name fails :: $(printf '%s\n' "$out" | grep "^FAIL  $row" | head -n 1 | cut -c 1-220) :: $(printf '%s\n' "$out" | grep '^world sizes')"
    else
        ko "$name: not a failing '$row' row and one FAILED verdict over 1-4 ranks"
        printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
refuse_sweep "ef_sign dropping the last element of odd buckets" \
    "error feedback" "$FK/ef_sign_drop_odd.so" --only error-feedback
refuse_sweep "ef_sign dropping the last element of odd buckets, training" \
    "trains" "$FK/ef_sign_drop_odd.so" --only trains
refuse_sweep "ef_sign claiming error feedback, keeping none (random rounding)" \
    "error feedback" "$FK/ef_sign_dither.so" --only error-feedback
refuse_sweep "ef_sign dividing by a power of two, not W" "trains" \
    "$FK/ef_sign_pow2.so" --only trains
refuse_sweep "ef_sign leaking 4 KiB a call" "heap steady over steps" \
    "$FK/ef_sign_leak_step.so" --only numerics
refuse_sweep "ef_sign writing through a bucket pointer kept past its call" \
    "buckets untouched after their call" "$FK/ef_sign_keep_ptr.so" --only errors
# Declaring DDPH_PLUGIN_DIVIDES_FIRST and never dividing: right with
# copies (the host divides), W times the average as a view (1 rank: the
# same).
refuse_sweep "allreduce leaving the division to the host, also as a view" \
    "f32 buckets as a view: close to average" "$FK/trusts_division.so" \
    --only numerics
# Declaring DDPH_PLUGIN_CONCURRENT_BUCKETS with one scratch buffer for
# every bucket: buckets on 3 lanes at once overwrite each other there.
refuse_sweep "allreduce through one scratch buffer, declared concurrent" \
    "f32 buckets on 3 lanes" "$FK/shared_scratch.so" --only numerics
# A world size's run past --time-limit (a hook that hangs outside its
# collectives gets a verdict too): stopped, named, and no rank left.
out=$(MPIEXEC="$MPIEXEC" timeout 300 "$bindir/ddphook-plugin-test" \
    "$FK/ef_sign.so" --only trains --time-limit 0.05 </dev/null 2>&1)
rc=$?
sleep 1
left=$(pgrep -f "ddphook-plugin-test $FK/ef_sign.so --only trains --time-limit" | wc -l)
if [ "$rc" -eq 1 ] &&
    printf '%s\n' "$out" | grep -q "^FAIL  1 rank: did not finish within 0.05 s, stopped" &&
    printf '%s\n' "$out" | grep -q "^world sizes: 1 FAIL (did not finish)" &&
    [ "$(printf '%s\n' "$out" | tail -n 1)" = "$FK/ef_sign.so: FAILED" ] &&
    [ "$left" -eq 0 ]; then
    ok "a run past --time-limit is stopped and fails, no rank left :: $(printf '%s\n' "$out" | grep '^world sizes')"
else
    ko "a run past --time-limit: exit $rc, $left processes left, no 'did not finish' FAIL"
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
fi
# Wrong where no per-step row looks: one float written past the bucket
# (on 1 rank nothing else notices), error buffers leaked at each load.
refuse_on 1 "ef_sign writing one float past its bucket, 1 rank" \
    "writes inside its bucket only" "$FK/ef_sign_past_end.so" --only errors
refuse "ef_sign leaking its error buffers at each load" \
    "heap steady over state loads" "$FK/ef_sign_load_leak.so" --only state
# A hook without error feedback trains within 1.25x of the exact run's
# excess: 4-bit stochastic rounding done right does (1 and 3 ranks: the
# shipped hooks run on 1, 2 and 4 above); rounding negatives toward zero
# (every step within its declared tolerance) ends 4-7x and fails.
for n in 1 3; do
    conform "$n" "$FK/stoch_round.so" --only trains
done
refuse_sweep "stochastic rounding that truncates negatives toward zero" \
    "trains" "$FK/stoch_round_trunc.so" --only trains
for n in 1 2 4; do
    for wrong in "half:at 0.5x scale, memory consistent" \
        "double:at 2x scale, memory consistent" \
        "flipped:decoding flipped signs" "stale:never clearing its memory"; do
        refuse_on "$n" "ef_sign ${wrong#*:}, $n ranks" "trains" \
            "$FK/ef_sign_${wrong%%:*}.so" --only trains
    done
    refuse_on "$n" "ef_sign without save/load, $n ranks" \
        "state across steps.*ddph_state_save refused" "$FK/ef_sign_no_save.so" \
        --only state
    refuse_on "$n" "ef_sign with undeclared state and no save/load, $n ranks" \
        "state across steps.*results depend on earlier" \
        "$FK/ef_sign_undeclared.so" --only state
done
refuse_on 4 "ef_sign summing from its own message, 4 ranks" \
    "f32 buckets: same result  *ranks hold different results: rank [1-3] differs from rank 0 first at step [0-9]*, tensor [0-9]*, element [0-9]* of [0-9]*" \
    "$FK/ef_sign_own_first.so" --only numerics
# Under --valgrind one verdict: a leak on the last rank only fails every
# rank, each printing the same final line.
if command -v valgrind >/dev/null 2>&1; then
    leak="$FK/ef_sign_leak_last.so"
    out=$(timeout 600 "$MPIEXEC" -n 2 "$bindir/ddphook-plugin-test" "$leak" \
        --steps 3 --valgrind --suppressions "$S/sdk/valgrind.supp" \
        --only numerics </dev/null 2>&1)
    if [ "$(printf '%s\n' "$out" | grep -c "^$leak: FAILED$")" -eq 2 ] &&
        ! printf '%s\n' "$out" | grep -q "conforms" &&
        printf '%s\n' "$out" | grep -q "^FAIL  valgrind: leaks and memory errors *rank 1:"; then
        ok "a leak on the last rank under --valgrind :: both ranks print '$(basename "$leak"): FAILED'"
    else
        ko "a leak on the last rank under --valgrind: not one FAILED verdict on each rank"
        printf '%s\n' "$out" | sed 's/^/    /'
    fi
fi
# A declared tolerance is a bound, not a pass: fp16 held to an exact
# hook's 1e-5 fails.
if out=$("$MPIEXEC" -n 2 "$bindir/ddphook-plugin-test" "$P/fp16.so" --rtol 1e-5 \
        --only numerics </dev/null 2>&1); then
    ko "fp16 held to --rtol 1e-5 passed"
else
    printf '%s\n' "$out" | grep -q "FAIL .*close to average.*rtol 1e-05, --rtol" &&
        ok "fp16 held to --rtol 1e-5 fails its 'close to average' rows" ||
        { ko "fp16 at --rtol 1e-5: no failing 'close to average' row"; printf '%s\n' "$out" | sed 's/^/    /'; }
fi
# What an author finds in the install: the guide and the ABI reference
# where pkg-config's docdir says, the shipped hooks' sources where its
# examplesdir says (top-k's builds alone against the installed SDK).
docdir="$root$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --variable=docdir ddphook)"
exdir="$root$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --variable=examplesdir ddphook)"
if [ -f "$docdir/plugin-guide.md" ] && [ -f "$docdir/abi.md" ] &&
    [ -f "$exdir/plugins/topk/topk.c" ] && [ -f "$exdir/plugins/int8/int8.c" ] &&
    ${CC:-cc} -std=c11 -shared -fPIC -o "$OUT/topk_example.so" \
        $(PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root" pkg-config --cflags ddphook) \
        "$exdir/plugins/topk/topk.c" -lm 2>"$OUT/topk_example.log"; then
    ok "the install carries the guide, the ABI reference and the hooks' sources (topk.c builds from $exdir)"
else
    ko "docs or example hooks missing from the install ($docdir, $exdir)"; cat "$OUT/topk_example.log" 2>/dev/null
fi
# Every document an installed one points to (docs/NAME.md) is installed.
missing=
for ref in $(cat "$docdir"/*.md | grep -o 'docs/[a-z_-]*\.md' | sort -u); do
    [ -f "$docdir/${ref#docs/}" ] || missing="$missing $ref"
done
[ -z "$missing" ] && ok "the installed documents' references to docs/*.md are installed" ||
    ko "installed documents point to documents not installed:$missing"
# ddphook plugins --plugin-path lists folders in search order, DIRS before
# the installed folder as bench searches, and says which file is shadowed.
mkdir -p "$OUT/first"
cp "$P/topk.so" "$OUT/first/topk.so"
listed=$("$B/ddphook" plugins --plugin-path "$OUT/first:$P" 2>&1)
if printf '%s\n' "$listed" | grep -q "^  topk.so *(not used: $OUT/first/topk.so comes first)" &&
    printf '%s\n' "$listed" | grep -v "^  " | tail -n 2 | head -n 1 | grep -q "/ddphook/plugins:"; then
    ok "ddphook plugins --plugin-path :: search order, shadowed files named, the installed folder last"
else
    ko "ddphook plugins --plugin-path: $listed"
fi
# Its columns line up: "option(s)" at one place on every hook's line,
# 0 options or 10 (powersgd's).
cols=$(printf '%s\n' "$listed" | grep " ABI " | awk '{ print index($0, " option") }' | sort -u)
[ "$(printf '%s\n' "$cols" | grep -c .)" = 1 ] &&
    ok "ddphook plugins :: its columns line up" ||
    ko "ddphook plugins: columns at $(echo $cols): $listed"
# ddphook bench hooks takes hook options: top-k at ratio 0.5 sends far
# more than at its default 0.01.
sent() {
    rm -f "$OUT/bench.csv"
    "$MPIEXEC" -n 2 "$B/ddphook" bench hooks --model mlp --repeats 2 --hooks topk \
        --plugin-path "$P" --csv "$OUT/bench.csv" "$@" </dev/null >/dev/null 2>&1
    sed -n 's/^topk,\([0-9]*\),.*/\1/p' "$OUT/bench.csv" 2>/dev/null
}
default=$(sent)
half=$(sent --option topk.ratio=0.5)
if [ -n "$default" ] && [ -n "$half" ] && [ "$half" -gt $((default * 10)) ]; then
    ok "ddphook bench hooks --option topk.ratio=0.5 :: $half bytes a step against $default"
else
    ko "ddphook bench hooks --option: '$half' bytes a step at ratio 0.5, '$default' by default"
fi
# A hook's own statistics: under each row with --stats, and at
# ddph_close with [runtime] log_stats (whatever DDPHOOK_LOG says).
stats=$("$MPIEXEC" -n 2 "$B/ddphook" bench hooks --model mlp --repeats 2 \
    --hooks topk --plugin-path "$P" --stats </dev/null 2>&1)
if printf '%s\n' "$stats" | grep -q "^  stats: density [0-9]"; then
    ok "ddphook bench hooks --stats :: $(printf '%s\n' "$stats" | grep '^  stats:')"
else
    ko "ddphook bench hooks --stats printed no statistics: $stats"
fi
printf '[runtime]\nplugin_path = %s\nlog_stats = true\n[hook]\nname = topk\n' \
    "$P" > "$OUT/log_stats.ini"
logged=$(DDPHOOK_LOG=error "$MPIEXEC" -n 2 "$B/examples/minimal_trainer" \
    "$OUT/log_stats.ini" </dev/null 2>&1)
if [ "$(printf '%s\n' "$logged" | grep -c "model 'mlp', hook 'topk': density 0.01, elements_before [0-9]")" -eq 2 ]; then
    ok "[runtime] log_stats :: one line a rank at close, with DDPHOOK_LOG=error"
else
    ko "[runtime] log_stats: no statistics line from each rank in: $logged"
fi
# A replica check asked for by a trainer that gives no parameter memory
# (minimal_trainer): one warning at finalize, on rank 0; none from a
# trainer that gives it (replicas_trainer).
printf '[runtime]\nplugin_path = %s\ncheck_replicas_every = 1\n[hook]\nname = allreduce\n' \
    "$P" > "$OUT/replicas_nodata.ini"
said=$("$MPIEXEC" -n 2 "$B/examples/minimal_trainer" "$OUT/replicas_nodata.ini" </dev/null 2>&1)
given=$("$MPIEXEC" -n 2 "$B/tests/mpi/replicas_trainer" "$P" </dev/null 2>&1)
warning="check_replicas_every = 1, but no parameter's memory was given"
if [ "$(printf '%s\n' "$said" | grep -c "$warning")" -eq 1 ] &&
    ! printf '%s\n' "$given" | grep -q "no parameter's memory was given"; then
    ok "check_replicas_every without parameter memory :: $(printf '%s\n' "$said" | grep "$warning")"
else
    ko "check_replicas_every without parameter memory: not one warning: $said"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] || exit 1
# A part left out is a skip (77) with its reason, never a pass.
if [ -n "$skipped" ]; then
    echo "SKIP: ${skipped#; }"
    exit 77
fi
