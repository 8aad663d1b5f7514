#!/bin/sh
# cluster.sh: a cluster on one machine.  Each simulated host is a Linux
# network namespace with one interface, joined to the others by a bridge
# (in a namespace of its own); every host's link is shaped to RATE with
# tc's token bucket filter, both ways.  PROGRAM runs under hydra's mpiexec
# across the hosts: mpiexec runs in the first host, hydra's ssh launcher is
# pointed at a script that starts each proxy with `ip netns exec`, and
# traffic between hosts goes over TCP on the shaped link, while ranks of
# one host talk through shared memory (MPICH's, and UCX's for the
# endpoints UCX makes between them anyway): UCX_TLS=tcp,self,sm.  UCX
# takes two processes with the same boot id for one machine and would
# join them by shared memory, past the link; each simulated host
# therefore sees a boot id of its own (a file bind-mounted over
# /proc/sys/kernel/random/boot_id in its processes' mount namespace).
# DDPH_CLUSTER_UCX_TLS replaces the transport list.  MPICH 4.0's
# MPI_Finalize over TCP hangs now and then (docs/usage.md): every process
# of the job preloads the build's preload/.libs/mpich-finalize.so
# (DDPH_CLUSTER_PRELOAD names another), which prevents it;
# --no-finalize-fix runs without it (tests/cluster/soak.sh counts both).
#
#   sh tests/cluster/cluster.sh --hosts H --ranks-per-host R --rate RATE \
#       [--latency MS] [--burst BYTES] [--no-finalize-fix] -- PROGRAM ARGS...
#
# The token bucket lets a burst through at the speed of the machine: by
# default what the link sends in 1 ms, at least 64 KiB, so that a fast
# rate is not held back by the kernel's timer.  At 100 Mbit/s that is 5
# ms of the link, and a message smaller than it after a pause takes no
# time: a real link sends every frame at its rate.  --burst BYTES (at
# least 3028, two full frames) sets it: --burst 3028 at 100 Mbit/s times
# small messages as a real link would, and bulk transfers 3-6% slower
# than the default; at 1 Gbit/s a burst under 125000 holds bulk transfers
# well below the rate (the timer again).
#
# RATE is tc's syntax (100mbit, 1gbit, 10gbit) or "unlimited".  --latency
# adds a one-way delay with netem where the kernel has it (it says so and
# exits 77 where it does not).  MPIEXEC (default mpiexec) is hydra's;
# MPIEXEC_FLAGS are passed to it (e.g. -disable-auto-cleanup).  PROGRAM gets this script's environment,
# plus DDPH_CLUSTER_SCRIPT (this script): a rank cuts its own host's link
# with `sh "$DDPH_CLUSTER_SCRIPT" --cut` (or host H's with --cut H), as
# the fault tests do.
#
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): without them, or without
# `ip` and `tc`, it says why and exits 77.  Everything it creates (the
# namespaces, and with them their links) is removed on exit, on failure
# and on interruption.  Only addresses inside 10.231.0.0/24, inside these
# namespaces, are used.
set -u
me=$(readlink -f "$0")

# ---- cut a host's link (from a test, inside or outside the cluster) ------
if [ "${1:-}" = "--cut" ]; then
    if [ -n "${2:-}" ]; then
        ns="${DDPH_CLUSTER_PREFIX:?--cut HOST runs inside a cluster.sh job}-h$2"
    else
        ns=$(ip netns identify $$)
        [ -n "$ns" ] || { echo "cluster.sh --cut: not inside a simulated host" >&2; exit 2; }
    fi
    exec ip netns exec "$ns" ip link set eth0 down
fi

usage() {
    sed -n '2,/^set -u/p' "$me" | sed '$d; s/^# \{0,1\}//'
    exit "${1:-2}"
}
hosts=2 rph=1 rate=1gbit latency="" burst_arg="" finalize_fix=yes
while [ $# -gt 0 ]; do
    case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) rph=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    --burst) burst_arg=$2; shift 2 ;;
    --no-finalize-fix) finalize_fix=no; shift ;;
    -h | --help) usage 0 ;;
    --) shift; break ;;
    *) echo "cluster.sh: unknown option $1" >&2; usage ;;
    esac
done
[ $# -gt 0 ] || { echo "cluster.sh: no PROGRAM after --" >&2; usage; }
case $hosts$rph in *[!0-9]*) echo "cluster.sh: --hosts and --ranks-per-host take numbers" >&2; exit 2 ;; esac
[ "$hosts" -ge 1 ] && [ "$hosts" -le 16 ] || { echo "cluster.sh: --hosts 1..16" >&2; exit 2; }
case $burst_arg in
'') ;;
*[!0-9]*) echo "cluster.sh: --burst takes a count of bytes" >&2; exit 2 ;;
*) [ "$burst_arg" -ge 3028 ] || { echo "cluster.sh: --burst is at least 3028 bytes (two 1514-byte frames)" >&2; exit 2; } ;;
esac

