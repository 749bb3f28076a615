"""The host agent's commands as types: the launcher builds one and sends it as a JSON line; the agent ``parse``s it.

``parse`` checks every field's type and bound and raises ValueError naming the field (answered ``error``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from launcher.agent import agent_protocol as proto

MAX_PORTS = 1024  # ports handed out by one ``ports`` command
READY_KINDS = ("none", "line", "tcp", "http")


@dataclasses.dataclass(frozen=True, slots=True)
class Spawn:
    """Start a worker's process; ``ready`` says when it counts as ready (launcher.agent.readiness ``wait_ready``)."""

    OP: ClassVar[str] = proto.OP_SPAWN
    id: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    ready: dict[str, Any] = dataclasses.field(default_factory=lambda: {"kind": "none"})
    stream_logs: str = "warnings"
    python_path: list[str] | None = None  # the job's code, put first on the child's sys.path
    stdin: str | None = None  # written to the child's stdin, then closed (a worker's spawn token)

    @staticmethod
    def parse(message: dict[str, Any]) -> Spawn:
        argv = _strings(_get(message, "argv", list), "argv")
        if not argv:
            raise ValueError("'argv' must not be empty")
        env = _get(message, "env", dict, {})
        if not all(type(k) is str and type(v) in (str, int, float) for k, v in env.items()):
            raise ValueError("env must map names to strings")
        ready = _get(message, "ready", dict, None) or {"kind": "none"}
        if ready.get("kind") not in READY_KINDS:
            raise ValueError(f"ready.kind must be one of {', '.join(READY_KINDS)}, got {ready.get('kind')!r}")
        return Spawn(
            id=_id(message),
            argv=argv,
            env={k: str(v) for k, v in env.items()},
            cwd=_get(message, "cwd", str, None),
            ready=ready,
            stream_logs=_get(message, "stream_logs", str, "warnings"),
            python_path=_strings(_get(message, "python_path", list, None), "python_path"),
            stdin=_get(message, "stdin", str, None),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Kill:
    """Stop a worker's process tree (SIGTERM, ``grace_s``, SIGKILL); answered ``killed`` once its exit is out."""

    OP: ClassVar[str] = proto.OP_KILL
    id: str
    grace_s: float = 10.0

    @staticmethod
    def parse(message: dict[str, Any]) -> Kill:
        return Kill(_id(message), _seconds(message, "grace_s", 10.0))


@dataclasses.dataclass(frozen=True, slots=True)
class ListProcs:
    """The agent's processes: answered ``listing``."""

    OP: ClassVar[str] = proto.OP_LIST

    @staticmethod
    def parse(message: dict[str, Any]) -> ListProcs:
        return ListProcs()


@dataclasses.dataclass(frozen=True, slots=True)
class Ports:
    """``n`` free TCP ports on the host, never handed out twice by this agent; answered ``ports``."""

    OP: ClassVar[str] = proto.OP_PORTS
    n: int = 1

    @staticmethod
    def parse(message: dict[str, Any]) -> Ports:
        n = _get(message, "n", int, 1)
        if not 0 < n <= MAX_PORTS:
            raise ValueError(f"n must be 1 to {MAX_PORTS}, got {n}")
        return Ports(n)


@dataclasses.dataclass(frozen=True, slots=True)
class CurveKeys:
    """Write the cluster's CURVE key files into WORKDIR/dir (checked by launcher.agent.agent_keys); answered with its
    path."""

    OP: ClassVar[str] = proto.OP_CURVE_KEYS
    dir: str
    files: dict[str, str]

    @staticmethod
    def parse(message: dict[str, Any]) -> CurveKeys:
        return CurveKeys(_get(message, "dir", str), _get(message, "files", dict))


@dataclasses.dataclass(frozen=True, slots=True)
class CodeHave:
    """Is the code package ``digest`` (sha256 of its zip) unpacked on the host? Answered ``code``."""

    OP: ClassVar[str] = proto.OP_CODE_HAVE
    digest: str

    @staticmethod
    def parse(message: dict[str, Any]) -> CodeHave:
        return CodeHave(_get(message, "digest", str))


@dataclasses.dataclass(frozen=True, slots=True)
class CodePut:
    """One base64 chunk of a code package's zip, at ``offset`` of ``size`` bytes (in order); no reply."""

    OP: ClassVar[str] = proto.OP_CODE_PUT
    digest: str
    size: int
    offset: int
    data: str

    @staticmethod
    def parse(message: dict[str, Any]) -> CodePut:
        return CodePut(
            _get(message, "digest", str), _get(message, "size", int), _get(message, "offset", int),
            _get(message, "data", str),
        )  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class CodeUnpack:
    """Check the received zip against its digest and unpack it (at most ``max_bytes``); answered ``code``."""

    OP: ClassVar[str] = proto.OP_CODE_UNPACK
    digest: str
    max_bytes: int

    @staticmethod
    def parse(message: dict[str, Any]) -> CodeUnpack:
        return CodeUnpack(_get(message, "digest", str), _get(message, "max_bytes", int))


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat:
    """The launcher is there (any line counts); no reply."""

    OP: ClassVar[str] = proto.OP_HEARTBEAT

    @staticmethod
    def parse(message: dict[str, Any]) -> Heartbeat:
        return Heartbeat()


@dataclasses.dataclass(frozen=True, slots=True)
class Shutdown:
    """Kill every tree (SIGTERM, ``grace_s``, SIGKILL; None: the agent's own grace), answer ``bye`` and exit."""

    OP: ClassVar[str] = proto.OP_SHUTDOWN
    grace_s: float | None = None

    @staticmethod
    def parse(message: dict[str, Any]) -> Shutdown:
        return Shutdown(_seconds(message, "grace_s", None))


Command = Spawn | Kill | ListProcs | Ports | CurveKeys | CodeHave | CodePut | CodeUnpack | Heartbeat | Shutdown
COMMANDS: dict[str, Any] = {
    kind.OP: kind
    for kind in (Spawn, Kill, ListProcs, Ports, CurveKeys, CodeHave, CodePut, CodeUnpack, Heartbeat, Shutdown)
}


class UnknownOp(ValueError):
    """A command whose ``op`` this agent does not know."""


def encode(command: Command, req: int | None = None) -> bytes:
    """The JSON line of ``command`` (``req``: the request id its reply echoes)."""
    fields = {field.name: getattr(command, field.name) for field in dataclasses.fields(command)}
    head: dict[str, Any] = {"op": command.OP} if req is None else {"op": command.OP, "req": req}
    return proto.encode({**head, **fields})


def parse(message: dict[str, Any]) -> Command:
    """The command of one decoded line; UnknownOp or ValueError (naming the field) on anything else."""
    op = message.get("op")
    kind = COMMANDS.get(op) if type(op) is str else None
    if kind is None:
        raise UnknownOp(f"unknown op {op!r}")
    return kind.parse(message)


def request_id(message: dict[str, Any]) -> int | None:
    """A line's request id, if it is a usable one (echoed in the reply)."""
    req = message.get("req")
    return req if type(req) is int else None


_MISSING = object()


def _get(message: dict[str, Any], name: str, kind: type, default: Any = _MISSING) -> Any:
    value = message.get(name, _MISSING)
    if value is _MISSING or (value is None and default is None):
        if default is _MISSING:
            raise ValueError(f"{name!r} is missing")
        return default
    if type(value) is not kind:
        article = "an" if kind.__name__[0] in "aeiou" else "a"
        raise ValueError(f"{name!r} must be {article} {kind.__name__}, got {type(value).__name__}")
    return value


def _id(message: dict[str, Any]) -> str:
    wid = _get(message, "id", str)
    if not wid or len(wid) > 256 or "/" in wid or wid.startswith("."):
        raise ValueError(f"'id' must be a worker id (1 to 256 characters, no '/'), got {wid[:80]!r}")
    return wid


def _strings(values: list[Any] | None, name: str) -> list[str] | None:
    if values is not None and not all(type(value) is str for value in values):
        raise ValueError(f"{name!r} must be a list of strings")
    return values


def _seconds(message: dict[str, Any], name: str, default: float | None) -> float | None:
    value = message.get(name, default)
    if value is None and default is None:
        return None
    if type(value) not in (int, float) or not 0 <= value <= 24 * 3600:
        raise ValueError(f"{name!r} must be seconds from 0 to 86400, got {value!r}")
    return float(value)
