"""A launch's name service: one registry of actor names for every host of a launch, kept by the launcher.

With it ``get_actor`` and ``spawn(..., name=...)`` see the same names on every host (:mod:`runtime.names.naming`).
"""

from __future__ import annotations

import os
import threading
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.caller.call_policy import CallPolicy
from runtime.caller.handle import ActorHandle
from runtime.names import service
from runtime.names.name_registry import NameRegistry
from runtime.names.service import ServiceAddress, ServiceServer
from transport import register_type

#: The environment variable naming a launch's name service (set by the launcher on every worker and command job).
#: JSON: the endpoint as that host reaches the launcher, and the service's CURVE public key.
NAME_SERVICE_ENV = "MILES_NAME_SERVICE"
CALL_DEADLINE_S = 10.0

_Text = Annotated[str, Field(max_length=1024)]
_Label = Annotated[str, Field(max_length=200)]


@register_type
class HandleState(BaseModel):
    """An actor handle's state (``ActorHandle.to_state``): what a registry entry holds, checked field by field
    (sizes bounded, no other field) where it arrives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: _Text
    name: _Text
    class_path: _Text
    boot_id: _Text | None
    host: _Text
    pid: int
    machine_id: _Text
    metrics_port: int | None
    server_key: _Text | None

    @classmethod
    def of(cls, state: dict[str, Any] | None) -> HandleState | None:
        """The state a registry holds (or ``to_state`` gives) as it travels; None stays None."""
        return cls(**state) if state is not None else None


class NameServiceUnavailable(RuntimeError):
    """The launch's name service did not answer (the launcher is gone, or unreachable from this host)."""


class NameService:
    """The registry as an actor serves it to the launch's processes (only these methods; ``put`` stays local).

    The launcher is the name authority of its launch and serves this in-process (runtime.names.service). Who may
    call it: any holder of the launch's CURVE client key, as any actor's public methods (with CURVE off, anyone who
    reaches its port). Entries hold a handle's state only (never a spawn token); what a caller can store is bounded
    (the registry's ``max_entry_bytes`` and ``max_names``), with errors that say so.
    """

    def __init__(self, *, registry: NameRegistry) -> None:
        self.registry = registry  # the launcher's own names go here directly (runtime.names.naming)

    def claim(
        self, namespace: _Label, name: _Label, state: HandleState, replacing: HandleState | None
    ) -> HandleState | None:
        """See :meth:`NameRegistry.claim`."""
        holder = self.registry.claim(namespace, name, dict(state), dict(replacing) if replacing else None)
        return HandleState.of(holder)

    def lookup(self, namespace: _Label, name: _Label) -> HandleState | None:
        """See :meth:`NameRegistry.lookup`."""
        return HandleState.of(self.registry.lookup(namespace, name))

    def forget(self, namespace: _Label, name: _Label, endpoint: _Text) -> bool:
        """See :meth:`NameRegistry.forget`."""
        return self.registry.forget(namespace, name, endpoint)

    def refresh(self, namespace: _Label, name: _Label, state: HandleState) -> bool:
        """See :meth:`NameRegistry.refresh`."""
        return self.registry.refresh(namespace, name, dict(state))

    def names(self, namespace: _Label) -> list[str]:
        """See :meth:`NameRegistry.names`."""
        return self.registry.names(namespace)


def address_from_env(text: str) -> ServiceAddress:
    """The address in a ``MILES_NAME_SERVICE`` value; ValueError saying what it should be otherwise."""
    address = ServiceAddress.from_json(text)
    if address is None:
        raise ValueError(
            f"{NAME_SERVICE_ENV}={text[:200]!r} is not a name service address: expected JSON "
            '{"endpoint": "tcp://host:port", "server_key": "<z85 key>" or null} (the launcher sets it)'
        )
    return address


def connect(address: ServiceAddress, *, deadline_s: float = CALL_DEADLINE_S) -> ActorHandle:
    """A handle to the launch's name service at ``address``: each call waits ``deadline_s`` and raises
    NameServiceUnavailable naming the endpoint when it does not get through."""

    def unavailable(method: str, exc: Exception) -> NameServiceUnavailable:
        return NameServiceUnavailable(
            f"the launch's name service at {address.endpoint} ({NAME_SERVICE_ENV}) did not answer {method} within "
            f"{deadline_s:g} s: is the launcher still running, and can this host reach it? ({exc})"
        )

    policy = CallPolicy(deadline_s=lambda method, kwargs: deadline_s, unavailable=unavailable)
    return service.connect(address, NameService, name="name-service", policy=policy)


_local: list[ServiceServer] = []  # registries this process serves; the newest open one holds this process's names
_handles: dict[str, ActorHandle] = {}
_lock = threading.Lock()


def serve(*, curve_dir: str | None, open_bind: bool, registry: NameRegistry | None = None) -> ServiceServer:
    """Serve a new registry from this process (a launcher), on every interface when ``open_bind`` (other hosts
    reach it) else on loopback, with CURVE when ``curve_dir`` names keys; from now on, until it is closed, it holds
    this process's names (``local_registry``)."""
    names = NameService(registry=registry if registry is not None else NameRegistry())
    served = service.serve(
        names, "name-service", curve_dir=curve_dir, open_bind=open_bind, what="the launch's name service"
    )
    with _lock:
        _local.append(served)
    return served


def local_server() -> ServiceServer | None:
    """The registry this process serves (the newest open one, if several), if any: it answers without a round
    trip (its ``instance`` is the :class:`NameService`)."""
    with _lock:
        _local[:] = [served for served in _local if not served.closed]
        return _local[-1] if _local else None


def local_registry() -> NameRegistry | None:
    """The registry of :func:`local_server`, if any."""
    served = local_server()
    return served.instance.registry if served is not None else None


def handle_from_env() -> ActorHandle | None:
    """The handle to the name service ``MILES_NAME_SERVICE`` names, if set (one per address in this process)."""
    text = os.environ.get(NAME_SERVICE_ENV, "")
    if not text:
        return None
    with _lock:
        handle = _handles.get(text)
        if handle is None:
            handle = _handles[text] = connect(address_from_env(text))
        return handle
