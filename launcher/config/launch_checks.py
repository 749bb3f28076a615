"""Checks before anything starts (``--dry-run`` and every launch): the job's code, its entrypoint, every actor class,
so a typo or a wrong constructor argument fails before any host is touched."""

from __future__ import annotations

import difflib
import inspect
import re
import time
import typing
from dataclasses import dataclass, field
from typing import Any

import pydantic

from launcher.config.hosts_config import ClusterConfig
from launcher.config.specs import PoolSpec, ServeWorkerSpec
from launcher.config.user_imports import MissingDependency, import_object
from launcher.errors import ConfigError
from launcher.launch.code_package import CodePackage, code_packages
from launcher.launch.code_package import describe as describe_code
from launcher.launch.job import check_job_args, resolve_entrypoint, use_job_code
from runtime import ActorDefinitionError
from runtime.internals import check_keyword_only_constructor, deep_check, hint_name, matches, short

Source = tuple[str, str]  # (hosts.toml's name, its text)


@dataclass
class LaunchCheck:
    """What the checks found: the code packages (listed, not zipped), warnings, and how long the imports took."""

    packages: list[CodePackage] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    import_s: float = 0.0

    def describe(self, config: ClusterConfig) -> str:
        """The dry run's lines: what code ships, and what was checked."""
        return (
            f"{describe_code(self.packages, config)}\nchecked: the job's entrypoint and every actor class imported, "
            f"kwargs matched against the constructors ({self.import_s:.2f}s)"
        )


def check_launch(config: ClusterConfig) -> LaunchCheck:
    """Run every check; one ConfigError listing every problem (with the file, pool, field, line and fix).

    With the job's code first on ``sys.path`` (as the job and every worker will have it), imports the job's
    entrypoint and each serve pool's actor class and checks the pool's constructor kwargs (after pool expanders and
    ``plan_kwargs``) against the constructor's signature and type hints with the runtime's own checks
    (runtime.core.metadata: keyword-only constructors; runtime.core.type_checks: isinstance, pydantic for
    constraints), so what passes here is what the actor would accept. A class whose module imports a package this
    machine lacks (installed on the GPU hosts only) is not an error: it is said, and checked at construction."""
    result, errors = LaunchCheck(), []
    try:
        result.packages = code_packages(config)
    except ConfigError as exc:
        errors.append(str(exc))
    use_job_code(config.job)
    started = time.monotonic()
    text = _text(config)
    if config.job.entrypoint is not None:
        try:
            entrypoint = resolve_entrypoint(config.job.entrypoint)
        except ConfigError as exc:  # a dependency missing too: the job runs here, in the launcher
            errors.append(_at(text, "job", "entrypoint", str(exc)))
        else:
            try:
                pools = {p.id: p.worker.kwargs for p in config.pools if isinstance(p.worker, ServeWorkerSpec)}
                check_job_args(entrypoint, config.job.args, pools)
            except ConfigError as exc:
                named = [key for key in config.job.args if repr(key) in str(exc) or f"job.args.{key}" in str(exc)]
                errors.append(_at(text, "job.args", named[0] if named else "", str(exc)))
    for pool in config.pools:
        if isinstance(pool.worker, ServeWorkerSpec):
            errors += check_pool(pool, pool.worker, text, result.warnings)
    result.import_s = time.monotonic() - started
    if errors:
        label = config.source or "hosts.toml"
        raise ConfigError(f"{label}: {len(errors)} problem(s) found before starting anything:\n" + "\n".join(errors))
    return result


