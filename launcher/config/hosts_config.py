"""hosts.toml: hosts, the job, pools and launcher settings, parsed once into frozen pydantic models whose errors
name the file, line, host or pool, and field."""

from __future__ import annotations

import getpass
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from launcher.config.config_lines import describe_errors, find_line
from launcher.config.pool_expanders import add_launcher_host, expand_pools
from launcher.config.section_expanders import expand_sections
from launcher.config.slurm_config import Allocation, SlurmCluster, expand_cluster
from launcher.config.specs import ENTRYPOINT_RE, PoolSpec, _check_env
from launcher.console.log_filter import StreamLogs
from launcher.errors import ConfigError
from runtime.placement import CPU, GPU, check_resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_FROZEN = ConfigDict(frozen=True, extra="forbid")
HOST_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
LOCAL_ADDRESSES = frozenset({"localhost", "127.0.0.1", "::1"})
LOOPBACK_BIND = "127.0.0.1"
OPEN_BIND = "0.0.0.0"
OPEN_BINDS_FIELD = "allow_open_binds_without_curve"
_KIND = {"ssh": "an ssh host", "slurm": "a slurm host (a node of the allocation)"}


class SSHConfig(BaseModel):
    """How to reach a host over SSH."""

    model_config = _FROZEN

    user: str = Field(default_factory=getpass.getuser)
    port: int = Field(default=22, ge=1, le=65535)
    key_file: Path | None = Field(default=None, description="private key; None uses ssh-agent/default keys")
    known_hosts: Path | None = Field(default=None, description="extra known_hosts file")
    host_key_policy: Literal["accept-new", "reject"] = Field(
        default="accept-new", description="unknown host keys: accept (changed keys always fail) or reject"
    )


