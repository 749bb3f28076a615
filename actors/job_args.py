"""A job's ``[job.args]`` table read into its settings dataclass, an unknown key refused by name."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

S = TypeVar("S")
R = TypeVar("R")


def job_settings(settings_type: type[S], args: Mapping[str, Any], what: str = "settings") -> S:
    """``settings_type(**args)``; a key the dataclass does not declare raises ValueError naming it and the known
    ones (a typo in hosts.toml must not pass silently as a default)."""
    known = {field.name for field in dataclasses.fields(settings_type)}  # type: ignore[arg-type]
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"job.args: unknown {what} {unknown}; known: {sorted(known)}")
    return settings_type(**args)


def takes_settings(
    settings_type: type[S], what: str = "settings", *, check: Callable[[S, Mapping[str, Any]], None] | None = None
) -> Callable[[Callable[[Any, S], R]], Callable[[Any], R]]:
    """Decorate a job entrypoint ``main(ctx, settings)``: it is called as ``main(ctx)`` with ``[job.args]`` read into
    ``settings_type``, and miles-launch runs the same check (the entrypoint's ``check_args(args, pools)``) before it
    starts anything, so a typo fails at once rather than once every pool is up. ``check(settings, pools)``: more
    of the job's own checks then, over the serve pools' kwargs in hosts.toml (pool id -> kwargs)."""

    def check_args(args: Mapping[str, Any], pools: Mapping[str, Mapping[str, Any]]) -> None:
        settings = job_settings(settings_type, args, what)
        if check is not None:
            check(settings, pools)

    def mark(entrypoint: Callable[[Any, S], R]) -> Callable[[Any], R]:
        @functools.wraps(entrypoint)
        def main(ctx: Any) -> R:
            return entrypoint(ctx, job_settings(settings_type, ctx.args, what))

        main.check_args = check_args  # type: ignore[attr-defined]
        return main

    return mark
