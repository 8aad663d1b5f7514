# shellcheck shell=sh
# ranks.sh: sourced by the fault tests (tests/faults.sh,
# tests/cluster/check.sh) to tell whether a job's ranks have ended.  Each
# rank of tests/mpi/fault_trainer writes its pid to DIR/pid.RANK.

# Whether process $1 still runs, from one reading of its state.  A zombie
# has ended: its parent (the launcher's proxy) may be slow to reap it on a
# loaded machine, and may reap it at any moment, so the state is read once
# (no separate kill -0 and ps, which raced).
alive() {
    case $(ps -o stat= -p "$1" 2>/dev/null) in
    "" | Z*) return 1 ;;
    esac
    return 0
}

# ranks_gone DIR RANK...: true once every listed rank has written its pid
# and ended.  A pid file that is not (yet) a number is a rank not yet
# started: "alive" would call an empty pid gone.
ranks_gone() {
    _dir=$1
    shift
    for _r in "$@"; do
        _pid=$(cat "$_dir/pid.$_r" 2>/dev/null) || return 1
        case $_pid in "" | *[!0-9]*) return 1 ;; esac
        alive "$_pid" && return 1
    done
    return 0
}
