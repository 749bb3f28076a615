#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] ruff"
ruff check .
echo "[test] pytest"
# Two workers (pytest-xdist): the suite mostly waits on processes, using about half of two cores when serial.
# A module's tests stay on one worker (tests/conftest.py), so module fixtures start once.
python -m pytest tests -q --durations=30 -n 2 --dist loadgroup "$@"
