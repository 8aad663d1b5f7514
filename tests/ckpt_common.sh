# ckpt_common.sh: sourced by tests/checkpoint_crash.sh and
# tests/checkpoint_guard.sh once OUT, W, KILL_SO and JOB_TIMEOUT are set:
# a fresh OUT, the PASS/FAIL counters, the job file $job (topk, error
# feedback; timeout_s = JOB_TIMEOUT) and what both use on state files.
rm -rf "$OUT"
mkdir -p "$OUT"
chmod 755 "$OUT"
OPENBLAS_NUM_THREADS=1
export OPENBLAS_NUM_THREADS
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 20 | sed 's/^/    /'; }
job="$OUT/topk.ini"
printf '[runtime]\nplugin_path = %s\ntimeout_s = %s\n[hook]\nname = topk\n[hook.topk]\nratio = 0.01\n' \
    "$DDPH_TEST_PLUGIN_DIR" "$JOB_TIMEOUT" > "$job"
# The hook state's bytes after the header (generation and save id differ
# between saves of one state) and before the checksum.
payload() { tail -c +37 "$1" | head -c -4 | cksum; }
# preload_on RANK SECONDS COMMAND...: $W ranks of COMMAND under mpiexec
# (at most SECONDS), tests/tools/kill_at preloaded on RANK alone (KILL_AT,
# KILL_MATCH and KILL_SIGNAL come from the environment).
preload_on() {
    victim=$1 limit=$2
    shift 2
    VICTIM=$victim KILL_SO=$KILL_SO timeout "$limit" "$MPIEXEC" -n $W sh -c \
        'if [ "$PMI_RANK" = "$VICTIM" ]; then LD_PRELOAD=$KILL_SO; export LD_PRELOAD; fi; exec "$0" "$@"' \
        "$@"
}
