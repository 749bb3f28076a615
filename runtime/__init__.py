"""The actor model: spawn a class in another process, call its methods, survive failures.

Public surface (plus ``runtime.metrics``: actor metrics on /metrics; ``runtime.internals``: the launcher's plumbing;
``MILES_CURVE_DIR``: CURVE on every socket, :mod:`transport.security`)::

    from runtime import spawn, method, ActorGroup

    class Counter:
        def __init__(self, *, start: int = 0) -> None: ...     # constructors are keyword-only
        def add(self, n: int) -> int: ...                      # sync: runs on the default lane, in order
        async def fetch(self, url: str) -> str: ...            # async: a task on the actor's loop
        @method(control_plane=True)
        def ping(self) -> str: ...                             # answers even while `add` blocks

    counter = spawn(Counter, kwargs={"start": 1}, name="counter")
    counter.add(2).result()          # plain code
    await counter.add(2)             # async code
    counter.add.options(deadline_s=5)(3)
    for item in counter.items(10): ...  # a generator method streams: a StreamingCall (runtime.caller.stream_call)

    spawn(Counter, max_restarts=3)   # restarted on the same endpoint, constructor re-run (runtime.processes.supervisor)

    exit_actor()                     # inside a method: leave on purpose (exit code 0, not restarted); calls in
                                     # flight get ActorDied (runtime.actor.actor_exit: SystemExit and other exits)

Coming from Ray (names kept so code ports line by line; README "Coming from Ray")::

    spawn(Cls, kwargs=..., name="x", namespace="ns", get_if_exists=True, lifetime="detached",
          max_restarts=-1, max_concurrency=8)            # Cls.options(...).remote(...)
    handle.m.options(concurrency_group="io")(...)        # handle.m.options(concurrency_group=...).remote(...)
    call.result(timeout) / await call                    # ray.get / await
    wait(calls, num_returns=1, timeout=None)             # ray.wait
    call.cancel()                                        # ray.cancel
    put(value) -> ObjectRef; ref.get()                   # ray.put / ray.get (any process)
    put(tensors, transport="collective") -> TensorRef    # ray.put(x, _tensor_transport="gloo") (runtime.collective)
    ref.get(into=buffers); collective.wait_freed([ref])  # set_target_for_ref / wait_tensor_freed
    get_actor("x", namespace="ns")                       # ray.get_actor
    handle.kill(no_restart=False)                        # ray.kill
    exit_actor()                                         # ray.actor.exit_actor
    import runtime.ray_compat as ray                     # or: Ray's own API, unchanged (runtime/ray_compat)
"""

from runtime.actor.actor_exit import exit_actor
from runtime.caller.group import ActorGroup, GroupCall, gather
from runtime.caller.handle import ActorHandle, PendingCall
from runtime.caller.retry import retry_until_deadline, retry_until_deadline_async
from runtime.caller.stream_call import StreamingCall
from runtime.caller.waiting import wait, wait_async
from runtime.core.errors import (
    ActorDefinitionError,
    ActorDied,
    ActorError,
    ActorNotFound,
    ActorRestarted,
    CallCancelled,
    CallRejected,
    DeadlineExceeded,
    NotDelivered,
    OverCapacity,
    RemoteError,  # also an instance of the remote exception's class when loaded here (except ValueError catches it)
)
from runtime.core.metadata import method
from runtime.names.naming import get_actor, get_actor_async
from runtime.objects.object_refs import ObjectRef
from runtime.objects.tensor_put import put
from runtime.processes.spawn import connect, connect_async, spawn, spawn_async, spawn_many
from runtime.tensors.tensor_refs import TensorRef
from transport import register_type
from transport.timeouts import within

__all__ = [
    "ActorDefinitionError",
    "ActorDied",
    "ActorError",
    "ActorGroup",
    "ActorHandle",
    "ActorNotFound",
    "ActorRestarted",
    "CallCancelled",
    "CallRejected",
    "DeadlineExceeded",
    "GroupCall",
    "NotDelivered",
    "ObjectRef",
    "OverCapacity",
    "PendingCall",
    "RemoteError",
    "StreamingCall",
    "TensorRef",
    "connect",
    "connect_async",
    "exit_actor",
    "gather",
    "get_actor",
    "get_actor_async",
    "method",
    "put",
    "register_type",
    "retry_until_deadline",
    "retry_until_deadline_async",
    "spawn",
    "spawn_async",
    "spawn_many",
    "wait",
    "wait_async",
    "within",
]
