"""One object a process serves to the other processes of its launch as an actor, its address, and a handle to it.

What the launch's name service (:mod:`runtime.names.name_service`) and the launcher's provider API
(:mod:`launcher.launch.provider_service`) share.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from runtime.actor.actor_server import ActorServer
from runtime.caller.call_policy import CallPolicy
from runtime.caller.handle import ActorHandle
from runtime.core.metadata import class_info, class_path
from runtime.processes import driver_server
from transport import security
from transport.security import FROM_ENV, CurveDir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceAddress:
    """Where a process reaches a service: its endpoint as that process's host reaches the server, and its CURVE
    public key (z85; None: CURVE off). It travels as JSON (an environment variable, a constructor kwarg)."""

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
    instance: Any  # the object served (callers in this process may use it directly, without a round trip)
    closed: bool = field(default=False, init=False)

    @property
    def server_key(self) -> str | None:
        return self.server.server_keys.public.decode() if self.server.curve is not None else None

    def address(self, reach: str) -> ServiceAddress:
        """The service as a host that reaches this process at ``reach`` (an IP address) sees it."""
        shown = f"[{reach}]" if ":" in reach else reach
        return ServiceAddress(endpoint=f"tcp://{shown}:{self.port}", server_key=self.server_key)

    def close(self) -> None:
        """Stop serving (calls in flight are answered ActorDied)."""
        self.closed = True
        try:
            driver_server.stop_server(self.server, what=f"stop {self.what}")
        except Exception as exc:  # e.g. at exit, with the runtime's loop already stopped: nothing is served then
            log.warning("stopping %s on port %d: %s", self.what, self.port, exc)


def serve(instance: object, name: str, *, curve_dir: CurveDir, open_bind: bool, what: str) -> ServiceServer:
    """Serve ``instance`` as the actor ``name`` from this process, on every interface when ``open_bind`` (other
    hosts reach it) else on loopback, with CURVE when ``curve_dir`` names keys. ``what``: e.g. "the provider API".
    An in-process actor server (:func:`runtime.processes.driver_server.start_server`) serves its public methods and
    the built-ins, no control calls."""
    server = driver_server.start_server(
        instance, name, bind="tcp://0.0.0.0:0" if open_bind else "tcp://127.0.0.1:0",
        curve=security.resolve(curve_dir), what=f"start {what}",
    )  # fmt: skip
    return ServiceServer(server=server, port=int(server.address.rsplit(":", 1)[1]), what=what, instance=instance)


def connect(
    address: ServiceAddress, service: type[Any], *, name: str, policy: CallPolicy, curve_dir: CurveDir = FROM_ENV
) -> ActorHandle:
    """A handle to the service at ``address``: an instance of ``service`` (its class: arguments are checked against
    its hints before the wire, and the types they name registered) served as the actor ``name``, called with
    ``policy`` (a deadline per call; a call that does not get through raises the service's error, naming the
    endpoint and the fix). ``curve_dir``: the client keys (default ``MILES_CURVE_DIR``). Its connection opens on
    first call."""
    return ActorHandle(
        endpoint=address.endpoint, name=name, class_path=class_path(service), boot_id=None, host=address.endpoint,
        pid=0, info=class_info(service), server_key=address.server_key, curve_dir=curve_dir, policy=policy,
    )  # fmt: skip
