"""Opening the ZeroMQ sockets behind the endpoints: a bound ROUTER (an actor) and a connected DEALER (a caller).

With a :class:`~transport.security.CurveConfig`, the ROUTER admits only the cluster's clients, and the DEALER
proves it is one.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable

import zmq

from transport import local_twin, security
from transport.codec import Buffer
from transport.direct_links import DirectConnector, DirectListener
from transport.endpoints import ZmqEndpoint
from transport.link_watch import LinkChange, LinkWatch
from transport.peer_queues import DEFAULT_MAX_QUEUED_PER_PEER
from transport.security import CurveConfig, ServerKeys
from transport.zap_gate import ZapGate, default_max_connections

log = logging.getLogger(__name__)

_HIGH_WATER_MARK = 100_000


def shared_context() -> zmq.Context:
    """This process's ZeroMQ context, allowed as many sockets as the process may open files.

    libzmq's default of 1023 sockets per context is reached by a long-lived driver that has spawned and called
    about a thousand actors (a connection each), after which every new socket fails with EMFILE.
    """
    context = zmq.Context.instance()
    if context.get(zmq.MAX_SOCKETS) <= 1024:  # set before the context's first socket: later it is ignored
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = context.get(zmq.SOCKET_LIMIT)
        context.set(zmq.MAX_SOCKETS, max(1023, min(limit, soft if soft != resource.RLIM_INFINITY else limit)))
    return context


def _tune(socket: zmq.Socket, *, max_message_bytes: int | None) -> None:
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SNDHWM, _HIGH_WATER_MARK)
    socket.setsockopt(zmq.RCVHWM, _HIGH_WATER_MARK)
    socket.setsockopt(zmq.HEARTBEAT_IVL, 1000)
    socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
    socket.setsockopt(zmq.HEARTBEAT_TTL, 10000)
    if max_message_bytes is not None:
        socket.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)


def router(
    context: zmq.Context,
    address: str,
    on_frames: Callable[[list[Buffer]], None],
    *,
    max_message_bytes: int,
    curve: CurveConfig | None = None,
    server_keys: ServerKeys | None = None,
    max_connections: int | None = None,
) -> tuple[ZmqEndpoint, str]:
    """Bind a ROUTER socket; returns the endpoint and the address actually bound (port 0 resolved).

    With ``curve``, the socket proves it holds ``server_keys`` (the actor's own) and only clients holding an
    authorised client key get through the handshake. A peer that stops reading holds up no other (per-peer
    queues, see :mod:`transport.endpoints`). Past ``max_connections`` open connections (default:
    ``MILES_MAX_CONNECTIONS``, 10000, within the open-file limit) new ones are refused until some close.
    """
    socket = context.socket(zmq.ROUTER)
    _tune(socket, max_message_bytes=max_message_bytes)
    socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a reconnecting client keeps its routing id
    socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sends to a vanished peer fail visibly instead of silently
    gate, domain = ZapGate.of(context), None
    limit = max_connections or default_max_connections()
    try:
        if curve is not None:
            if server_keys is None:
                raise ValueError("a CURVE server needs its own keypair (server_keys)")
            security.secure_server(socket, server_keys)
        domain = gate.guard(
            socket,
            max_connections=limit,
            curve_keys=curve.authorized_clients if curve is not None else None,
        )
        socket.bind(address)
    except zmq.ZMQError as exc:
        socket.close(linger=0)
        if domain is not None:
            gate.release(domain)
        raise OSError(f"cannot bind {address}: {exc}") from exc
    bound = socket.getsockopt_string(zmq.LAST_ENDPOINT)
    # Same-host calls skip TCP (the twin) and, without CURVE, ZeroMQ's I/O threads too (direct links).
    twin = local_twin.name_for(bound) if local_twin.enabled() else None
    if twin is not None:
        try:
            socket.bind(twin)
        except zmq.ZMQError as exc:  # e.g. a dying predecessor still holds it: same-host callers use TCP
            log.warning("%s: same-host socket %s not bound (%s); local callers use TCP", bound, twin, exc)
            twin = None
    has_room = lambda: gate.counts(domain)["open"] < limit  # noqa: E731
    direct = _listen_direct(twin, max_message_bytes, limit, has_room) if twin and curve is None else None
    name = f"router {bound}" + (f" + {twin}" if twin else "")
    endpoint = ZmqEndpoint(
        socket,
        on_frames,
        name=name,
        address=bound,
        on_close=lambda: gate.release(domain),
        connection_counts=lambda: gate.counts(domain),
        max_queued_per_peer=DEFAULT_MAX_QUEUED_PER_PEER,
        direct=direct,
    )
    return endpoint, bound


def _listen_direct(
    twin: str, max_message_bytes: int, max_connections: int, has_room: Callable[[], bool]
) -> DirectListener | None:
    """Bind the direct-link listener beside ``twin`` (None where direct links are off or the name is taken); a
    link is taken only while the ZAP gate admits connections (``has_room``), so the limit holds for both."""
    name = local_twin.direct_name(twin)
    if name is None or not local_twin.direct_enabled():
        return None
    try:
        return DirectListener.bind(
            name, max_links=max_connections, has_room=has_room, max_message_bytes=max_message_bytes,
            max_queued=_HIGH_WATER_MARK + DEFAULT_MAX_QUEUED_PER_PEER,  # what ZeroMQ would hold for one peer
        )  # fmt: skip
    except OSError as exc:
        log.warning("%s: direct-link socket @%s not bound (%s); local callers use ZeroMQ", twin, name, exc)
        return None


def dealer(
    context: zmq.Context,
    address: str,
    on_frames: Callable[[list[Buffer]], None],
    *,
    routing_id: bytes,
    curve: CurveConfig | None = None,
    server_key: bytes | None = None,
    on_handshake_failure: Callable[[str], None] | None = None,
    on_link: Callable[[LinkChange, str], None] | None = None,
    peer_known_up: bool = False,
) -> ZmqEndpoint:
    """Connect a DEALER socket with a stable routing id (so the server can push to it after a reconnect).

    An actor on this host (same network namespace) is reached through its same-host twin socket when it has
    one; ``endpoint.address`` tells which address the socket is connected to.

    With ``curve``, the socket authenticates with the cluster's client key and checks that the actor holds the
    secret of ``server_key`` (its public key).
    ``on_handshake_failure(reason)`` runs on the loop when handshakes fail for good (a refused key, another
    cluster's server key, CURVE on one side only): reconnecting would not help.
    ``on_link(change, reason)`` runs on the loop when the link drops, comes back, or the peer's listener is gone
    (:mod:`transport.link_watch`; ``peer_known_up``: it was listening when we were told of it).
    """
    socket = context.socket(zmq.DEALER)
    _tune(socket, max_message_bytes=None)
    socket.setsockopt(zmq.ROUTING_ID, routing_id)
    socket.setsockopt(zmq.RECONNECT_IVL, 100)
    socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    if curve is not None:
        if server_key is None:
            socket.close(linger=0)
            raise ValueError(f"a CURVE connection to {address} needs the actor's public key (server_key)")
        security.secure_client(socket, curve, server_key)
    target = (local_twin.find(address) if local_twin.enabled() else None) or address
    direct_name = local_twin.direct_name(target) if curve is None and local_twin.direct_enabled() else None
    direct = DirectConnector(direct_name, routing_id, max_message_bytes=None, max_queued=None) if direct_name else None
    endpoint = ZmqEndpoint(
        socket,
        on_frames,
        name=f"dealer {address}" + (f" via {target}" if target != address else ""),
        address=target,
        on_handshake_failure=on_handshake_failure,
        curve=curve is not None,
        on_link=on_link,
        link_watch=LinkWatch(known_up=peer_known_up) if on_link is not None else None,
        direct=direct,
    )
    socket.connect(target)
    return endpoint
