"""A tiny TOML writer for test configs (tables, arrays of tables, inline values)."""

from __future__ import annotations

import json
from typing import Any


def value(v: Any) -> str:
    """One TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def dump(data: dict[str, Any]) -> str:
    """``{"launcher": {...}, "hosts": [{...}], "job": {...}, "pools": [{...}]}`` -> TOML text."""
    out: list[str] = []
    for key, body in data.items():
        if isinstance(body, list):
            for item in body:
                out.append(f"[[{key}]]")
                out += [f"{k} = {value(v)}" for k, v in item.items()]
                out.append("")
        else:
            out.append(f"[{key}]")
            out += [f"{k} = {value(v)}" for k, v in body.items()]
            out.append("")
    return "\n".join(out)
