"""Named actors: ``spawn(..., name="x", namespace="ns")`` and ``get_actor("x", namespace="ns")``.

A name is shared by a whole launch or driver tree: ``get_actor`` works inside any of its actors with no setup.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from runtime.caller.client import ClientRuntime
from runtime.caller.handle import ActorHandle
from runtime.core.errors import ActorNotFound
from runtime.names import name_service
from runtime.names.name_files import REGISTRY_ENV, FileRegistry, registry_dir
from runtime.names.name_registry import NameRegistry, check_key
from runtime.names.name_service import NAME_SERVICE_ENV, HandleState

log = logging.getLogger(__name__)

# ``namespace`` scopes names (as Ray's): the same name in two namespaces is two actors. The default namespace is
# the one the launcher's cells are in.
DEFAULT_NAMESPACE = ""

_names: dict[tuple[str, str], ActorHandle] = {}  # the handles this process registered (names live here too)
_lock = threading.Lock()
_background: set[asyncio.Task[Any]] = set()  # forget/refresh sent from the loop thread, kept until done

#: This process's registry: the one it serves (a launcher), a handle to the launch's name service, or its tree's
#: files. The three answer the same methods; the handle's answers are calls to await (or ``.result()``).
#: In a launch (``miles-launch``) every worker, command job and actor they spawn finds the name service in
#: ``MILES_NAME_SERVICE``, so a name is one name on every host; in a plain driver's tree the first spawning
#: process makes a registry directory and hands it down (runtime.names.name_files; ``MILES_ACTOR_REGISTRY``).
Backend = NameRegistry | ActorHandle | FileRegistry


def _backend() -> Backend:
    """This process's registry: the one it serves (a launcher), the launch's service, else its tree's files."""
    registry = name_service.local_registry()
    if registry is not None:
        return registry
    handle = name_service.handle_from_env()
    if handle is not None:
        return handle
    return FileRegistry(registry_dir())


def _entry(answer: Any) -> Any:
    """An answer as the registries give it: a HandleState (the name service's) as the dict a registry holds."""
    return answer.model_dump() if isinstance(answer, HandleState) else answer


def _sent(backend: Backend, state: dict[str, Any] | None) -> Any:
    """A handle's state as ``backend`` takes it: a HandleState for the name service (checked before the wire)."""
    return HandleState.of(state) if isinstance(backend, ActorHandle) else state


async def _ask(ask: Callable[[Backend], Any]) -> Any:
    """``ask(registry)`` on this process's registry (awaited when it is the launch's name service)."""
    backend = _backend()
    answer = ask(backend)
    return _entry(await answer) if isinstance(backend, ActorHandle) else answer


def _ask_now(ask: Callable[[Backend], Any], *, what: str) -> Any:
    """``ask(registry)``, blocking; with a name service refused on the runtime's event loop thread (it would wait
    on itself): ``what`` names the caller and its async variant in that error."""
    backend = _backend()
    if not isinstance(backend, ActorHandle):
        return ask(backend)
    if ClientRuntime.get().on_loop_thread():
        raise RuntimeError(
            f"{what} asks the launch's name service and would block the runtime's event loop it runs on; "
            "use the async variant there (await it)"
        )
    return _entry(ask(backend).result())


def _ask_soon(ask: Callable[[Backend], Any], *, what: str) -> None:
    """``ask`` now, or, on the runtime's loop thread with a name service, as a task of that loop (it must not
    block): an update whose failure is only logged (forget and refresh must not fail a kill or a restart)."""
    runtime = ClientRuntime.get()
    if not runtime.on_loop_thread() or not isinstance(_backend(), ActorHandle):
        try:
            _ask_now(ask, what=what)
        except Exception as exc:
            log.warning("%s: %s", what, exc)
        return

    async def send() -> None:
        try:
            await _ask(ask)
        except Exception as exc:  # nobody awaits it: say so in the log
            log.warning("%s: %s", what, exc)

    task = asyncio.ensure_future(send())
    _background.add(task)
    task.add_done_callback(_background.discard)


def child_env() -> dict[str, str]:
    """What a process this one spawns needs to share its names (its own spawns and ``get_actor``)."""
    served = name_service.local_server()
    if served is not None:
        return {NAME_SERVICE_ENV: served.address("127.0.0.1").to_json()}  # spawned here: on this host
    handle = name_service.handle_from_env()
    if handle is not None:
        return {NAME_SERVICE_ENV: os.environ[NAME_SERVICE_ENV]}
    return {REGISTRY_ENV: str(registry_dir())}


def _remember(name: str, namespace: str, handle: ActorHandle) -> None:
    """Hold ``handle`` under the name here; killing it forgets its names (the hook the handle calls then)."""
    with _lock:
        _names[(namespace, name)] = handle
    handle.when_killed(forget)


def local_handle(name: str, namespace: str = DEFAULT_NAMESPACE) -> ActorHandle | None:
    """The live handle this process registered under the name, if any."""
    with _lock:
        handle = _names.get((namespace, name))
    return handle if handle is not None and handle.dead is None else None