def check_pool(pool: PoolSpec, spec: ServeWorkerSpec, text: Source, warnings: list[str]) -> list[str]:
    """The problems of one serve pool's actor class and kwargs (warnings: what could not be checked here)."""
    where = f"pool {pool.id!r} field worker"
    try:
        cls = import_object(spec.actor_class, field=f"{where}.actor_class")
    except MissingDependency as exc:
        warnings.append(f"{exc}\n  (its kwargs are checked when the actor is constructed)")
        return []
    except ConfigError as exc:
        return [_at(text, pool.id, "actor_class", str(exc))]
    if not isinstance(cls, type):
        return [_at(text, pool.id, "actor_class", f"{where}.actor_class: {spec.actor_class} is not a class")]
    try:
        check_keyword_only_constructor(cls)
    except ActorDefinitionError as exc:
        return [_at(text, pool.id, "actor_class", f"{where}.actor_class: {exc}")]
    own_init = cls.__init__ is not object.__init__  # object's takes nothing, whatever its signature says
    params = list(inspect.signature(cls.__init__).parameters.values())[1:] if own_init else []
    named = {p.name: p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    owner = f"{cls.__qualname__}.__init__"
    given = {**{name: "kwargs" for name in spec.kwargs}, **{name: "plan_kwargs" for name in spec.plan_kwargs}}
    problems = []

    def problem(key: str, message: str) -> None:
        problems.append(_at(text, pool.id, key, message))

    for name, source in given.items():
        if name not in named and not takes_any:
            close = difflib.get_close_matches(name, list(named), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"its parameters: {', '.join(named) or 'none'}"
            problem(name, f"{where}.{source}: {owner} takes no {name!r}; {fix}")
    for name, param in named.items():
        if param.default is inspect.Parameter.empty and name not in given:
            problem("kwargs", f"{where}.kwargs: {owner} needs {name!r} (no default); add `{name} = ...` to the "
                    "pool's [pools.worker.kwargs]")  # fmt: skip
    hints = _hints(cls)
    for name, value in spec.kwargs.items():
        hint = hints.get(name) if name in named else None
        if hint is None:
            continue
        value, errors, unsure = _as_model(value, hint)  # a dict becomes the model the hint names, as on the host
        for loc, message in errors:
            problem(name, f"{where}.kwargs.{name}{loc}: {message}")
        for loc, message in unsure:
            warnings.append(f"{where}.kwargs.{name}{loc}: {message} (here; checked again on the host)")
        if errors or unsure:
            continue
        check = deep_check(hint)
        wrong = f"{short(value)} is not a {hint_name(hint)}" if not matches(value, hint) else None
        wrong = wrong or (check(value) if check is not None else None)
        if wrong:
            shown = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
            problem(name, f"{where}.kwargs.{name}: {wrong} ({owner} takes {name}: {hint_name(shown)})")
    return problems


def _as_model(value: Any, hint: Any) -> tuple[Any, list[tuple[str, str]], list[tuple[str, str]]]:
    """``value`` as the actor's process gets it (runtime.core.metadata.coerce_constructor_kwargs: a dict becomes the
    first pydantic model in ``hint``), the model's errors as (location, message), and those of its own validators
    (``value_error``), which may check this machine's files (a model_path on the GPU hosts): warnings, not errors."""
    models = [h for h in (hint, *typing.get_args(hint)) if isinstance(h, type) and hasattr(h, "model_validate")]
    if not isinstance(value, dict) or not models:
        return value, [], []
    try:
        return models[0].model_validate(value), [], []
    except pydantic.ValidationError as exc:
        found = [(e["type"], "".join(f".{p}" for p in e["loc"]), e["msg"]) for e in exc.errors()]
        errors = [(loc, _did_you_mean(models[0], loc, msg) if kind == "extra_forbidden" else msg)
                  for kind, loc, msg in found if kind != "value_error"]  # fmt: skip
        return value, errors, [(loc, msg.removeprefix("Value error, ")) for kind, loc, msg in found
                               if kind == "value_error"]  # fmt: skip


def _did_you_mean(model: Any, loc: str, message: str) -> str:
    """An unknown field of a (nested) model, with the closest known one."""
    for part in loc.strip(".").split(".")[:-1]:
        field_info = getattr(model, "model_fields", {}).get(part)
        inner = [a for a in (field_info.annotation, *typing.get_args(field_info.annotation))] if field_info else []
        model = next((a for a in inner if isinstance(a, type) and hasattr(a, "model_fields")), None)
    known = list(getattr(model, "model_fields", {}))
    close = difflib.get_close_matches(loc.rsplit(".", 1)[-1], known, n=1)
    return f"{message}; did you mean {close[0]!r}?" if close else f"{message} (known: {', '.join(known)})"


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls.__init__, include_extras=True)
    except Exception:  # a hint that does not resolve here (a TYPE_CHECKING import): those go unchecked
        return {}


def _text(config: ClusterConfig) -> Source:
    label = str(config.source or "<hosts.toml>")
    try:
        return label, config.source.read_text() if config.source else ""
    except OSError:
        return label, ""


def _at(source: Source, anchor: str, key: str, message: str) -> str:
    """``message`` prefixed with its best-effort line: ``key = `` after the line naming ``anchor`` (a pool's id or a
    table's header), else the only line setting ``key``, else the anchor's line."""
    label, text = source
    lines = text.splitlines()
    name = re.escape(anchor)
    anchor_re = re.compile(rf"^\s*(id\s*=\s*[\"']{name}[\"']|\[\s*{name}\s*\])")
    key_re = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    start = next((i for i, line in enumerate(lines) if anchor_re.match(line)), None)
    found = [i for i, line in enumerate(lines) if key_re.match(line)]
    after = [i for i in found if start is not None and i > start]
    line = after[0] if after else (found[0] if len(found) == 1 else start)
    return f"  {label}:{line + 1}: {message}" if line is not None else f"  {label}: {message}"
