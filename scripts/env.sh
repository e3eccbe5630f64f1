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
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[dev]"
  echo "$want" > "$stamp"
fi
