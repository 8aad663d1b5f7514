# shellcheck shell=sh
# ranks.sh: sourced by the fault tests (tests/faults.sh,
# tests/cluster/check.sh) to tell whether a job's ranks have ended.  Each
# rank of tests/mpi/fault_trainer writes its pid to DIR/pid.RANK.

# Whether process $1 still runs.  A zombie has ended: its parent (the
# launcher's proxy) may be slow to reap it on a loaded machine.
alive() {
    kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ]
}

# ranks_gone DIR RANK...: true once every listed rank has written its pid
# and ended.
ranks_gone() {
    _dir=$1
    shift
    for _r in "$@"; do
        _pid=$(cat "$_dir/pid.$_r" 2>/dev/null) || return 1
        alive "$_pid" && return 1
    done
    return 0
}