class HostConfig(BaseModel):
    """One machine: where it is, how to reach it, its GPUs, Python and workdir."""

    model_config = _FROZEN

    name: str
    address: str
    provider: Literal["local", "ssh", "slurm"] = "ssh"
    ssh: SSHConfig = Field(default_factory=SSHConfig)
    gpus: int | tuple[int, ...] = Field(default=0, description="a count (ids 0..n-1) or explicit GPU ids")
    cpus: int | None = Field(
        default=None, ge=0, description="CPUs actors placed at run time may reserve (default: what the agent sees)"
    )
    resources: dict[str, float] = Field(
        default_factory=dict, description="custom resources for run-time placement, e.g. {disk = 1}"
    )
    python: str = Field(
        default="python3", description="Python with miles-actors installed (local hosts: the launcher's by default)"
    )
    workdir: Path = Field(description="per-host directory for logs (created if missing)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for every process")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not HOST_NAME_RE.match(value):
            raise ValueError(f"host name must match {HOST_NAME_RE.pattern}, got {value!r}")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: int | tuple[int, ...]) -> int | tuple[int, ...]:
        if isinstance(value, int):
            if value < 0:
                raise ValueError("gpus count must be >= 0")
            return value
        if any(gpu < 0 for gpu in value) or len(set(value)) != len(value):
            raise ValueError(f"gpu ids must be unique and >= 0, got {list(value)}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        reserved = sorted({CPU, GPU} & value.keys())
        if reserved:
            raise ValueError(f"{reserved[0]} is counted by the host's gpus/cpus fields, not under resources")
        return check_resources(value)

    @model_validator(mode="after")
    def _provider_rules(self) -> HostConfig:
        if self.provider == "local" and self.address not in LOCAL_ADDRESSES:
            raise ValueError(f"provider 'local' needs address in {sorted(LOCAL_ADDRESSES)}, got {self.address!r}")
        if self.provider != "local" and not self.workdir.is_absolute():
            kind = _KIND[self.provider]
            raise ValueError(f"workdir of {kind} must be an absolute path on that host, got '{self.workdir}'")
        return self

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        """GPU ids in ascending order."""
        return tuple(range(self.gpus)) if isinstance(self.gpus, int) else tuple(sorted(self.gpus))

    @property
    def reach_address(self) -> str:
        """The address other processes use to reach this host ('localhost' becomes 127.0.0.1)."""
        return "127.0.0.1" if self.address == "localhost" else self.address

    @property
    def actor_bind_host(self) -> str:
        """The interface this host's actors listen on: loopback for local hosts; every interface for SSH hosts,
        whose actors the launcher and the other hosts must reach."""
        return LOOPBACK_BIND if self.provider == "local" else OPEN_BIND


class JobConfig(BaseModel):
    """What runs once every pool is ready: a ``module:function`` entrypoint or a command."""

    model_config = _FROZEN

    entrypoint: str | None = Field(default=None, description="'module:function', called with a JobContext")
    command: tuple[str, ...] | None = Field(default=None, description="argv run on the launcher host")
    args: dict[str, Any] = Field(default_factory=dict, description="passed as JobContext.args")
    name: str | None = Field(
        default=None, description="the job's name (Prometheus label `miles_job`); default: entrypoint or command"
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for a command job")
    # The job's code (launcher/launch/code_package.py): first on sys.path of the job and every worker, shipped to hosts.
    working_dir: Path | None = Field(default=None, description="default: hosts.toml's directory; false: none")
    py_modules: tuple[Path, ...] = Field(default=(), description="more local packages (dirs) or modules (.py)")
    excludes: tuple[str, ...] = Field(default=(), description=".gitignore-style patterns never shipped")
    max_code_mib: float = Field(default=500.0, gt=0, description="refuse to ship more (Ray's limit too)")

    @field_validator("working_dir", "py_modules")
    @classmethod
    def _exist(cls, value: Path | tuple[Path, ...] | None) -> Path | tuple[Path, ...] | None:
        for path in (value,) if isinstance(value, Path) else value or ():
            if not (path.is_dir() or (path.is_file() and path.suffix == ".py")):
                raise ValueError(f"{path} is not a directory (nor a .py module for py_modules)")
        return value

    timeout_s: float | None = Field(
        default=None, gt=0, description="stop the job (and the launch, exit code 124) after this long; none by default"
    )
    heartbeat_s: float = Field(
        default=60.0, ge=0, description="a console line this often while the job runs (elapsed, last output); 0: off"
    )

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, value: str | None) -> str | None:
        if value is not None and not ENTRYPOINT_RE.match(value):
            raise ValueError(f"entrypoint must be 'module:function' (e.g. 'actors.demo:main'), got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> JobConfig:
        if (self.entrypoint is None) == (self.command is None):
            raise ValueError("set exactly one of `entrypoint` ('module:function') or `command` (argv list)")
        if self.command is not None and not self.command:
            raise ValueError("command must not be empty")
        if self.name is not None and not self.name.strip():
            raise ValueError("name must not be empty (leave it out to use the entrypoint or command)")
        return self

    @property
    def label(self) -> str:
        """The job's name as a metrics label: ``name``, else the entrypoint, else the command's program."""
        if self.name:
            return self.name
        if self.entrypoint:
            return self.entrypoint
        return Path((self.command or ("job",))[0]).name


class LauncherSettings(BaseModel):
    """Launcher-side knobs (deadlines, heartbeats, where the state file lives)."""

    model_config = _FROZEN

    workdir: Path = Field(default=Path("runs/miles-launch"), description="state file and launcher logs")
    connect_timeout_s: float = Field(default=10.0, gt=0)
    max_parallel_hosts: int = Field(default=32, gt=0, description="hosts connected to / asked at once")
    start_deadline_s: float = Field(default=300.0, gt=0, description="all pools ready")
    heartbeat_interval_s: float = Field(default=1.0, gt=0)
    heartbeat_timeout_s: float = Field(default=15.0, gt=0, description="agent kills its tree after this")
    stop_grace_s: float = Field(default=10.0, ge=0, description="SIGTERM to SIGKILL on teardown")
    stream_logs: StreamLogs = Field(
        default="warnings",
        description='worker output on the launcher\'s console: "warnings" (warnings, errors and prints; INFO logs only '
        'in the per-process log files), "all" (`miles-launch -v`) or "none"; true means "warnings", false "none"',
    )
    check_versions: bool = Field(default=True, description="require same Python minor and miles-actors version")
    gpu_check: bool = Field(
        default=True,
        description="refuse GPU ids a host does not have (nvidia-smi -L / /proc/driver/nvidia/gpus on the host); "
        "false (or --no-gpu-check) for GPU ids that are only labels on a CPU machine",
    )
    cluster: bool = Field(
        default=True,
        description="start an agent on every host, also those no pool runs on, so actors can be placed there at "
        "run time (false: only the pools' hosts)",
    )
    curve: bool = Field(
        default=True,
        description="CURVE-authenticate every actor socket with per-launch keys (false: plain TCP, trusted networks)",
    )
    allow_open_binds_without_curve: bool = Field(
        default=False,
        description="with curve off, let SSH hosts' actors listen on every interface anyway (anyone who can reach "
        "their ports can call any public method); without it such a launch is refused",
    )
    metrics_sd_port: int = Field(
        default=0, ge=-1, le=65535, description="Prometheus HTTP service discovery port (0: any free, -1: off)"
    )
    metrics_sd_host: str = Field(default="0.0.0.0", min_length=1, description="interface the discovery serves on")

    @field_validator("stream_logs", mode="before")
    @classmethod
    def _stream_logs_bool(cls, value: Any) -> Any:
        """``stream_logs = true/false`` (this field's former type) keep working: true is the default."""
        if isinstance(value, bool):
            return "warnings" if value else "none"
        return value


class ClusterConfig(BaseModel):
    """The whole hosts.toml."""

    model_config = _FROZEN

    hosts: tuple[HostConfig, ...]
    job: JobConfig
    pools: tuple[PoolSpec, ...] = ()
    launcher: LauncherSettings = Field(default_factory=LauncherSettings)
    source: Path | None = Field(default=None, description="file it was loaded from")
    cluster: SlurmCluster | None = Field(default=None, description="[cluster]: hosts from a Slurm allocation")

    @model_validator(mode="after")
    def _cross_refs(self) -> ClusterConfig:
        names = [h.name for h in self.hosts]
        if not names:
            raise ValueError("no [[hosts]]: list at least one host")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate host names: {dupes}")
        pool_ids = [p.id for p in self.pools]
        if len(set(pool_ids)) != len(pool_ids):
            raise ValueError(f"duplicate pool ids: {pool_ids}")
        for pool in self.pools:
            for host in pool.hosts or ():
                if host not in names:
                    raise ValueError(f"pool {pool.id!r}: hosts lists unknown host {host!r} (known: {names})")
            if pool.colocate_with is not None:
                if pool.colocate_with not in pool_ids or pool.colocate_with == pool.id:
                    raise ValueError(f"pool {pool.id!r}: colocate_with names unknown pool {pool.colocate_with!r}")
        return self

    def host(self, name: str) -> HostConfig:
        """The host called ``name``."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def pool(self, pool_id: str) -> PoolSpec:
        """The pool called ``pool_id``."""
        for pool in self.pools:
            if pool.id == pool_id:
                return pool
        raise KeyError(pool_id)


def load_config(
    path: str | Path, *, allocation: Allocation | None = None, job: dict[str, Any] | None = None
) -> ClusterConfig:
    """Read and validate a hosts.toml; raises ConfigError naming file, line, host/pool and field. ``allocation``:
    the Slurm nodes a ``[cluster]`` file plans with (default: the allocation this process runs in). ``job``: what the
    job runs instead of ``[job]``'s entrypoint or command (``miles-launch --driver``)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_config(text, source=path, allocation=allocation, job=job)


def parse_config(
    text: str,
    *,
    source: Path | None = None,
    allocation: Allocation | None = None,
    job: dict[str, Any] | None = None,
) -> ClusterConfig:
    """Validate hosts.toml text (see load_config).

    ``[host_defaults]`` is merged into every ``[[hosts]]`` entry before validation; relative ``workdir``/``key_file``
    paths are resolved against the file's directory; ``[cluster] provider = "slurm"`` takes the hosts from a Slurm
    allocation (slurm_config.py); pool expanders rewrite their pools and the built-in host "launcher" is added
    where a pool names it (pool_expanders.py). Where in the file an error is: config_lines.py."""
    label = str(source) if source else "<hosts.toml>"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{label}: not valid TOML: {exc}") from None
    base = source.parent.resolve() if source else Path.cwd()
    if job is not None:
        kept = {k: v for k, v in raw.get("job", {}).items() if k not in ("entrypoint", "command")}
        raw["job"] = {**job, **kept}  # [job] working_dir, env, args, timeout_s still apply
    raw = expand_cluster(raw, label=label, allocation=allocation)
    prepared = _prepare(raw, base, code_dir=source is not None)
    data = add_launcher_host(expand_pools(expand_sections(prepared, base=base, label=label), label=label))
    try:
        config = ClusterConfig.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, data, text, label, ClusterConfig)) from None
    check_open_binds(config, text=text)
    return config


