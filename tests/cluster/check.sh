#!/bin/sh
# check.sh: the multi-host tests, on tests/cluster/cluster.sh's simulated
# hosts (make check-cluster), over a 1 Gbit/s link, 2 hosts x 2 ranks:
#  - the minimal trainer's average is exact across hosts, and every rank
#    exits 0 (MPI_Finalize included, with preload/mpich-finalize.so);
#  - ddph_open warns about MPICH 4.0's finalize when UCX_TLS forces TCP
#    between hosts without that library, and not with it;
#  - post-local-SGD with its default subgroups (group_intra_node: the two
#    hosts) keeps parameters identical within a host between global
#    averages and different across hosts, and the hierarchical averager
#    follows its schedule;
#  - large and small sums (MPICH's f32 allreduce, the half-precision
#    ring) give exact averages across hosts, and so do f32 sums on 3
#    hosts of 1 rank, which go round the runtime's ring;
#  - buckets are never in shared memory across hosts, nor on one host
#    whose /dev/shm is too small for them (and then the job still runs);
#  - a host's link cut in the middle of a step (2 hosts x 1 rank): every
#    rank reports it, naming the rank behind the cut, and exits 4 by
#    itself within timeout_s + 5 s.
# Exits 77 (skip) where namespaces cannot be made (not root).
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check-cluster}
S=${DDPH_TEST_SRCDIR:?run through make check-cluster}
. "$S/tests/ranks.sh"
C="$S/tests/cluster/cluster.sh"
OUT="$B/tests/out/cluster"
rm -rf "$OUT"
mkdir -p "$OUT"
export DDPH_TEST_TMPDIR="$OUT" # test_runtime's job files (scenario_util.c)
probe=$(sh "$C" --hosts 1 --ranks-per-host 1 --rate unlimited -- true 2>&1)
rc=$?
if [ $rc -eq 77 ]; then
    printf '%s\n' "$probe"
    exit 77
fi
pass=0
fail=0
# check [--line RE | --no-line RE] NAME COMMAND...: passes when COMMAND
# exits 0 (and printed a line matching RE, or none).  cluster.sh preloads
# preload/mpich-finalize.so, so MPICH 4.0's MPI_Finalize between these
# hosts ends (docs/usage.md): a rank that exits non-zero after its checks
# is a failure.
check() {
    want= avoid=
    [ "$1" = --line ] && { want=$2; shift 2; }
    [ "$1" = --no-line ] && { avoid=$2; shift 2; }
    name=$1
    shift
    out=$("$@" </dev/null 2>&1)
    rc=$?
    why="exit $rc"
    if [ $rc -eq 0 ]; then
        why=
        [ -n "$want" ] && ! printf '%s\n' "$out" | grep -q -- "$want" && why="no line matching '$want'"
        [ -n "$avoid" ] && printf '%s\n' "$out" | grep -q -- "$avoid" && why="a line matching '$avoid'"
    fi
    if [ -z "$why" ]; then
        pass=$((pass + 1))
        echo "PASS: $name :: $(printf '%s\n' "$out" | { [ -n "$want" ] && grep -- "$want" || tail -n 1; } | tail -n 1)"
    else
        fail=$((fail + 1))
        echo "FAIL: $name ($why)"
        printf '%s\n' "$out" | sed 's/^/    /'
    fi
}

printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.1\ntimeout_s = 30\n' \
    "$DDPH_TEST_PLUGIN_DIR" >"$OUT/minimal.ini"
# minimal_trainer's line gives the worst error over every rank.
check --line "max |error| vs the true average 0\$" \
    "minimal trainer, 2 hosts x 2 ranks at 1gbit" \
    timeout 120 sh "$C" --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
    "$B/examples/minimal_trainer" "$OUT/minimal.ini"
# ddph_open's warning about MPICH 4.0's finalize over TCP: given when the
# ranks span hosts, UCX_TLS forces TCP and the fix is not preloaded (the
# run's finalize may then hang: ddph_close's watchdog ends it after 10 s,
# so its exit status is not checked); not given when the fix is loaded.
warning="MPI_Finalize can hang between hosts over UCX's TCP transport"
out=$(DDPH_CLUSTER_UCX_TLS=tcp,self timeout 60 sh "$C" --hosts 2 --ranks-per-host 1 \
    --rate 1gbit --no-finalize-fix -- "$B/examples/minimal_trainer" "$OUT/minimal.ini" \
    </dev/null 2>&1)
if printf '%s\n' "$out" | grep -q "$warning.*mpich-finalize.so"; then
    pass=$((pass + 1))
    echo "PASS: the finalize warning, UCX_TLS=tcp,self without the fix :: $(printf '%s\n' "$out" | grep "$warning")"
else
    fail=$((fail + 1))
    echo "FAIL: no finalize warning with UCX_TLS=tcp,self and without the fix"
    printf '%s\n' "$out" | sed 's/^/    /'
fi
check --no-line "$warning" \
    "no finalize warning with the fix preloaded (UCX_TLS=tcp,self)" \
    env DDPH_CLUSTER_UCX_TLS=tcp,self timeout 60 sh "$C" --hosts 2 \
    --ranks-per-host 1 --rate 1gbit -- "$B/examples/minimal_trainer" "$OUT/minimal.ini"
