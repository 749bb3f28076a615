"""Serving this process's object refs when it is not an actor (a driver script, a launcher's job).

``runtime.put`` in such a process starts, once, an actor server of its own on the runtime's loop: it holds no
actor class of the user's, answers only the built-in methods (``__object_get__``/``__object_free__``, health), and
lives as long as the process. It binds loopback, or every interface when ``MILES_ADVERTISE_HOST`` names this host
for other hosts (with CURVE on only, as actors' open binds). It holds no spawn token: no control call is accepted.
"""

from __future__ import annotations

import os
import threading

from runtime import object_refs
from runtime.actor_server import ActorServer
from runtime.client import ClientRuntime
from runtime.metadata import class_info
from transport import security

_lock = threading.Lock()
_START_DEADLINE_S = 10.0


class DriverObjects:
    """The 'actor' a driver's object refs name as their owner: it has no methods of its own."""


def _bind_address(curve_on: bool) -> str:
    return "tcp://0.0.0.0:0" if curve_on and os.environ.get("MILES_ADVERTISE_HOST") else "tcp://127.0.0.1:0"


def ensure_serving() -> None:
    """Start this process's object-ref server unless it (or an actor server) already serves."""
    with _lock:
        if object_refs.serving():
            return
        runtime = ClientRuntime.get()
        curve = security.resolve()
        server = ActorServer(bind=_bind_address(curve is not None), curve=curve, context=runtime.context)

        async def start() -> None:
            await server.start(serves_actor=False)
            server.configure(class_info(DriverObjects), DriverObjects(), f"driver-{os.getpid()}", None)

        runtime.run(start(), timeout_s=_START_DEADLINE_S, what="start serving this process's object refs")
        object_refs.bind_server(server)
