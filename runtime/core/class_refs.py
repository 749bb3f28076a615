"""Actor classes named by reference: ``"package.module:Qualified.Name"``, or cloudpickled bytes (a script's class,
authenticated by the spawn ticket before it gets here)."""

from __future__ import annotations

import importlib
import os
from typing import Any

import cloudpickle


def resolve_class(class_ref: str | bytes) -> type:
    """A class from ``"package.module:Qualified.Name"`` or from cloudpickled bytes."""
    if isinstance(class_ref, bytes):
        return cloudpickle.loads(class_ref)
    module_name, _, qualname = class_ref.partition(":")
    if not qualname:
        raise ValueError(f"actor class {class_ref!r} must be given as 'package.module:ClassName'")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"cannot import module {module_name!r} for actor class {class_ref!r} in this process "
            f"(pid {os.getpid()}): {exc}; is the package installed / on PYTHONPATH on this host?"
        ) from exc
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ImportError(f"module {module_name!r} has no attribute {qualname!r} (actor class {class_ref!r})")
    if not isinstance(target, type):
        raise TypeError(f"actor class {class_ref!r} is not a class but {type(target).__name__}")
    return target
