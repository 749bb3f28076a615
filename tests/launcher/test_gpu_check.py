"""GPU ids are checked on each host before any worker starts (issue 42: ``gpus = [7]`` on a machine without that
GPU planned, started and handed the worker ``CUDA_VISIBLE_DEVICES=7``): a host with no GPU, and a host whose
``nvidia-smi -L`` (a fake one on the agent's PATH, printing what NVIDIA's tool prints) lists two GPUs, refuse ids
they do not have, naming the host and its ids; ``--no-gpu-check`` skips the check.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import toml_text
from launch_helpers import PYTHON, local_host, subprocess_env

from launcher.config.hosts_config import parse_config
from launcher.errors import HostCheckError
from launcher.launch.gpu_check import detect_gpus, gpu_problem
from launcher.launch.worker_provider import WorkerProvider

pytestmark = pytest.mark.processes

COUNTER = {"kind": "serve", "actor_class": "launch_actors:Counter", "gpus": 1}
# `nvidia-smi -L` on a two-GPU machine (its format: "GPU <index>: <name> (UUID: GPU-...)").
FAKE_NVIDIA_SMI = """#!/bin/sh
[ "$1" = "-L" ] || exit 9
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2b7a6c1e-0000-0000-0000-000000000000)"
echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2b7a6c1e-0000-0000-0000-000000000001)"
"""


def fake_gpu_path(tmp_path: Path) -> str:
    """A PATH whose first directory holds the fake nvidia-smi."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(FAKE_NVIDIA_SMI)
    tool.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def no_gpu_path(tmp_path: Path) -> str:
    """A PATH with no nvidia-smi on it (this machine has none either: checked)."""
    assert not Path(PROC := "/proc/driver/nvidia/gpus").exists(), f"{PROC}: this test needs a machine without GPU"
    return ":".join(d for d in os.environ["PATH"].split(":") if not (Path(d) / "nvidia-smi").exists())


def write_config(tmp_path: Path, gpus: Any, path_env: str, **launcher: Any) -> Path:
    host = local_host("n0", tmp_path / "n0", gpus=gpus)
    host["env"] = {**host["env"], "PATH": path_env}
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2, **launcher},
        "hosts": [host],
        "job": {"entrypoint": "launch_jobs:exit_code"},
        "pools": [{"id": "c", "worker": COUNTER}],
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return path


def test_detect_gpus_reads_nvidia_smi_then_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", fake_gpu_path(tmp_path))
    seen = detect_gpus()
    assert seen["count"] == 2 and seen["source"].endswith("nvidia-smi -L`") and seen["names"][1].startswith("GPU 1:")
    monkeypatch.setenv("PATH", no_gpu_path(tmp_path))
    proc = tmp_path / "proc-gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"):
        (proc / bus).mkdir(parents=True)
    assert detect_gpus(proc) == {"count": 3, "source": str(proc), "names": ["0000:17:00.0", "0000:65:00.0",
                                                                            "0000:ca:00.0"]}  # fmt: skip
    assert detect_gpus(tmp_path / "absent")["count"] == 0
    assert gpu_problem("n0", [0, 2], {"count": 3, "source": "x"}) is None
    assert gpu_problem("n0", [], {"count": 0, "source": "x"}) is None  # CPU workers only
    assert "ids 0-2" in str(gpu_problem("n0", [3], {"count": 3, "source": "x"}))


def test_a_host_without_gpu_refuses_gpu_ids_before_any_worker_starts(tmp_path: Path) -> None:
    path = write_config(tmp_path, [7], no_gpu_path(tmp_path))
    with WorkerProvider(parse_config(path.read_text(), source=path)) as provider:
        with pytest.raises(HostCheckError) as info:
            provider.start_all(deadline_s=60)
        assert provider.worker_infos() == []
    message = str(info.value)
    assert "host 'n0' has no GPU (no nvidia-smi on PATH, no /proc/driver/nvidia/gpus)" in message, message
    assert "GPU ids [7]" in message and "--no-gpu-check" in message


def test_fake_nvidia_smi_two_gpus_and_the_cli_flag(tmp_path: Path) -> None:
    path = write_config(tmp_path, [7], fake_gpu_path(tmp_path))
    refused = subprocess.run([PYTHON, "-m", "launcher.console.cli", str(path)], capture_output=True, text=True,
                             timeout=120, env=subprocess_env())  # fmt: skip
    assert refused.returncode == 1, refused.stderr
    assert "host 'n0' has 2 GPU(s), ids 0-1 (`" in refused.stderr and "GPU ids [7] ([7] not there)" in refused.stderr
    assert "spawned" not in refused.stderr  # refused before any worker started
    skipped = subprocess.run([PYTHON, "-m", "launcher.console.cli", str(path), "--no-gpu-check"], capture_output=True,
                             text=True, timeout=120, env=subprocess_env())  # fmt: skip
    assert skipped.returncode == 0, skipped.stderr
    there = write_config(tmp_path, [1], fake_gpu_path(tmp_path))  # a GPU the fake tool lists
    accepted = subprocess.run([PYTHON, "-m", "launcher.console.cli", str(there)], capture_output=True, text=True,
                              timeout=120, env=subprocess_env())  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
