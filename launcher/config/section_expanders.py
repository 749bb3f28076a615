"""Section expanders: a package turns a top-level table of hosts.toml it owns into pools and settings at plan time,
so the launcher knows nothing of what a section means (the result is plain pools and hosts, which ``--dry-run`` shows).
"""

from __future__ import annotations

import copy
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from launcher.errors import ConfigError

ENTRY_POINT_GROUP = "miles.sections"


def expand_sections(data: dict[str, Any], *, base: Path, label: str) -> dict[str, Any]:
    """``data`` with every registered section expanded; ConfigError naming the section.

    A package registers a function in the entry-point group ``miles.sections``; the entry point's name is the
    table's name (e.g. ``dashboard``), its value ``pkg.module:function``. When hosts.toml has that table, the
    function is called as ``function(table, data, base)`` (the table, hosts.toml's other tables, the file's
    directory) and expansion continues with the tables it returns, without that section. A table no package
    registered is left for validation to refuse."""
    points = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
    for name in [key for key in data if key in points]:
        point = points[name]
        table = data[name]
        rest = {key: value for key, value in data.items() if key != name}
        which = f"section expander {point.value} (entry point {name!r} of group {ENTRY_POINT_GROUP!r})"
        if not isinstance(table, dict):
            raise ConfigError(f"{label}: [{name}] must be a table, got {type(table).__name__}")
        try:
            data = point.load()(copy.deepcopy(table), copy.deepcopy(rest), base)
        except Exception as exc:
            kind = "" if isinstance(exc, ValueError) else f"{type(exc).__name__}: "
            raise ConfigError(
                f"{label}: [{name}]: {kind}{exc}\n(raised by the {which}; fix [{name}] in {label})"
            ) from None
        if not isinstance(data, dict) or name in data:
            raise ConfigError(f"{label}: the {which} returned no hosts.toml tables without [{name}]")
    return data