skip() { echo "SKIP: cluster.sh: $*"; exit 77; }
for tool in ip tc "${MPIEXEC:-mpiexec}"; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool not found (apt-get install iproute2 mpich)"
done
prefix="ddph$$"
probe="$prefix-probe"
ip netns add "$probe" 2>/dev/null ||
    skip "cannot create network namespaces (needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN)"
ip netns del "$probe"

created=""
boot_ids=$(mktemp -d) || exit 1
cleanup() {
    rm -rf "$boot_ids"
    for ns in $created; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    created=""
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# The switch: a bridge in its own namespace.
sw="$prefix-sw"
ip netns add "$sw" && created="$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
shape() { # NS DEV
    [ "$rate" = unlimited ] && [ -z "$latency" ] && return 0
    if [ -n "$latency" ]; then
        if [ "$rate" = unlimited ]; then
            ip netns exec "$1" tc qdisc add dev "$2" root netem delay "${latency}ms" 2>/dev/null
        else
            ip netns exec "$1" tc qdisc add dev "$2" root netem delay "${latency}ms" rate "$rate" 2>/dev/null
        fi || skip "--latency needs tc netem, which this kernel lacks (tbf shapes the rate only)"
    else
        # burst: --burst, or what the link sends in 1 ms (at least 64
        # KiB), so a fast rate is not held back by the timer.
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" \
            burst "$burst" latency 100ms ||
            { echo "cluster.sh: tc refused rate '$rate'" >&2; exit 2; }
    fi
}
bits=$(printf '%s\n' "$rate" | awk '
    /^[0-9.]+[kK]bit$/ { print $1 * 1e3; next } /^[0-9.]+[mM]bit$/ { print $1 * 1e6; next }
    /^[0-9.]+[gG]bit$/ { print $1 * 1e9; next } /^[0-9.]+bit$/ { print $1 + 0; next }
    { print 0 }')
[ "$rate" = unlimited ] || [ "$bits" != 0 ] ||
    { echo "cluster.sh: --rate '$rate' is not like 100mbit, 1gbit or unlimited" >&2; exit 2; }
burst=$(awk -v b="$bits" 'BEGIN { x = b / 8 / 1000; if (x < 65536) x = 65536; printf "%d", x }')
[ -z "$burst_arg" ] || burst=$burst_arg

map=""
hostlist=""
for h in $(seq 0 $((hosts - 1))); do
    ns="$prefix-h$h"
    ip netns add "$ns" && created="$created $ns"
    cat /proc/sys/kernel/random/uuid > "$boot_ids/$ns"
    port="v$h-$$"
    ip link add "$port" type veth peer name eth0 netns "$ns"
    ip link set "$port" netns "$sw"
    ip -n "$sw" link set "$port" master br0 up
    addr="10.231.0.$((h + 1))"
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    shape "$ns" eth0
    shape "$sw" "$port"
    map="$map $addr=$ns"
    hostlist="$hostlist${hostlist:+,}$addr:$rph"
done
first="$prefix-h0"
echo "cluster.sh: $hosts hosts x $rph ranks, links shaped to $rate${latency:+, +${latency} ms}: $hostlist" >&2

# Ranks on one host share memory; between hosts, TCP over eth0.
export DDPH_CLUSTER_MAP="$map" DDPH_CLUSTER_PREFIX="$prefix" DDPH_CLUSTER_SCRIPT="$me"
export DDPH_CLUSTER_BOOT_IDS="$boot_ids"
export UCX_TLS="${DDPH_CLUSTER_UCX_TLS:-tcp,self,sm}" UCX_NET_DEVICES=eth0
if [ "$finalize_fix" = yes ]; then
    fix=${DDPH_CLUSTER_PRELOAD:-${DDPH_TEST_BUILDDIR:-$(dirname "$me")/../..}/preload/.libs/mpich-finalize.so}
    if [ -f "$fix" ]; then
        export LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD:}$(readlink -f "$fix")"
    else
        echo "cluster.sh: $fix not found (build the tree): MPI_Finalize may hang (docs/usage.md)" >&2
    fi
fi
set +e
# In the background, so that a signal to this script runs its trap at once
# (sh runs traps only between foreground commands, and mpiexec waits for
# every host, even one whose link is down).
# shellcheck disable=SC2086 # MPIEXEC_FLAGS is a list of flags
ip netns exec "$first" sh "$(dirname "$me")/launch.sh" --as "$first" \
    "${MPIEXEC:-mpiexec}" ${MPIEXEC_FLAGS:-} -launcher ssh -launcher-exec "$(dirname "$me")/launch.sh" \
    -localhost 10.231.0.1 -hosts "$hostlist" -n $((hosts * rph)) \
    "$@" &
child=$!
wait "$child"
rc=$?
exit $rc
