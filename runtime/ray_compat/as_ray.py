"""``import ray`` resolving to ``runtime.ray_compat``, opt-in (:func:`install_as_ray`), for Ray code kept unchanged;
never implicit, since a real Ray installed beside it must stay reachable in other programs."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import runtime.ray_compat as package

#: The directory of the ``ray`` package that installs this in a process that starts with it on ``PYTHONPATH``.
SHIM_DIR = str(Path(__file__).with_name("shim"))
#: Ray module names that are other packages' modules (Ray vendors cloudpickle).
_OTHER = {"ray.cloudpickle": "cloudpickle"}


class _Refuse(importlib.abc.MetaPathFinder):
    """A ``ray.*`` module that runtime.ray_compat does not provide: an ImportError saying so, not a half-import
    of a real Ray that may be installed beside it."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "ray" or fullname.startswith("ray."):
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: runtime.ray_compat, installed as `ray` (install_as_ray), does not "
                f"provide it; README 'Coming from Ray' lists what there is",
                name=fullname,
            )
        return None


def _modules() -> dict[str, ModuleType]:
    found = {"ray": package}
    for info in pkgutil.walk_packages(package.__path__, prefix="runtime.ray_compat."):
        if ".shim" in info.name or info.name.endswith(".as_ray"):
            continue
        module = importlib.import_module(info.name)
        found["ray" + info.name.removeprefix("runtime.ray_compat")] = module
    for name, target in _OTHER.items():
        found[name] = importlib.import_module(target)
    return found


def install_as_ray() -> ModuleType:
    """Make ``import ray`` (and its submodules) this package, here and in the processes this one starts.

    Every module of this package is registered under the Ray name that mirrors its path
    (``runtime.ray_compat.util.placement_group`` is ``ray.util.placement_group``: the same module object, so classes
    are shared, never loaded twice), and a finder answers any other ``ray.*`` import with an error naming what
    exists. Actor and task processes import the user's modules too, which ``import ray``: the directory holding a
    ``ray`` package that installs it (:data:`SHIM_DIR`) goes first on ``PYTHONPATH``, which they inherit.

    Raises RuntimeError when another ``ray`` is already imported in this process (the two would mix)."""
    current = sys.modules.get("ray")
    if current is not None and current is not package and getattr(current, "__file__", None) != _shim_file():
        raise RuntimeError(
            f"install_as_ray(): a real `ray` is already imported here ({getattr(current, '__file__', current)}); "
            "call install_as_ray() before anything imports ray, or run without Ray installed"
        )
    sys.modules.update(_modules())
    if not any(isinstance(finder, _Refuse) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Refuse())
    if SHIM_DIR not in sys.path:  # spawned processes start with this process's sys.path (runtime.processes.driver_fork)
        sys.path.insert(0, SHIM_DIR)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if SHIM_DIR not in paths:  # and processes started otherwise (subprocess) with its environment
        os.environ["PYTHONPATH"] = os.pathsep.join([SHIM_DIR, *(p for p in paths if p)])
    return package


def _shim_file() -> str:
    return str(Path(SHIM_DIR, "ray", "__init__.py"))


if __name__ == "__main__":  # `PYTHONPATH=$(python -m runtime.ray_compat.as_ray)`: processes started by hand
    print(SHIM_DIR)
