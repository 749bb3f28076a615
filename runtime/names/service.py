"""One object a process serves to the other processes of its launch, its address, and the client that calls it.

What the launch's name service (:mod:`runtime.names.name_service`) and the launcher's provider API
(:mod:`launcher.launch.provider_service`) share. The object is served from an in-process actor server
(:func:`runtime.processes.driver_server.start_server`: its public methods and the built-ins, no control calls) with the
launch's CURVE keys, on every interface when other hosts must reach it, else on loopback. A process finds it by a
:class:`ServiceAddress` (its endpoint as that process's host reaches the server, and the server's CURVE public key),
which travels as JSON (an environment variable, a constructor kwarg). A :class:`ServiceClient` calls it with a
deadline per call; a call that does not get through (ActorDied, DeadlineExceeded, NotDelivered) raises the error
its service makes of it (the error factory), which names the endpoint and the call. The service's own refusals
(RemoteError, CallRejected) pass as they are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.actor.actor_server import ActorServer
from runtime.caller.handle import ActorHandle
from runtime.core.errors import ActorDied, DeadlineExceeded, NotDelivered, RemoteError
from runtime.core.metadata import class_info, class_path
from runtime.processes import driver_server
from transport import security
from transport.security import FROM_ENV, CurveDir

log = logging.getLogger(__name__)

#: What a call that did not get through raises (the client turns it into its service's error).
_NOT_ANSWERED = (ActorDied, DeadlineExceeded, NotDelivered)

#: ``deadline_s(op, kwargs)``: the deadline (s) of a call of ``op`` with these keyword arguments.
DeadlineOf = Callable[[str, dict[str, Any]], float]
#: ``unavailable(op, exc)``: the error a call of ``op`` that did not get through (``exc``) raises.
UnavailableError = Callable[[str, Exception], Exception]


@dataclass(frozen=True)
class ServiceAddress:
    """Where a process reaches a service: its endpoint and its CURVE public key (z85; None: CURVE off)."""

    endpoint: str
    server_key: str | None

    def as_dict(self) -> dict[str, Any]:
        """``{"endpoint", "server_key"}``, as it travels (JSON, msgpack)."""
        return {"endpoint": self.endpoint, "server_key": self.server_key}

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

    @classmethod
    def from_dict(cls, data: object) -> ServiceAddress | None:
        """The address ``{"endpoint": "tcp://host:port", "server_key": key or None}`` holds; None if it holds none."""
        if not isinstance(data, dict) or "server_key" not in data:  # null, never absent: CURVE off is said so
            return None
        endpoint, key = data.get("endpoint"), data.get("server_key")
        if not isinstance(endpoint, str) or not endpoint.startswith("tcp://") or not isinstance(key, str | None):
            return None
        return cls(endpoint=endpoint, server_key=key)

    @classmethod
    def from_json(cls, text: str) -> ServiceAddress | None:
        """The address :meth:`to_json` wrote; None if ``text`` is not one."""
        try:
            return cls.from_dict(json.loads(text))
        except ValueError:
            return None


@dataclass
class ServiceServer:
    """One object this process serves (see :func:`serve`); ``what`` names it in errors and logs."""

    server: ActorServer
    port: int
    what: str

    @property
    def server_key(self) -> str | None:
        return self.server.server_keys.public.decode() if self.server.curve is not None else None

    def address(self, reach: str) -> ServiceAddress:
        """The service as a host that reaches this process at ``reach`` (an IP address) sees it."""
        shown = f"[{reach}]" if ":" in reach else reach
        return ServiceAddress(endpoint=f"tcp://{shown}:{self.port}", server_key=self.server_key)

    def close(self) -> None:
        """Stop serving (calls in flight are answered ActorDied)."""
        try:
            driver_server.stop_server(self.server, what=f"stop {self.what}")
        except Exception as exc:  # e.g. at exit, with the runtime's loop already stopped: nothing is served then
            log.warning("stopping %s on port %d: %s", self.what, self.port, exc)


def serve(instance: object, name: str, *, curve_dir: CurveDir, open_bind: bool, what: str) -> ServiceServer:
    """Serve ``instance`` as the actor ``name`` from this process, on every interface when ``open_bind`` (other
    hosts reach it) else on loopback, with CURVE when ``curve_dir`` names keys. ``what``: e.g. "the provider API"."""
    server = driver_server.start_server(
        instance, name, bind="tcp://0.0.0.0:0" if open_bind else "tcp://127.0.0.1:0",
        curve=security.resolve(curve_dir), what=f"start {what}",
    )  # fmt: skip
    return ServiceServer(server=server, port=int(server.address.rsplit(":", 1)[1]), what=what)


class ServiceClient:
    """Calls the service at ``address`` as an instance of ``service`` (its class: arguments are checked against its
    hints before the wire) named ``name``, with ``deadline_s(op, kwargs)`` per call; a call that does not get
    through raises ``unavailable(op, exc)``. ``curve_dir``: the client keys (default ``MILES_CURVE_DIR``)."""

    def __init__(
        self,
        address: ServiceAddress,
        service: type[Any],
        *,
        name: str,
        deadline_s: DeadlineOf,
        unavailable: UnavailableError,
        curve_dir: CurveDir = FROM_ENV,
    ) -> None:
        self.address = address
        self._service = service
        self._name = name
        self._deadline_s = deadline_s
        self._unavailable = unavailable
        self._curve_dir = curve_dir
        self._handle: ActorHandle | None = None

    @property
    def handle(self) -> ActorHandle:
        """The service's handle, made on first use (a client that is only passed along costs nothing)."""
        if self._handle is None:
            self._handle = ActorHandle(
                endpoint=self.address.endpoint, name=self._name, class_path=class_path(self._service), boot_id=None,
                host=self.address.endpoint, pid=0, info=class_info(self._service), server_key=self.address.server_key,
                curve_dir=self._curve_dir,
            )  # fmt: skip
        return self._handle

    async def call_async(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """``op(*args, **kwargs)`` on the service (await it on any loop)."""
        try:
            return await self.handle.method(op).options(deadline_s=self._deadline_s(op, kwargs))(*args, **kwargs)
        except RemoteError:
            raise
        except _NOT_ANSWERED as exc:
            raise self._unavailable(op, exc) from None

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """``op(*args, **kwargs)`` on the service, blocking (not on the runtime's event loop thread)."""
        deadline = self._deadline_s(op, kwargs)
        try:
            return self.handle.method(op).options(deadline_s=deadline)(*args, **kwargs).result(deadline + 2)
        except RemoteError:
            raise
        except _NOT_ANSWERED as exc:
            raise self._unavailable(op, exc) from None
