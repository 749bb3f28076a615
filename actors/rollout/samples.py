"""What the async rollout keeps per sample and per prompt group, and the buffer between producer and trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.rollout.staleness import StalenessBound, version_number


class DuplicateSample(RuntimeError):
    """A group (or sample) arrived twice: a bug in retry handling, never silently merged."""


@dataclass
class SampleRecord:
    """One sample: its tokens, the weight version of each (SGLang's ``meta_info.weight_versions`` spans), and how
    many requests it took."""

    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_versions: list[str] = field(default_factory=list)
    finish_reason: str = "unknown"
    requests: int = 0  # /generate requests sent for this sample (1 when nothing went wrong)
    resent: int = 0  # of which were sent again after a failure (a dead engine or router, a timeout, a 5xx)
    resumed: int = 0  # times a weight update aborted it (then resumed as a partial rollout, or started over)

    def extend(self, reply: dict[str, Any]) -> None:
        """Append one reply's tokens, logprobs and per-token versions."""
        meta = reply.get("meta_info", {})
        ids = [int(t) for t in reply.get("output_ids", [])]
        self.output_ids += ids
        self.logprobs += [float(entry[0]) for entry in meta.get("output_token_logprobs") or []][: len(ids)]
        self.token_versions += token_versions(meta, len(ids))
        self.finish_reason = str((meta.get("finish_reason") or {}).get("type", "unknown"))

    def oldest_version(self) -> int:
        return min(version_number(v) for v in self.token_versions) if self.token_versions else 0


def token_versions(meta: dict[str, Any], count: int) -> list[str]:
    """One version per output token: SGLang's spans when the reply has them, else its ``weight_version``."""
    spans = meta.get("weight_versions")
    if not spans:
        return [str(meta.get("weight_version"))] * count
    versions: list[str] = []
    for span in spans:
        versions += [str(span["version"])] * (int(span["end"]) - int(span["start"]))
    return (versions + versions[-1:] * count)[:count]


@dataclass
class GroupRecord:
    """One prompt's samples, scored."""

    group_id: int
    prompt_ids: list[int]
    samples: list[SampleRecord]
    rewards: list[float]

    def oldest_version(self) -> int:
        return min(sample.oldest_version() for sample in self.samples)


@dataclass
class SampleBuffer:
    """Finished groups waiting for the trainer, in arrival order; counts what it drops.

    It refuses a group it has seen (no sample is ever recorded twice) and hands the trainer whole groups within the
    staleness bound.
    """

    bound: StalenessBound
    groups: list[GroupRecord] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    dropped_stale_samples: int = 0
    max_staleness_seen: int = 0

    def put(self, group: GroupRecord) -> None:
        if group.group_id in self.seen:
            raise DuplicateSample(f"group {group.group_id} was recorded already; refusing it a second time")
        self.seen.add(group.group_id)
        self.groups.append(group)

    def take(self, count: int, current_version: int) -> list[GroupRecord] | None:
        """``count`` groups within the bound (dropping stale ones first; the first to arrive, in group order), or
        None if there are not enough yet."""
        fresh = []
        for group in self.groups:
            if self.bound.accepts(group.oldest_version(), current_version):
                fresh.append(group)
            else:
                self.dropped_stale_samples += len(group.samples)
        self.groups = fresh
        if len(fresh) < count:
            return None
        # a batch in group order, whatever order they finished in: the same groups make the same batch
        taken, self.groups = sorted(fresh[:count], key=lambda g: g.group_id), fresh[count:]
        for group in taken:
            self.max_staleness_seen = max(self.max_staleness_seen, current_version - group.oldest_version())
        return taken
