#!/bin/sh
# soak.sh: runs PROGRAM (default: a trivial MPI program, init, barrier,
# finalize) RUNS times on each layout of tests/cluster/cluster.sh (2 hosts
# x 1 rank, 2 hosts x 2 ranks), each run under a time limit, and counts
# the runs that hung or failed, and those that ddph_close's MPI_Finalize
# watchdog ended (a ddphook program whose MPI_Finalize did not return; it
# exits 0 and says so).  Not part of make check (about 15 minutes a
# layout at 200 runs):
#
#   sudo sh tests/cluster/soak.sh [--runs N] [--rate RATE] [--limit S]
#       [--layouts "1 2"] [--no-finalize-fix] [-- PROGRAM ARGS...]
#
# RATE as in cluster.sh (default 1gbit); S seconds per run (default 30);
# --layouts the ranks per host to run (default "1 2"); --no-finalize-fix
# runs without preload/mpich-finalize.so (cluster.sh), to see MPICH 4.0's
# finalize hang.
# DDPH_CLUSTER_UCX_TLS sets the transports (cluster.sh).
# Exits 0 when no run hung or failed, 1 otherwise, 77 without root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
runs=200 rate=1gbit limit=30 layouts="1 2" fix=""
while [ $# -gt 0 ]; do
    case $1 in
    --layouts) layouts=$2; shift 2 ;;
    --no-finalize-fix) fix=--no-finalize-fix; shift ;;
    --) shift; break ;;
    --runs) runs=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
command -v mpicc >/dev/null || { echo "SKIP: soak.sh: mpicc not found"; exit 77; }
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
cat > "$work/trivial.c" <<'PROG'
#include <mpi.h>
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
PROG
mpicc -o "$work/trivial" "$work/trivial.c" || exit 1
chmod 755 "$work" "$work/trivial"
[ $# -gt 0 ] || set -- "$work/trivial"
status=0
for rph in $layouts; do
    hung=0 failed=0 watchdog=0
    i=0
    while [ $i -lt "$runs" ]; do
        i=$((i + 1))
        timeout -s TERM "$limit" sh "$here/cluster.sh" --hosts 2 \
            --ranks-per-host $rph --rate "$rate" $fix -- "$@" \
            > "$work/run.log" 2>&1
        rc=$?
        grep -q "MPI_Finalize did not return" "$work/run.log" &&
            watchdog=$((watchdog + 1))
        case $rc in
        0) ;;
        77) cat "$work/run.log"; exit 77 ;;
        124) hung=$((hung + 1)); echo "run $i (2 x $rph): hung, killed after $limit s" ;;
        *) failed=$((failed + 1)); echo "run $i (2 x $rph): exit $rc"; tail -n 5 "$work/run.log" ;;
        esac
    done
    echo "2 hosts x $rph ranks, $rate, UCX_TLS=${DDPH_CLUSTER_UCX_TLS:-tcp,self,sm}, finalize fix ${fix:+not }preloaded, $(basename "$1"): $runs runs, $hung hung, $failed failed, $watchdog ended by ddph_close's MPI_Finalize watchdog"
    [ $((hung + failed)) -eq 0 ] || status=1
done
exit $status
