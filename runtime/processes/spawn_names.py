"""Names for ``spawn``: refuse a name a live actor holds, or hand that actor back (``get_if_exists=True``)."""

from __future__ import annotations

import logging
from typing import Any

from runtime.caller.handle import ActorHandle
from runtime.names import naming
from transport.security import CurveDir

log = logging.getLogger(__name__)

_PROBE_DEADLINE_S = 3.0


async def _answers(state: dict[str, Any], curve_dir: CurveDir) -> bool:
    """Whether the actor of a registry entry is alive and is the one the entry names."""
    try:
        probe = ActorHandle(**{**state, "boot_id": None}, curve_dir=curve_dir)
        health = await probe.method("__health__").options(deadline_s=_PROBE_DEADLINE_S)()
    except Exception as exc:  # gone, unreachable, or not a handle's state: stale either way
        log.info("actor name %r: its registered actor does not answer (%s); the name is free", state.get("name"), exc)
        return False
    return bool(health.get("constructed")) and health.get("name") == state.get("name")


async def live_holder(
    name: str, namespace: str, curve_dir: CurveDir
) -> tuple[ActorHandle | None, dict[str, Any] | None]:
    """(the live actor holding the name, None) or (None, the stale entry found there, if any).

    Whether an actor holds its name is asked of the actor itself: a registry entry whose actor does not answer (or
    answers as another actor) is stale, and its name may be taken again (:mod:`runtime.names.naming`); the same
    with every registry (a launch's name service, a driver's directory)."""
    local = naming.local_handle(name, namespace)
    if local is not None:
        return local, None
    state = await naming.registered_state_async(name, namespace)
    if state is None:
        return None, None
    if await _answers(state, curve_dir):
        return ActorHandle(**state, curve_dir=curve_dir), None
    return None, state


def taken(name: str, namespace: str, holder: dict[str, Any] | ActorHandle) -> ValueError:
    endpoint = holder.endpoint if isinstance(holder, ActorHandle) else holder.get("endpoint")
    where = f" in namespace {namespace!r}" if namespace else ""
    return ValueError(
        f"actor name {name!r}{where} is taken by a live actor at {endpoint}; pick another name, kill that actor, "
        "or pass get_if_exists=True to get a handle to it"
    )
