#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for the demo and the tests: system packages, a virtualenv in .venv,
# the CPU build of torch (a plain `pip install torch` would pull a multi-GB CUDA build), and this package.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(openssh-server openssh-client iproute2 prometheus procps chromium slurm-wlm munge)
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
echo "[setup] installing miles-actors with test extras (train + inference: megatron-core, transformers, tokenizers, safetensors)"
python -m pip install -q -e ".[test]"
if ! python -m pip show -q verl >/dev/null 2>&1; then
  # verl's single controller runs on runtime.ray_compat in tests/ray_clients; its own requirements pull in real Ray
  # (ray[default]) and a GPU stack, so it comes without them (the test extra `verl` holds what it does need).
  # (`import verl` itself fails here: it imports ray, which only the tests alias to runtime.ray_compat.)
  echo "[setup] installing verl 0.9.1 without its dependencies (tests/ray_clients)"
  python -m pip install -q --no-deps "verl==0.9.1"
fi
# verl's wheel also installs its own test suite as a top-level package named `tests`, which would shadow ours
# (`from tests.actors.conftest import ...` then fails at collection): remove that package when verl owns it.
python - <<'PY'
import pathlib, shutil, site
for root in map(pathlib.Path, site.getsitepackages()):
    record = next(root.glob("verl-*.dist-info/RECORD"), None)
    if record and (root / "tests").is_dir() and "tests/__init__.py," in record.read_text():
        shutil.rmtree(root / "tests")
        print(f"[setup] removed verl's stray top-level 'tests' package from {root}")
PY
SGLANG_SOURCE=.venv/peers/sglang-0.5.23
if [ ! -f "$SGLANG_SOURCE/sglang/srt/utils/weight_versions.py" ]; then
  # The conformance tests read SGLang's own source (request models, init_custom_process_group); SGLang itself
  # needs a GPU, so only its wheel is downloaded and the files the tests read are unpacked.
  echo "[setup] unpacking SGLang 0.5.23's source for tests/actors/test_sglang_conformance.py"
  rm -rf .venv/peers/wheel && mkdir -p .venv/peers/wheel
  python -m pip download -q --no-deps "sglang==0.5.23" -d .venv/peers/wheel
  python - "$SGLANG_SOURCE" .venv/peers/wheel/sglang-0.5.23-*.whl <<'PY'
import sys, zipfile
target, wheel = sys.argv[1], sys.argv[2]
wanted = ("sglang/srt/utils/common.py", "sglang/srt/managers/io_struct.py", "sglang/srt/sampling/sampling_params.py",
          "sglang/srt/utils/weight_versions.py")
with zipfile.ZipFile(wheel) as archive:
    for name in wanted:
        archive.extract(name, target)
PY
  rm -rf .venv/peers/wheel
fi
echo "[setup] done: $(python -c 'import torch, zmq, transformers, megatron.core as mc; print("torch", torch.__version__, "pyzmq", zmq.__version__, "transformers", transformers.__version__, "megatron-core", mc.__version__)' 2>/dev/null)"
