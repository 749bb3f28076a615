"""Where in hosts.toml a problem is: pydantic's errors as lines naming the host/pool, the field and the line."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from launcher.config.config_errors import explain


def describe_errors(exc: ValidationError, raw: dict[str, Any], text: str, label: str, model: type[BaseModel]) -> str:
    """Turn pydantic errors on ``model`` into lines naming host/pool by name, the field, the line and the fix."""
    lines = [f"{label}: invalid configuration ({exc.error_count()} error(s))"]
    for err in exc.errors():
        loc = list(err["loc"])
        where, line = _where(loc, raw, text)
        msg = explain(dict(err), model)
        prefix = f"{label}:{line}" if line else label
        lines.append(f"  {prefix}: {where}: {msg}")
    return "\n".join(lines)


def _where(loc: list[Any], raw: dict[str, Any], text: str) -> tuple[str, int | None]:
    if not loc:
        return "(top level)", None
    table, rest = loc[0], loc[1:]
    if table in ("hosts", "pools") and rest and isinstance(rest[0], int):
        index, field_path = rest[0], [str(part) for part in rest[1:]]
        items = raw.get(table) or []
        entry = items[index] if index < len(items) and isinstance(items[index], dict) else {}
        key = "name" if table == "hosts" else "id"
        label = f"{table[:-1]} {entry.get(key)!r}" if entry.get(key) else f"{table}[{index}]"
        where = f"{label} field {'.'.join(field_path)!r}" if field_path else label
        return where, find_line(text, table, index, field_path)
    field = ".".join(str(part) for part in loc)
    return f"field {field!r}", find_line(text, str(table), None, [str(p) for p in rest])


def find_line(text: str, table: str, index: int | None, field_path: list[str]) -> int | None:
    """Best-effort line number of ``field`` inside the ``index``-th [[table]] (or [table]) block."""
    header = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]" if index is not None else rf"^\s*\[\s*{table}\s*\]")
    lines = text.splitlines()
    seen, start = -1, None
    for number, line in enumerate(lines):
        if header.match(line):
            seen += 1
            if index is None or seen == index:
                start = number
                break
    if start is None:
        return None
    key = next((part for part in field_path if not part.isdigit()), None)
    if key is None:
        return start + 1
    key_re = re.compile(rf"^\s*{re.escape(key)}\s*=|^\s*\[+\s*{re.escape(table)}\.{re.escape(key)}\b")
    for number in range(start + 1, len(lines)):
        if re.match(r"^\s*\[\[?\s*" + re.escape(table) + r"\s*\]\]?\s*$", lines[number]):
            break
        if key_re.match(lines[number]):
            return number + 1
    return start + 1
