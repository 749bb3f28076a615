"""Pydantic's errors about hosts.toml with their fix: the closest known key for an unknown one, an example for a
missing table, the providers for an unknown one."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel

MISSING_TABLES = {
    "job": "no [job] table: what runs once every pool is ready; e.g. for a myjob.py beside hosts.toml with "
    '`def main(ctx): ...`, add:\n      [job]\n      entrypoint = "myjob:main"',
    "hosts": 'no [[hosts]]: list at least one machine; e.g.:\n      [[hosts]]\n      name = "local"\n'
    '      address = "localhost"\n      provider = "local"\n      workdir = "runs/local"',
}


PROVIDER_FIX = (
    'set provider = "ssh" (the default: reached over SSH with `ssh = {user, port, key_file}`) or "local" (this '
    'machine, address "localhost"); for the nodes of a Slurm allocation list no [[hosts]] and set [cluster] '
    'provider = "slurm"'
)


def explain(error: dict[str, Any], root: type[BaseModel]) -> str:
    """The message of one pydantic error on ``root`` (hosts.toml's model), with its fix where one is known."""
    loc, kind = list(error["loc"]), error["type"]
    message = error["msg"].removeprefix("Value error, ")
    if kind == "missing" and len(loc) == 1 and loc[0] in MISSING_TABLES:
        return MISSING_TABLES[str(loc[0])]
    if kind == "literal_error" and loc[:1] == ["hosts"] and loc[-1] == "provider":
        return f"unknown provider {error.get('input')!r}; {PROVIDER_FIX}"
    if kind == "extra_forbidden" and loc and isinstance(loc[-1], str):
        known = known_keys(root, loc[:-1])
        close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        return f"unknown key {loc[-1]!r}; {hint}"
    return message


def known_keys(root: type[BaseModel], loc: list[Any]) -> list[str]:
    """The keys of the table at ``loc`` (a pydantic location: field names, list indices, union tags)."""
    models: list[type[BaseModel]] = [root]
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list of tables: the same models
        inner = [m for model in models if part in model.model_fields
                 for m in _models(model.model_fields[part].annotation)]  # fmt: skip
        tagged = [m for m in models if getattr(m.model_fields.get("kind"), "default", None) == part]
        models = inner or tagged or models
    return sorted({key for model in models for key in model.model_fields if key != "source"})


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models in a field's annotation (through Optional, unions, tuples, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models(arg)]
