# torch_python.sh, sourced by the PyTorch tests: PY is a Python 3 with
# torch ($PYTHON, else Debian's /usr/bin/python3), or the test skips (77).
PY=
for p in "${PYTHON:-}" /usr/bin/python3; do
    if [ -n "$p" ] && "$p" -c 'import torch.distributed' 2>/dev/null; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no Python 3 with torch (${PYTHON:-python3}, /usr/bin/python3; apt-get install python3-torch)"
    exit 77
fi
