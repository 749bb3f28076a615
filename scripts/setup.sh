#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for the demo and the tests: system packages, a virtualenv in .venv,
# the CPU build of torch (a plain `pip install torch` would pull a multi-GB CUDA build), and this package.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(openssh-server openssh-client iproute2 prometheus procps)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch 2.13.0 (CPU build)"
  python -m pip install -q "torch==2.13.0"
fi
echo "[setup] installing miles-actors with test extras"
python -m pip install -q -e ".[test]"
echo "[setup] done: $(python -c 'import torch, zmq; print("torch", torch.__version__, "pyzmq", zmq.__version__)')"
