"""Moving a device-resident ref's tensors, point to point over its collective group: both ends (Ray Direct
Transport's ``__ray_send__``/``__ray_recv__``, python/ray/experimental/collective/collective_tensor_transport.py)."""

from __future__ import annotations

import concurrent.futures
import datetime
import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

from runtime.actor import builtin_methods
from runtime.actor.builtin_methods import Builtin, without_server
from runtime.actor.server_lanes import COLLECTIVE_LANE
from runtime.caller.handle import ActorHandle
from runtime.core.errors import ActorDied, ActorError, DeadlineExceeded, RemoteError
from runtime.tensors import collective_groups, tensor_specs
from runtime.tensors.collective_groups import CollectiveError, GroupMember
from runtime.tensors.tensor_specs import TensorSpec
from runtime.tensors.tensor_store import store

if TYPE_CHECKING:
    from runtime.caller.handle import PendingCall

log = logging.getLogger(__name__)

PROBE_S = 2.0
_REFUSALS: dict[str, type[Exception]] = {
    "builtins.KeyError": KeyError, "builtins.ValueError": ValueError, "builtins.TypeError": TypeError,
    f"{CollectiveError.__module__}.{CollectiveError.__qualname__}": CollectiveError,
}  # fmt: skip
MAX_TAG = 2**31 - 1


def device_of(entry: GroupMember) -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if entry.backend == "nccl" else torch.device("cpu")


def receive(
    owner: ActorHandle,
    key: str,
    group: str,
    owner_rank: int,
    specs: Any,
    into: Any,
    timeout_s: float,
    max_bytes: int = tensor_specs.MAX_ALLOCATE_BYTES,
) -> dict[str, Any]:
    """Pull the ref's tensors into ``into`` (checked first) or fresh buffers; returns them by name.

    Posts one ``recv`` per tensor from the owner's rank under a fresh tag, then calls the owner's
    ``__tensor_send__`` (:func:`serve_send`). Only the call's few arguments cross the actor transport; the bytes go
    straight from the stored tensors into the receiver's buffers. Every wait has a deadline."""
    checked = tensor_specs.checked_specs(specs)
    if not isinstance(owner, ActorHandle) or not isinstance(key, str) or len(key) != 32:
        raise ValueError(f"malformed tensor ref (owner {type(owner).__name__}, key {str(key)[:40]!r})")
    if not isinstance(owner_rank, int) or isinstance(owner_rank, bool):
        raise ValueError(f"malformed tensor ref {key}: owner rank {owner_rank!r}")
    what = f"tensor ref {key} of {owner.actor_name}"
    entry = collective_groups.member(group)
    device = device_of(entry)
    buffers = tensor_specs.allocate(checked, device, max_bytes, what) if into is None else tensor_specs.match_into(
        checked, into, device, what
    )  # fmt: skip
    if owner_rank == entry.rank:  # the owner reads its own ref: no transfer
        held = store.get(key).tensors
        if into is None:
            return dict(held)
        for name, tensor in held.items():
            buffers[name].copy_(tensor)
        return buffers
    if not 0 <= owner_rank < entry.world_size:
        raise ValueError(f"{what}: owner rank {owner_rank} is outside group {group!r} of size {entry.world_size}")
    tag = 1 + secrets.randbelow(MAX_TAG - 1)
    deadline = time.monotonic() + timeout_s
    call = owner.method("__tensor_send__").options(deadline_s=timeout_s)(key, entry.rank, tag)
    try:
        with _op_lock(entry):
            works = [entry.group.recv([buffer], owner_rank, tag) for buffer in buffers.values()]
        _await(works, call, deadline, what, entry.backend)
        call.result(timeout=max(0.1, deadline - time.monotonic()))
    except Exception as exc:
        error = failure(exc, owner, entry.peer_name(owner_rank), what)
        if error is exc:
            raise
        raise error from exc
    return buffers


def _await(works: list[Any], call: PendingCall, deadline: float, what: str, backend: str) -> None:
    """Wait for every receive; the owner's answer (an error, its death) ends the wait early.

    A gloo receive completes only inside ``work.wait`` (``is_completed`` stays False until then), and a wait that
    times out finishes the work, so the waits run on a thread of their own, each to the deadline, while this
    thread watches that thread and the owner's answer."""
    received: concurrent.futures.Future[None] = concurrent.futures.Future()

    def wait_all() -> None:
        try:
            for work in works:
                work.wait(datetime.timedelta(seconds=max(0.001, deadline - time.monotonic())))
            _settle(backend)
        except BaseException as exc:  # handed to the watching thread
            received.set_exception(exc)
        else:
            received.set_result(None)

    threading.Thread(target=wait_all, name="tensor-receive", daemon=True).start()
    while not received.done():
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"{what}: not received before the deadline")
        concurrent.futures.wait([received, call.future], timeout=left, return_when=concurrent.futures.FIRST_COMPLETED)
        if call.done() and not received.done():
            call.result()  # raises the owner's refusal or ActorDied; a success means the bytes are on the way
            received.exception(timeout=max(0.001, deadline - time.monotonic()))
    received.result()  # raises the backend's error (a peer that closed the connection), if any


