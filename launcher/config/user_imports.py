"""Import the user's objects named in hosts.toml (``module:attr``), with errors that say where and how to fix."""

from __future__ import annotations

import difflib
import importlib
import sys
import traceback
from types import ModuleType
from typing import Any

from launcher.errors import ConfigError


class MissingDependency(ConfigError):
    """The user's module imports a package this machine lacks (it may be installed on the hosts only)."""


def import_object(path: str, *, field: str) -> Any:
    """``module:attr`` (``attr`` may be dotted); ConfigError naming ``field``, MissingDependency when the module
    itself exists but imports a package that is not installed here.

    A module not found says where it was looked for (the job's working dir first: ``[job] working_dir`` and
    ``py_modules``); a module that raises while imported shows the user's own frames (file and line), not the
    launcher's or importlib's, as a configuration error rather than a launcher crash."""
    module_name, _, attr = path.partition(":")
    module = import_module(module_name, path=path, field=field)
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            names = [n for n in dir(value) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{field} {path!r}: {module_name} ({_file(module)}) has no {part!r}{hint}")
        value = getattr(value, part)
    return value


def import_module(module_name: str, *, path: str, field: str) -> ModuleType:
    """Import ``module_name`` for ``field``; see :func:`import_object`."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"{field} {path!r}: cannot import {module_name!r}: {exc} (looked in {_where()}); put it in "
                "[job] working_dir (default: the directory of hosts.toml) or list its package in [job] py_modules"
            ) from None
        raise MissingDependency(
            f"{field} {path!r}: importing {module_name} needs {missing!r}, which is not installed for "
            f"{sys.executable}:\n{user_frames(exc)}"
        ) from None
    except Exception as exc:
        raise ConfigError(
            f"{field} {path!r}: importing {module_name} raised {type(exc).__name__}: {exc}\n{user_frames(exc)}"
        ) from None


def user_frames(exc: BaseException, limit: int = 6) -> str:
    """The traceback of ``exc`` without importlib's and this module's frames (the user's code), indented."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen") and frame.filename not in (__file__, importlib.__file__)
    ][-limit:]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "\n".join("    " + line for chunk in lines for line in chunk.rstrip().splitlines())


def _where() -> str:
    paths = [p for p in sys.path if p and "site-packages" not in p and "/lib/python" not in p]
    return ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "") + " and site-packages"


def _file(module: ModuleType) -> str:
    return getattr(module, "__file__", None) or "built-in"
