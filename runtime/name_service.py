"""A launch's name service: one registry of actor names for every host of a launch, kept by the launcher.

The launcher process is the name authority of its launch: it keeps a :class:`NameRegistry` and serves it as
:class:`NameService` from an in-process actor server (:mod:`runtime.driver_server`). Every process of the launch
finds it in ``MILES_NAME_SERVICE`` (JSON: the endpoint as that host reaches the launcher, and the service's CURVE
public key), so ``get_actor`` and ``spawn(..., name=...)`` see the same names on every host (:mod:`runtime.naming`).
Claims are atomic: the registry checks and writes under one lock, so two hosts cannot both take a name.

Who may call it: any holder of the launch's CURVE client key, as any actor's public methods (with CURVE off, anyone
who reaches its port). Entries hold a handle's state only (never a spawn token). What a caller can store is
bounded: an entry's size (``max_entry_bytes``) and the number of names in the registry (``max_names``), with
errors that say so.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ConfigDict, Field
from typing_extensions import TypedDict  # pydantic reads TypedDicts from here before Python 3.12

from runtime.errors import ActorDied, DeadlineExceeded, NotDelivered, RemoteError

if TYPE_CHECKING:
    from runtime.actor_server import ActorServer
    from runtime.handle import ActorHandle

log = logging.getLogger(__name__)

#: The environment variable naming a launch's name service (set by the launcher on every worker and command job).
NAME_SERVICE_ENV = "MILES_NAME_SERVICE"
DEFAULT_MAX_NAMES = 10_000
DEFAULT_MAX_ENTRY_BYTES = 4096
CALL_DEADLINE_S = 10.0
_LISTED_NAMES = 50  # names() returns at most this many (they go into error messages)
_VALID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+=@-]{0,199}")

_Text = Annotated[str, Field(max_length=1024)]
_Label = Annotated[str, Field(max_length=200)]


class HandleState(TypedDict):
    """An actor handle's state (``ActorHandle.to_state``): what a registry entry holds, checked field by field."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    endpoint: _Text
    name: _Text
    class_path: _Text
    boot_id: _Text | None
    host: _Text
    pid: int
    machine_id: _Text
    metrics_port: int | None
    server_key: _Text | None


class NameRegistryFull(RuntimeError):
    """The registry holds ``max_names`` names: a new one is refused until some are forgotten."""


class NameServiceUnavailable(RuntimeError):
    """The launch's name service did not answer (the launcher is gone, or unreachable from this host)."""


def check_name(what: str, value: str) -> None:
    """Refuse a name or namespace that could not be a file name of its own (e.g. ``../x``)."""
    if not isinstance(value, str) or not _VALID.fullmatch(value):
        raise ValueError(
            f"actor {what} {str(value)[:80]!r} is not allowed: use 1 to 200 letters, digits and _ . : + = @ -, not "
            "starting with a dot or a dash"
        )


def _check_key(namespace: str, name: str) -> None:
    check_name("name", name)
    if namespace:
        check_name("namespace", namespace)