def serve_send(key: Any, dst_rank: Any, tag: Any) -> int:
    """The owner's side (``__tensor_send__``): send each tensor of ``key`` to ``dst_rank``; returns the bytes sent.
    It runs on the owner's collective lane, so it serves while the owner's own methods run."""
    if not isinstance(key, str) or not isinstance(tag, int) or not 0 < tag <= MAX_TAG:
        raise ValueError("__tensor_send__ takes a key (str), a destination rank and a tag in 1..2**31-1")
    entry = store.get(key)
    member = collective_groups.member(entry.group)
    if not isinstance(dst_rank, int) or not 0 <= dst_rank < member.world_size or dst_rank == member.rank:
        raise ValueError(f"destination rank {dst_rank!r} is not another member of group {entry.group!r}")
    entry.pulled_by.add(dst_rank)  # named first if a member dies before freeing (runtime.tensors.member_watch)
    what = f"tensor ref {key} sent to {member.peer_name(dst_rank)} over group {entry.group!r}"
    deadline = time.monotonic() + member.timeout_s
    try:
        with _op_lock(member):
            works = [member.group.send([tensor], dst_rank, tag) for tensor in entry.tensors.values()]
        for work in works:
            work.wait(datetime.timedelta(seconds=max(0.001, deadline - time.monotonic())))
        _settle(member.backend)  # the sends have read the tensors: a freed ref's bucket may be reused
    except Exception as exc:
        error = failure(exc, member.members[dst_rank], member.peer_name(dst_rank), what)
        if isinstance(error, ActorDied):
            store.fail(key, error)
        if error is exc:
            raise
        raise error from exc
    return sum(tensor.numel() * tensor.element_size() for tensor in entry.tensors.values())


def _settle(backend: str) -> None:
    """NCCL's ``wait`` only orders the current stream after the op; wait for the bytes themselves."""
    if backend == "nccl":
        import torch

        torch.cuda.synchronize()


def _op_lock(entry: GroupMember) -> Any:
    """NCCL: one thread at a time posts on a communicator (ops from two threads may interleave and deadlock)."""
    import contextlib

    return entry.send_lock if entry.backend == "nccl" else contextlib.nullcontext()


def failure(exc: BaseException, peer: ActorHandle, peer_name: str, what: str) -> BaseException:
    """What a failed transfer raises: ActorDied when ``peer`` is gone, the owner's own refusal as it came, else a
    CollectiveError (or DeadlineExceeded) naming the transfer.

    Both sides do this (the peer is asked whether it lives, ``__health__``, 2 s): the receiver's ``get`` raises it
    and the owner records it on the entry, so its ``wait_freed`` raises it too. A reader that dies after its
    transfer, before freeing the ref, is caught by ``wait_freed``'s member watch (runtime.tensors.member_watch)."""
    if isinstance(exc, ActorDied):
        return ActorDied(f"{what}: {peer_name} died during the transfer: {exc}")
    if isinstance(exc, RemoteError):  # the owner refused (a freed ref, a bad rank ...): raised here as its own type
        refusal = _REFUSALS.get(exc.remote_type)
        return refusal(f"{what}: {exc}") if refusal else exc
    if not alive(peer):
        return ActorDied(f"{what}: {peer_name} died during the transfer ({type(exc).__name__}: {exc})")
    if isinstance(exc, (DeadlineExceeded, TimeoutError)):
        return DeadlineExceeded(f"{what}: {peer_name} is alive but the transfer did not finish in time: {exc}")
    return CollectiveError(f"{what} failed: {type(exc).__name__}: {exc}")


def alive(peer: ActorHandle) -> bool:
    if peer.dead:
        return False
    try:
        peer.method("__health__").options(deadline_s=PROBE_S)().result(timeout=PROBE_S + 1)
    except (ActorError, TimeoutError, OSError):
        return False
    return True


def spec_list(tensors: dict[str, Any]) -> tuple[TensorSpec, ...]:
    return tuple(tensor_specs.spec_of(name, tensor) for name, tensor in tensors.items())


builtin_methods.register("__tensor_send__", Builtin(without_server(serve_send), lane=COLLECTIVE_LANE))  # it blocks
builtin_methods.register("__tensor_free__", Builtin(without_server(store.free)))
