# venv.sh: sourced by the benchmark drivers. ensure_bench_venv makes bench/.venv (gitignored) with
# the system python3 and installs the current torch and numpy from PyPI into it when missing.
# Sets VENV and PY; expects a log function.
ensure_bench_venv() {
  VENV=bench/.venv
  PY=$VENV/bin/python
  if [ ! -x "$PY" ]; then
    log "creating $VENV with $(command -v python3) ($(python3 --version 2>&1))"
    python3 -m venv "$VENV"
  fi
  if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    log "installing torch and numpy from PyPI into $VENV (large download)"
    "$PY" -m pip install --quiet torch numpy
  fi
}
