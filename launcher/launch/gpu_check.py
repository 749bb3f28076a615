"""GPU ids checked on each host before any worker starts, so ``gpus = [7]`` on a machine without that GPU is refused
naming the host and its ids, instead of failing later inside torch or NCCL, far from the cause."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_NVIDIA_SMI_TIMEOUT_S = 15.0


def detect_gpus(proc_gpus: Path = PROC_GPUS) -> dict[str, Any]:
    """What this machine has: ``{"count": N, "source": how it was found, "names": nvidia-smi's lines}``.

    The host agent reports it in its hello: ``nvidia-smi -L``, else the entries of ``/proc/driver/nvidia/gpus``.
    The agent's own ``CUDA_VISIBLE_DEVICES`` (a Slurm step's, or the user's) is checked by the agent pool."""
    nvidia_smi = shutil.which("nvidia-smi")
    problem = ""
    if nvidia_smi is not None:
        try:
            done = subprocess.run(
                [nvidia_smi, "-L"], capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problem = f"`nvidia-smi -L` failed: {exc}"
        else:
            if done.returncode == 0:
                names = [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]
                return {"count": len(names), "source": f"`{nvidia_smi} -L`", "names": names[:64]}
            problem = f"`nvidia-smi -L` exited {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}"
    try:
        entries = sorted(p.name for p in proc_gpus.iterdir())
    except OSError:
        entries = None
    if entries is not None:
        return {"count": len(entries), "source": str(proc_gpus), "names": entries[:64]}
    none = problem or "no nvidia-smi on PATH"
    return {"count": 0, "source": f"{none}, no {proc_gpus}", "names": []}


def gpu_problem(host: str, planned: list[int], seen: dict[str, Any] | None) -> str | None:
    """Why the plan's GPU ids ``planned`` cannot run on ``host`` (which reported ``seen``); None when they can
    (or the host's agent did not report its GPUs). ``--no-gpu-check`` (``[launcher] gpu_check = false``) skips
    this: GPU ids that are only labels on a CPU machine (tests, dry runs of a GPU cluster's file on a laptop)."""
    if not planned or not isinstance(seen, dict) or not isinstance(seen.get("count"), int):
        return None
    count, source = seen["count"], seen.get("source", "?")
    missing = [g for g in planned if g >= count]
    if not missing:
        return None
    has = "no GPU" if count == 0 else f"{count} GPU(s), ids 0-{count - 1}"
    return (
        f"host {host!r} has {has} ({source}) but the plan gives its workers GPU ids {planned} ({missing} not "
        f"there). Fix: set that host's `gpus` in hosts.toml to the GPUs it has (a count, or a list of ids "
        "below the count), or run the launch where the GPUs are; `--no-gpu-check` (or [launcher] gpu_check = "
        "false) skips this check when the ids are only labels (a CPU machine)"
    )