class NameRegistry:
    """Names of one launch: ``(namespace, name) -> handle state``, thread-safe, bounded."""

    def __init__(self, *, max_names: int = DEFAULT_MAX_NAMES, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        self.max_names = max_names
        self.max_entry_bytes = max_entry_bytes
        self._entries: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _store(self, namespace: str, name: str, state: dict[str, Any]) -> None:
        """Write an entry (under the lock), refusing one too big or a new name past ``max_names``."""
        size = len(json.dumps(state))
        if size > self.max_entry_bytes:
            raise ValueError(
                f"the registry entry for actor name {name!r} is {size} bytes, over the limit of "
                f"{self.max_entry_bytes} (a handle's state is a few hundred bytes)"
            )
        if (namespace, name) not in self._entries and len(self._entries) >= self.max_names:
            raise NameRegistryFull(
                f"cannot register actor name {name!r}: the launch's name registry holds {len(self._entries)} names "
                f"(max_names={self.max_names}); kill named actors you no longer need"
            )
        self._entries[(namespace, name)] = dict(state)

    def claim(
        self, namespace: str, name: str, state: dict[str, Any], replacing: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Register ``state`` under the name unless another actor holds it; returns that holder's entry (the claim
        then failed). ``replacing``: an entry the caller found dead; it is taken over only if it is still there."""
        _check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
            if current is not None and current.get("endpoint") != state.get("endpoint") and current != replacing:
                return dict(current)
            self._store(namespace, name, state)
        return None

    def put(self, namespace: str, name: str, state: dict[str, Any]) -> None:
        """Register ``state`` under the name whoever held it (the launcher names its cells; not served)."""
        _check_key(namespace, name)
        with self._lock:
            self._store(namespace, name, state)

    def lookup(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The entry under the name, if any."""
        _check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
        return dict(current) if current is not None else None

    def forget(self, namespace: str, name: str, endpoint: str) -> bool:
        """Drop the name if it still names the actor at ``endpoint``; returns whether it did."""
        _check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
            if current is None or current.get("endpoint") != endpoint:
                return False
            del self._entries[(namespace, name)]
        return True

    def refresh(self, namespace: str, name: str, state: dict[str, Any]) -> bool:
        """Rewrite the entry if it still names the actor at the same endpoint (it restarted: a new boot id)."""
        _check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
            if current is None or current.get("endpoint") != state.get("endpoint"):
                return False
            self._store(namespace, name, state)
        return True

    def names(self, namespace: str) -> list[str]:
        """Names registered in ``namespace`` (sorted, at most 50)."""
        if namespace:
            check_name("namespace", namespace)
        with self._lock:
            found = sorted(name for ns, name in self._entries if ns == namespace)
        return found[:_LISTED_NAMES]


class NameService:
    """The registry as an actor serves it to the launch's processes (only these methods; ``put`` stays local)."""

    def __init__(self, *, registry: NameRegistry) -> None:
        self._registry = registry

    def claim(
        self, namespace: _Label, name: _Label, state: HandleState, replacing: HandleState | None
    ) -> HandleState | None:
        """See :meth:`NameRegistry.claim`."""
        return self._registry.claim(namespace, name, dict(state), dict(replacing) if replacing else None)  # type: ignore[return-value]

    def lookup(self, namespace: _Label, name: _Label) -> HandleState | None:
        """See :meth:`NameRegistry.lookup`."""
        return self._registry.lookup(namespace, name)  # type: ignore[return-value]

    def forget(self, namespace: _Label, name: _Label, endpoint: _Text) -> bool:
        """See :meth:`NameRegistry.forget`."""
        return self._registry.forget(namespace, name, endpoint)

    def refresh(self, namespace: _Label, name: _Label, state: HandleState) -> bool:
        """See :meth:`NameRegistry.refresh`."""
        return self._registry.refresh(namespace, name, dict(state))

    def names(self, namespace: _Label) -> list[str]:
        """See :meth:`NameRegistry.names`."""
        return self._registry.names(namespace)


@dataclass(frozen=True)
class ServiceAddress:
    """Where a process reaches the name service: its endpoint and its CURVE public key (None: CURVE off)."""

    endpoint: str
    server_key: str | None

    def to_env(self) -> str:
        return json.dumps({"endpoint": self.endpoint, "server_key": self.server_key})

    @classmethod
    def from_env(cls, text: str) -> ServiceAddress:
        try:
            data = json.loads(text)
            address = cls(endpoint=data["endpoint"], server_key=data["server_key"])
        except (ValueError, TypeError, KeyError):
            address = None
        if address is None or not isinstance(address.endpoint, str) or not address.endpoint.startswith("tcp://"):
            raise ValueError(
                f"{NAME_SERVICE_ENV}={text[:200]!r} is not a name service address: expected JSON "
                '{"endpoint": "tcp://host:port", "server_key": "<z85 key>" or null} (the launcher sets it)'
            )
        return address


class NameServiceClient:
    """Calls a launch's name service (from ``MILES_NAME_SERVICE``) with a deadline; errors name its endpoint."""

    def __init__(self, address: ServiceAddress, *, deadline_s: float = CALL_DEADLINE_S) -> None:
        self.address = address
        self.deadline_s = deadline_s
        self._handle: ActorHandle | None = None

    @property
    def handle(self) -> ActorHandle:
        if self._handle is None:
            from runtime.handle import ActorHandle
            from runtime.metadata import class_info, class_path

            self._handle = ActorHandle(
                endpoint=self.address.endpoint, name="name-service", class_path=class_path(NameService),
                boot_id=None, host=self.address.endpoint, pid=0, info=class_info(NameService),
                server_key=self.address.server_key,
            )  # fmt: skip
        return self._handle

    def _unavailable(self, op: str, exc: Exception) -> NameServiceUnavailable:
        return NameServiceUnavailable(
            f"the launch's name service at {self.address.endpoint} ({NAME_SERVICE_ENV}) did not answer {op} within "
            f"{self.deadline_s:g} s: is the launcher still running, and can this host reach it? ({exc})"
        )

    async def call(self, op: str, *args: Any) -> Any:
        """``op(*args)`` on the service (await it on any loop)."""
        try:
            return await self.handle.method(op).options(deadline_s=self.deadline_s)(*args)
        except RemoteError:
            raise
        except (ActorDied, DeadlineExceeded, NotDelivered) as exc:
            raise self._unavailable(op, exc) from None

    def call_sync(self, op: str, *args: Any, what: str) -> Any:
        """``op(*args)`` on the service, blocking; refused on the runtime's event loop thread (it would wait on
        itself): ``what`` names the caller and its async variant in that error."""
        from runtime.client import ClientRuntime

        if ClientRuntime.get().on_loop_thread():
            raise RuntimeError(
                f"{what} asks the launch's name service and would block the runtime's event loop it runs on; "
                "use the async variant there (await it)"
            )
        try:
            return self.handle.method(op).options(deadline_s=self.deadline_s)(*args).result(self.deadline_s + 2)
        except RemoteError:
            raise
        except (ActorDied, DeadlineExceeded, NotDelivered) as exc:
            raise self._unavailable(op, exc) from None


@dataclass
class NameServer:
    """A launch's registry served by this process (the launcher): see :func:`serve`."""

    registry: NameRegistry
    server: ActorServer
    port: int

    @property
    def server_key(self) -> str | None:
        return self.server.server_keys.public.decode() if self.server.curve is not None else None

    def address(self, reach: str) -> ServiceAddress:
        """The service as a host that reaches this process at ``reach`` (an IP address) sees it."""
        shown = f"[{reach}]" if ":" in reach else reach
        return ServiceAddress(endpoint=f"tcp://{shown}:{self.port}", server_key=self.server_key)

    def close(self) -> None:
        """Stop serving; this process no longer answers names from its registry."""
        with _lock:
            if self in _local:
                _local.remove(self)
        from runtime import driver_server

        try:
            driver_server.stop_server(self.server, what="stop the launch's name service")
        except Exception as exc:  # e.g. at exit, with the runtime's loop already stopped: nothing is served then
            log.warning("stopping the name service on port %d: %s", self.port, exc)


_local: list[NameServer] = []  # registries this process serves; the newest one holds this process's own names
_clients: dict[str, NameServiceClient] = {}
_lock = threading.Lock()


def serve(*, curve_dir: str | None, open_bind: bool, registry: NameRegistry | None = None) -> NameServer:
    """Serve a new registry from this process (a launcher), on every interface when ``open_bind`` (other hosts
    reach it) else on loopback, with CURVE when ``curve_dir`` names keys; from now on it holds this process's names.
    """
    from runtime import driver_server
    from transport import security

    registry = registry if registry is not None else NameRegistry()
    bind = "tcp://0.0.0.0:0" if open_bind else "tcp://127.0.0.1:0"
    server = driver_server.start_server(
        NameService(registry=registry), "name-service", bind=bind, curve=security.resolve(curve_dir),
        what="start the launch's name service",
    )  # fmt: skip
    served = NameServer(registry=registry, server=server, port=int(server.address.rsplit(":", 1)[1]))
    with _lock:
        _local.append(served)
    return served


def local_server() -> NameServer | None:
    """The registry this process serves (the newest, if several), if any: it answers without a round trip."""
    with _lock:
        return _local[-1] if _local else None


def client_from_env() -> NameServiceClient | None:
    """The client of the name service ``MILES_NAME_SERVICE`` names, if set."""
    text = os.environ.get(NAME_SERVICE_ENV, "")
    if not text:
        return None
    with _lock:
        client = _clients.get(text)
        if client is None:
            client = _clients[text] = NameServiceClient(ServiceAddress.from_env(text))
        return client
