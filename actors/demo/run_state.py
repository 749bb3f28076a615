"""Where an async run can resume from: trainer checkpoints plus the loop's own position, one directory each.

A resumed run trains no prompt group twice: groups in flight or buffered at a checkpoint are generated again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actors.trainer.group import TrainerGroup

LATEST = "latest.json"


@dataclass(frozen=True)
class RunPoint:
    """What ``{checkpoint_dir}/latest.json`` says: the iteration, the weight version the engines got after it, the
    trainer's checkpoint (``path``) and the rollout's data position (the first prompt group not trained yet, and the
    later ones that were: ``skip_groups``)."""

    iteration: int
    weight_version: int
    next_group: int
    path: str
    skip_groups: tuple[int, ...] = ()


class RunCheckpoints:
    """Saves and finds RunPoints under ``directory``: ``iter-000004/`` holds the trainer's checkpoint (weights,
    optimizer state and step: the trainer's ``save_checkpoint``, actors/trainer/checkpoint.py); ``latest.json``,
    written last and atomically, names the newest."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def save(self, trainer: TrainerGroup, iteration: int, position: dict[str, Any], timeout_s: float) -> RunPoint:
        """``position``: the rollout's ``data_position()`` after this iteration's batch."""
        path = self.directory / f"iter-{iteration:06d}"
        trainer.broadcast("save_checkpoint", path=str(path), timeout_s=timeout_s)
        point = RunPoint(iteration, iteration, int(position["next_group"]), str(path),
                         tuple(int(g) for g in position["skip_groups"]))  # fmt: skip
        temporary = self.directory / f".{LATEST}.tmp"
        temporary.write_text(json.dumps(asdict(point)))
        os.replace(temporary, self.directory / LATEST)
        return point

    def latest(self) -> RunPoint | None:
        try:
            data = json.loads((self.directory / LATEST).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ValueError(f"job.args.checkpoint_dir: {self.directory / LATEST} is unreadable: {exc}") from exc
        skip = tuple(int(g) for g in data.get("skip_groups", []))
        return RunPoint(int(data["iteration"]), int(data["weight_version"]), int(data["next_group"]), str(data["path"]),
                        skip)  # fmt: skip

    def restore(self, trainer: TrainerGroup, timeout_s: float) -> tuple[RunPoint, int]:
        """Load the latest checkpoint into every rank (optimizer state and step included); (point, trainer step)."""
        point = self.latest()
        if point is None:
            raise ValueError(f"job.args.resume = true, but {self.directory} holds no checkpoint ({LATEST})")
        steps = trainer.broadcast("load_checkpoint", path=point.path, timeout_s=timeout_s)
        return point, int(steps[0])