async def registered_state_async(name: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any] | None:
    """The registry entry under the name (a handle's state), if any."""
    return await _ask(lambda registry: registry.lookup(namespace, name))


async def claim_async(
    name: str, handle: ActorHandle, namespace: str, *, replacing: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Register ``handle`` under the name unless another actor holds it; returns that holder's entry (the claim then
    failed). ``replacing``: an entry its caller found dead; it is taken over only if it is still the one there.
    A name belongs to one live actor: ``spawn`` under a live one's name raises ValueError (``get_if_exists=True``
    returns it instead); a dead actor's name may be taken again (runtime.processes.spawn_names asks the holder)."""
    state = handle.to_state()
    holder = await _ask(lambda r: r.claim(namespace, name, _sent(r, state), _sent(r, replacing)))
    if holder is None:
        _remember(name, namespace, handle)
    return holder


async def register_name_async(name: str, handle: ActorHandle, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Record ``handle`` under the name, whoever held it (``attach``: launchers name their cells; ``spawn``
    claims names with checks). With a name service this is a claim (only the launcher overwrites names)."""
    check_key(namespace, name)
    backend = _backend()
    if isinstance(backend, ActorHandle):
        holder = await backend.claim(namespace, name, HandleState.of(handle.to_state()), None)
        if holder is not None:
            raise ValueError(f"actor name {name!r} is taken by the actor at {holder.endpoint}")
    else:
        backend.put(namespace, name, handle.to_state())
    _remember(name, namespace, handle)


def _keys_of(handle: ActorHandle, *, drop: bool) -> list[tuple[str, str]]:
    with _lock:
        keys = [key for key, held in _names.items() if held is handle]
        if drop:
            for key in keys:
                del _names[key]
    return keys


def refresh(handle: ActorHandle) -> None:
    """Rewrite the entries of ``handle`` (it restarted: a new boot id), so ``get_actor`` reaches the new one."""
    state = handle.to_state()
    for namespace, name in _keys_of(handle, drop=False):
        ask = functools.partial(_refresh, namespace, name, state)
        _ask_soon(ask, what=f"refresh the name {name!r}")


def forget(handle: ActorHandle) -> None:
    """Drop the names of ``handle`` (it was killed), here and in the registry where they still name it."""
    for namespace, name in _keys_of(handle, drop=True):
        ask = functools.partial(_forget, namespace, name, handle.endpoint)
        _ask_soon(ask, what=f"forget the name {name!r}")


def _refresh(namespace: str, name: str, state: dict[str, Any], registry: Backend) -> Any:
    return registry.refresh(namespace, name, _sent(registry, state))


def _forget(namespace: str, name: str, endpoint: str, registry: Backend) -> Any:
    return registry.forget(namespace, name, endpoint)


def _found(name: str, namespace: str, state: dict[str, Any] | None, known: list[str]) -> ActorHandle:
    if state is not None:
        try:
            return ActorHandle(**state)
        except TypeError:  # not a handle's state: a corrupt entry
            pass
    known = sorted(set(known) | {n for ns, n in _names if ns == namespace})
    where = f"namespace {namespace!r}" if namespace else "the default namespace"
    raise ActorNotFound(f"no actor named {name!r} in {where}; known names there: {known or 'none'}")


def get_actor(name: str, namespace: str = DEFAULT_NAMESPACE) -> ActorHandle:
    """The actor registered under the name in ``namespace`` (as Ray's ``ray.get_actor``); raises ActorNotFound
    (a KeyError and a ValueError) listing the names known there. On the runtime's loop thread: ``get_actor_async``.
    An entry holds no secret (no spawn token): the handle can call methods, not kill the actor.
    """
    check_key(namespace, name)
    handle = local_handle(name, namespace)
    if handle is not None:
        return handle
    what = f"get_actor({name!r}) (use `await runtime.names.naming.get_actor_async(...)` there)"
    state = _ask_now(lambda registry: registry.lookup(namespace, name), what=what)
    known = _ask_now(lambda registry: registry.names(namespace), what=what) if state is None else []
    return _found(name, namespace, state, known)


async def get_actor_async(name: str, namespace: str = DEFAULT_NAMESPACE) -> ActorHandle:
    """:func:`get_actor` for async code (on any event loop, also the runtime's own)."""
    check_key(namespace, name)
    handle = local_handle(name, namespace)
    if handle is not None:
        return handle
    state = await _ask(lambda registry: registry.lookup(namespace, name))
    known = await _ask(lambda registry: registry.names(namespace)) if state is None else []
    return _found(name, namespace, state, known)


def list_names(namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """The names registered in ``namespace`` (Ray's ``ray.util.list_named_actors``), sorted."""
    if namespace:
        check_key(namespace, "x")
    known = _ask_now(lambda registry: registry.names(namespace), what="list the actor names")
    return sorted(set(known) | {n for ns, n in _names if ns == namespace})