def open_bind_hosts(config: ClusterConfig) -> list[HostConfig]:
    """The hosts whose actors listen beyond loopback."""
    return [host for host in config.hosts if host.actor_bind_host != LOOPBACK_BIND]


def check_open_binds(config: ClusterConfig, *, text: str | None = None, curve_off_by: str | None = None) -> None:
    """Refuse CURVE off with actors listening beyond loopback unless hosts.toml opts in explicitly.

    With CURVE off, actors of SSH hosts listen on every interface without authentication, hence
    ``[launcher] allow_open_binds_without_curve = true``; parse_config runs this on the file, the CLI again on a
    config changed after parsing (``--no-curve``).

    ``text``: the file's text, to name the line (read from ``config.source`` when None); ``curve_off_by``: what
    turned CURVE off when not the file (e.g. ``--no-curve``). Raises ConfigError saying which hosts, which field
    to add and how to turn CURVE back on.
    """
    settings = config.launcher
    hosts = open_bind_hosts(config)
    if settings.curve or settings.allow_open_binds_without_curve or not hosts:
        return
    label = str(config.source) if config.source else "<hosts.toml>"
    if text is None and config.source is not None:
        try:
            text = config.source.read_text()
        except OSError:
            text = None
    line = find_line(text, "launcher", None, ["curve"]) if text else None
    names = ", ".join(repr(host.name) for host in hosts)
    off_by = curve_off_by or "`curve = false` in [launcher]"
    undo = f"drop {curve_off_by}" if curve_off_by else "remove `curve = false` from [launcher]"
    raise ConfigError(
        f"{label}{f':{line}' if line else ''}: field 'launcher.curve': CURVE is off ({off_by}), and the actors "
        f"of ssh host(s) {names} would listen on every interface ({OPEN_BIND}) without authentication: any peer "
        "that can reach their ports could call any public method of any actor.\n"
        f"Fix: turn CURVE back on ({undo}), or, on a trusted network only, add "
        f"`{OPEN_BINDS_FIELD} = true` to the [launcher] table of {label}."
    )


