"""Which weight version produced each output token, as SGLang 0.5.23 records it (``srt/utils/weight_versions.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VersionEvent:
    """SGLang's ``WeightVersionEvent``: ``old_version`` produced the first ``num_output_tokens`` tokens.

    When the version changes (``/update_weight_version`` or an update with ``weight_version``), every live request
    that has output gets one (the scheduler's ``record_weight_version_change``, ``WeightSync.record_version_change``).
    """

    old_version: str
    num_output_tokens: int


def version_spans(events: list[VersionEvent], current_version: str, num_output_tokens: int) -> list[dict[str, object]]:
    """``compute_weight_version_spans`` then ``add_weight_versions_to_meta_info``'s visible spans: a finished
    request's ``meta_info.weight_versions = [{"version", "start", "end"}, ...]``, its ``weight_version`` the last
    span's version."""
    changes = [(event.old_version, event.num_output_tokens) for event in events]
    changes.append((current_version, num_output_tokens))
    spans: list[dict[str, object]] = []
    for version, end in changes:
        end = min(end, num_output_tokens)
        if spans and end <= int(spans[-1]["end"]):  # type: ignore[call-overload]
            continue
        if spans and version == spans[-1]["version"]:
            spans[-1]["end"] = end
            continue
        start = int(spans[-1]["end"]) if spans else 0  # type: ignore[call-overload]
        spans.append({"version": version, "start": start, "end": end})
    return [span for span in spans if int(span["start"]) < num_output_tokens or span["start"] == 0]  # type: ignore[call-overload]
