"""A launch's name service: one registry of actor names for every host of a launch, kept by the launcher.

The launcher process is the name authority of its launch: it keeps a :class:`~runtime.names.name_registry.NameRegistry`
and serves it as :class:`NameService` (:mod:`runtime.names.service`). Every process of the launch finds it in
``MILES_NAME_SERVICE`` (JSON: the endpoint as that host reaches the launcher, and the service's CURVE public key),
so ``get_actor`` and ``spawn(..., name=...)`` see the same names on every host (:mod:`runtime.names.naming`). Claims are
atomic: the registry checks and writes under one lock, so two hosts cannot both take a name.

Who may call it: any holder of the launch's CURVE client key, as any actor's public methods (with CURVE off, anyone
who reaches its port). Entries hold a handle's state only (never a spawn token). What a caller can store is
bounded: an entry's size (``max_entry_bytes``) and the number of names in the registry (``max_names``), with
errors that say so.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from typing_extensions import TypedDict  # pydantic reads TypedDicts from here before Python 3.12

from runtime.caller.client import ClientRuntime
from runtime.names import service
from runtime.names.name_registry import NameRegistry
from runtime.names.service import ServiceAddress, ServiceClient, ServiceServer

#: The environment variable naming a launch's name service (set by the launcher on every worker and command job).
NAME_SERVICE_ENV = "MILES_NAME_SERVICE"
CALL_DEADLINE_S = 10.0

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


class NameServiceUnavailable(RuntimeError):
    """The launch's name service did not answer (the launcher is gone, or unreachable from this host)."""


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


def address_from_env(text: str) -> ServiceAddress:
    """The address in a ``MILES_NAME_SERVICE`` value; ValueError saying what it should be otherwise."""
    address = ServiceAddress.from_json(text)
    if address is None:
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
        self._client = ServiceClient(
            address, NameService, name="name-service", deadline_s=lambda op, kwargs: self.deadline_s,
            unavailable=self._unavailable,
        )  # fmt: skip

    def _unavailable(self, op: str, exc: Exception) -> NameServiceUnavailable:
        return NameServiceUnavailable(
            f"the launch's name service at {self.address.endpoint} ({NAME_SERVICE_ENV}) did not answer {op} within "
            f"{self.deadline_s:g} s: is the launcher still running, and can this host reach it? ({exc})"
        )

    async def call_async(self, op: str, *args: Any) -> Any:
        """``op(*args)`` on the service (await it on any loop)."""
        return await self._client.call_async(op, *args)

    def call(self, op: str, *args: Any, what: str) -> Any:
        """``op(*args)`` on the service, blocking; refused on the runtime's event loop thread (it would wait on
        itself): ``what`` names the caller and its async variant in that error."""
        if ClientRuntime.get().on_loop_thread():
            raise RuntimeError(
                f"{what} asks the launch's name service and would block the runtime's event loop it runs on; "
                "use the async variant there (await it)"
            )
        return self._client.call(op, *args)


@dataclass
class NameServer:
    """A launch's registry served by this process (the launcher): see :func:`serve`."""

    registry: NameRegistry
    served: ServiceServer

    @property
    def port(self) -> int:
        return self.served.port

    @property
    def server_key(self) -> str | None:
        return self.served.server_key

    def address(self, reach: str) -> ServiceAddress:
        """The service as a host that reaches this process at ``reach`` (an IP address) sees it."""
        return self.served.address(reach)

    def close(self) -> None:
        """Stop serving; this process no longer answers names from its registry."""
        with _lock:
            if self in _local:
                _local.remove(self)
        self.served.close()


_local: list[NameServer] = []  # registries this process serves; the newest one holds this process's own names
_clients: dict[str, NameServiceClient] = {}
_lock = threading.Lock()


def serve(*, curve_dir: str | None, open_bind: bool, registry: NameRegistry | None = None) -> NameServer:
    """Serve a new registry from this process (a launcher), on every interface when ``open_bind`` (other hosts
    reach it) else on loopback, with CURVE when ``curve_dir`` names keys; from now on it holds this process's names.
    """
    registry = registry if registry is not None else NameRegistry()
    served = service.serve(
        NameService(registry=registry), "name-service", curve_dir=curve_dir, open_bind=open_bind,
        what="the launch's name service",
    )  # fmt: skip
    server = NameServer(registry=registry, served=served)
    with _lock:
        _local.append(server)
    return server


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
            client = _clients[text] = NameServiceClient(address_from_env(text))
        return client
