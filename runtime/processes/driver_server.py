"""In-process actor servers of a process that is not an actor (a driver script, a launcher): a driver's object refs
(:mod:`runtime.objects.object_owner`) and a launch's services (:mod:`runtime.names.service`: the name registry, the
provider API)."""

from __future__ import annotations

import os
from typing import Any

from runtime.actor.actor_server import ActorServer
from runtime.caller.client import ClientRuntime
from runtime.core.metadata import class_info
from transport.security import CurveConfig

_START_DEADLINE_S = 10.0
_STOP_DEADLINE_S = 10.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_WILDCARDS = ("0.0.0.0", "*", "[::]", "::")


def bind_address(curve_on: bool) -> str:
    """Where a server of this process (or an actor it spawns) listens: every interface when this host is named for
    other hosts (``MILES_ADVERTISE_HOST``, set by launchers, and not loopback) with CURVE on, as actors' open
    binds; loopback otherwise."""
    advertised = os.environ.get("MILES_ADVERTISE_HOST", "")
    return "tcp://0.0.0.0:0" if curve_on and advertised and advertised not in _LOOPBACK else "tcp://127.0.0.1:0"


def advertised(address: str) -> str:
    """``address`` as other hosts reach it: a wildcard bind is named by ``MILES_ADVERTISE_HOST``."""
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    named = os.environ.get("MILES_ADVERTISE_HOST")
    return f"{scheme}://{named}:{port}" if host in _WILDCARDS and named else address


def start_server(instance: Any, name: str, *, bind: str, curve: CurveConfig | None, what: str) -> ActorServer:
    """Serve ``instance``'s public methods (and the built-ins) at ``bind`` from this process, on the runtime's
    loop; only clients holding ``curve``'s client keys get through (None: plain TCP). ``what`` names it in errors.

    It serves the public methods and the built-ins (``__object_get__``/``__object_free__``, health), nothing else;
    it holds no spawn token, so no control call is accepted."""
    runtime = ClientRuntime.get()
    server = ActorServer(bind=bind, curve=curve, context=runtime.context)

    async def start() -> None:
        await server.start(serves_actor=False)
        server.configure(class_info(type(instance)), instance, name, None)

    runtime.run(start(), timeout_s=_START_DEADLINE_S, what=what)
    return server


def stop_server(server: ActorServer, *, what: str) -> None:
    """Stop a server :func:`start_server` started (calls in flight are answered ActorDied)."""
    ClientRuntime.get().run(server.stop(), timeout_s=_STOP_DEADLINE_S, what=what)
