#!/bin/sh
# launch.sh: what tests/cluster/cluster.sh gives hydra in place of ssh.
# Hydra runs it as `launch.sh [-x] HOST COMMAND...`; it starts COMMAND (a
# hydra proxy) in the network namespace of HOST, from DDPH_CLUSTER_MAP
# ("ADDRESS=NAMESPACE ...").
[ "${1:-}" = "-x" ] && shift
host=$1
shift
ns=$(printf '%s\n' $DDPH_CLUSTER_MAP | sed -n "s/^$host=//p")
if [ -z "$ns" ]; then
    echo "launch.sh: $host is not a host of this cluster ($DDPH_CLUSTER_MAP)" >&2
    exit 1
fi
exec ip netns exec "$ns" sh -c "$*"
