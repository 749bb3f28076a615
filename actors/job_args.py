"""A job's ``[job.args]`` table read into its settings dataclass, an unknown key refused by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

S = TypeVar("S")


def job_settings(settings_type: type[S], args: Mapping[str, Any], what: str = "settings") -> S:
    """``settings_type(**args)``; a key the dataclass does not declare raises ValueError naming it and the known
    ones (a typo in hosts.toml must not pass silently as a default)."""
    known = {field.name for field in dataclasses.fields(settings_type)}  # type: ignore[arg-type]
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"job.args: unknown {what} {unknown}; known: {sorted(known)}")
    return settings_type(**args)