def _prepare(raw: dict[str, Any], base: Path, *, code_dir: bool) -> dict[str, Any]:
    """Merge [host_defaults] into hosts and resolve relative paths against the file's directory (``code_dir``: the
    job's working_dir defaults to it)."""
    data = dict(raw)
    defaults = data.pop("host_defaults", {}) or {}
    hosts = []
    for entry in data.get("hosts", []) or []:
        if not isinstance(entry, dict):
            hosts.append(entry)
            continue
        merged = {**defaults, **entry}
        if isinstance(defaults.get("env"), dict) and isinstance(entry.get("env"), dict):
            merged["env"] = {**defaults["env"], **entry["env"]}
        if isinstance(defaults.get("ssh"), dict) and isinstance(entry.get("ssh"), dict):
            merged["ssh"] = {**defaults["ssh"], **entry["ssh"]}
        if merged.get("provider") == "local":  # paths on this machine: relative to hosts.toml
            merged.setdefault("python", sys.executable)  # the launcher's own interpreter by default
            _resolve(merged, "workdir", base)
            if isinstance(merged.get("python"), str) and "/" in merged["python"]:
                _resolve(merged, "python", base)
        if isinstance(merged.get("ssh"), dict):
            merged["ssh"] = dict(merged["ssh"])
            _resolve(merged["ssh"], "key_file", base)
            _resolve(merged["ssh"], "known_hosts", base)
        hosts.append(merged)
    if "hosts" in data:
        data["hosts"] = hosts
    if isinstance(data.get("job"), dict):  # the job's code: relative to hosts.toml, which it defaults to
        job = data["job"] = {**({"working_dir": str(base)} if code_dir else {}), **data["job"]}
        if job.get("working_dir") is False:
            job["working_dir"] = None
        elif isinstance(job.get("working_dir"), str):
            job["working_dir"] = _normal(base, job["working_dir"])
        if isinstance(job.get("py_modules"), list):
            job["py_modules"] = [_normal(base, m) if isinstance(m, str) else m for m in job["py_modules"]]
    launcher = dict(data["launcher"]) if isinstance(data.get("launcher"), dict) else {}
    launcher.setdefault("workdir", "runs/miles-launch")
    _resolve(launcher, "workdir", base)
    data["launcher"] = launcher
    return data


def _normal(base: Path, path: str) -> str:
    return os.path.normpath(base / Path(path).expanduser())


def _resolve(table: dict[str, Any], key: str, base: Path) -> None:
    value = table.get(key)
    if isinstance(value, str):
        path = Path(value).expanduser()
        table[key] = str(path if path.is_absolute() else base / path)
