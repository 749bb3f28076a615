#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the demo RL loop on hosts.example.toml (local host, CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec miles-launch hosts.example.toml "$@"
