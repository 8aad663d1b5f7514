#!/bin/sh
# launch.sh: what tests/cluster/cluster.sh gives hydra in place of ssh.
# Hydra runs it as `launch.sh [-x] HOST COMMAND...`; it starts COMMAND (a
# hydra proxy) in the network namespace of HOST, from DDPH_CLUSTER_MAP
# ("ADDRESS=NAMESPACE ..."), with that host's own boot id (below).
# cluster.sh runs it as `launch.sh --as NAMESPACE COMMAND ARGS...` inside
# the first host's namespace, for mpiexec (whose local proxy it forks).
#
# The boot id: UCX takes processes that read the same
# /proc/sys/kernel/random/boot_id for one machine, and would join them by
# shared memory.  `ip netns exec` gives each command a mount namespace of
# its own, where the host's file from DDPH_CLUSTER_BOOT_IDS is mounted
# over it.
set -u
own_boot_id() {
    mount --bind "$DDPH_CLUSTER_BOOT_IDS/$1" /proc/sys/kernel/random/boot_id || {
        echo "launch.sh: cannot give $1 a boot id of its own" >&2
        exit 1
    }
}
if [ "${1:-}" = "--as" ]; then
    own_boot_id "$2"
    shift 2
    exec "$@"
fi
[ "${1:-}" = "-x" ] && shift
host=$1
shift
ns=$(printf '%s\n' $DDPH_CLUSTER_MAP | sed -n "s/^$host=//p")
if [ -z "$ns" ]; then
    echo "launch.sh: $host is not a host of this cluster ($DDPH_CLUSTER_MAP)" >&2
    exit 1
fi
exec ip netns exec "$ns" sh -c "mount --bind '$DDPH_CLUSTER_BOOT_IDS/$ns' /proc/sys/kernel/random/boot_id && exec $*"
