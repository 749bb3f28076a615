#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] ruff"
ruff check .
echo "[test] pytest"
python -m pytest tests -q --durations=30 "$@"
