# gpu/device-env.sh: what every device script sets up first, sourced (never run) after it has set
# ROOT: into the repository root, $OUT made and absolute, PYTHON (the venv's, else python3),
# unbuffered Python, and ALPHAC_PTXAS where CUDA's ptxas is off the PATH. Returns 1 when the
# root or $OUT cannot be entered.
cd "$ROOT" || return 1
mkdir -p "$OUT" || return 1
OUT="$(cd "$OUT" && pwd)"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1
if [ -z "${ALPHAC_PTXAS:-}" ] && ! command -v ptxas >/dev/null && [ -x /usr/local/cuda/bin/ptxas ]; then
    export ALPHAC_PTXAS=/usr/local/cuda/bin/ptxas          # CUDA's toolkit, off the PATH
fi
