"""Package attributes imported on first use (PEP 562): for names whose modules pull in torch, megatron-core or
transformers, which users of a package's configs and errors do not need."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``modules[name]`` when ``name`` is first asked for."""

    def __getattr__(name: str) -> Any:
        if name in modules:
            return getattr(importlib.import_module(modules[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