check \
    "post-local-SGD, default subgroups = the hosts (group_intra_node: 2 groups of 2)" \
    env DDPH_TEST_LOCALSGD="$B/tests/gpu/.libs/post_localsgd.so" \
    timeout 180 sh "$C" --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
    "$B/tests/mpi/test_runtime" local-sgd-intra-node
check \
    "exact averages across hosts, 2 hosts x 2 ranks (f32, fp16 and bf16 rings, bf16 gradients)" \
    timeout 180 sh "$C" --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
    "$B/tests/mpi/test_runtime" sums
check \
    "exact f32 averages round the runtime's ring, 3 hosts x 1 rank" \
    timeout 180 sh "$C" --hosts 3 --ranks-per-host 1 --rate 1gbit -- \
    "$B/tests/mpi/test_runtime" sums
check \
    "no shared buckets across hosts, 2 hosts x 2 ranks (exact averages, gradients not in /dev/shm)" \
    timeout 180 sh "$C" --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
    "$B/tests/mpi/test_runtime" private-buckets
# One host whose /dev/shm (a tmpfs of 40 MB in a mount namespace of its
# own) has room for MPICH's own files but not for the buckets' segment.
check \
    "a full /dev/shm, 2 ranks on one host: private buckets, exact averages, nothing left behind" \
    timeout 180 unshare -m sh -c 'mount -t tmpfs -o size=40m tmpfs /dev/shm &&
        "$0" -n 2 "$1" private-buckets && ! ls /dev/shm | grep -q ddphook' \
    "$MPIEXEC" "$B/tests/mpi/test_runtime"

# A link cut: the last rank takes its host off the network mid-step.  One
# rank per host: with two, once the cut-off host's first rank exited, its
# other rank was gone before it had reported in about 1 run of 4 on this
# machine, most likely ended by hydra's proxy there (which cannot reach
# mpiexec any more); not a broken pipe (ignoring SIGPIPE did not help).
TIMEOUT_S=3
LIMIT=$((TIMEOUT_S + 5))
printf '[runtime]\nplugin_path = %s\ntimeout_s = %s\nbucket_cap_mb = 0.02\nfirst_bucket_cap_mb = 0.02\n[hook]\nname = allreduce\n' \
    "$DDPH_TEST_PLUGIN_DIR" "$TIMEOUT_S" >"$OUT/cut.ini"
dir="$OUT/cut"
mkdir -p "$dir"
MPIEXEC_FLAGS=-disable-auto-cleanup sh "$C" --hosts 2 --ranks-per-host 1 \
    --rate 1gbit -- "$B/tests/mpi/fault_trainer" "$OUT/cut.ini" cut mid-step \
    "$dir" </dev/null >"$dir/log" 2>&1 &
job=$!
start=$(date +%s)
# Every rank's process gone, or far too long.
while :; do
    sleep 0.5
    ranks_gone "$dir" 0 1 && break
    [ $(($(date +%s) - start)) -gt $((LIMIT + 40)) ] && break
done
# hydra cannot hear from the cut-off host and waits: cluster.sh's trap
# ends everything in the namespaces and removes them.
kill -TERM "$job" 2>/dev/null
wait "$job" 2>/dev/null
why=""
stamp=$(cat "$dir/fault" 2>/dev/null)
[ -n "$stamp" ] || why="the link was never cut"
worst=0
for r in 0 1; do
    [ -n "$why" ] && break
    if alive "$(cat "$dir/pid.$r")"; then
        why="rank $r still running"
        break
    fi
    # From the rank's own report file: the cut-off host's output never
    # reaches mpiexec.
    t=$(grep "^SURVIVOR rank $r: .* exit 4" "$dir/report.$r" 2>/dev/null | tail -n 1 |
        sed -n 's/.* at \([0-9.]*\), exit 4$/\1/p')
    if [ -z "$t" ]; then
        why="rank $r did not report and exit 4"
        break
    fi
    took=$(awk -v a="$stamp" -v b="$t" 'BEGIN { printf "%.1f", b - a }')
    if awk -v x="$took" -v l=$LIMIT 'BEGIN { exit !(x > l) }'; then
        why="rank $r exited $took s after the cut (limit $LIMIT s)"
        break
    fi
    # Each side of the cut names the rank on the other.
    other=$((1 - r))
    grep -q "rank $r.*timeout_s = $TIMEOUT_S.*\(rank $other did not answer\|rank $other cannot be reached\)" "$dir/report.$r" ||
        why="rank $r does not name rank $other, behind the cut, as silent or unreachable"
    worst=$(awk -v a="$worst" -v b="$took" 'BEGIN { print (b > a ? b : a) }')
done
if [ -z "$why" ]; then
    pass=$((pass + 1))
    echo "PASS: link cut mid-step, 2 hosts x 1 rank :: every rank reported and exited 4 by itself, the last $worst s after the cut"
else
    fail=$((fail + 1))
    echo "FAIL: link cut mid-step: $why"
    cat "$dir/log" "$dir"/report.* 2>/dev/null | sed 's/^/    /'
fi
# Left behind: a namespace whose cluster.sh (named ddph<PID>-...) has
# ended.  One whose cluster.sh still runs is another job's, on a machine
# that runs two at once.
left=
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(ddph[0-9][0-9]*-[^ ]*\).*/\1/p'); do
    owner=${ns#ddph}
    owner=${owner%%-*}
    kill -0 "$owner" 2>/dev/null || left="$left $ns"
done
[ -n "$left" ] && { fail=$((fail + 1)); echo "FAIL: namespaces left behind:$left"; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
