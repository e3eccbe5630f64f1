#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install fedsde with its dev extras.
# Usage: bash scripts/env.sh   (idempotent; re-installs only when pyproject.toml or constraints.txt change)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FEDSDE_VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.fedsde-installed"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "fedsde: installing into $VENV (log: $VENV/install.log)" >&2
  if ! "$VENV/bin/python" -m pip install -c constraints.txt -e ".[dev]" > "$VENV/install.log" 2>&1; then
    tail -n 40 "$VENV/install.log" >&2
    echo "fedsde: installation failed (full log: $VENV/install.log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
