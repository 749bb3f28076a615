"""Collective groups and device-resident tensor refs across real actor processes, over real gloo groups.

Mirrors Ray's designs, read from Ray's source: ``ray.experimental.collective.create_collective_group`` /
``destroy_collective_group`` (python/ray/experimental/collective/collective.py), Ray Direct Transport's
``ray.put(x, _tensor_transport="gloo")``, receive-into-buffers (``set_target_for_ref``) and
``wait_tensor_freed`` (python/ray/experimental/gpu_object_manager/gpu_object_store.py,
doc/source/ray-core/direct-transport.rst).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import torch
from collective_actors import seeded

from runtime import ActorHandle, RemoteError, spawn_many
from runtime.collective import CollectiveError, create_group, destroy_group
from runtime.tensors.tensor_refs import TensorRef

pytestmark = pytest.mark.processes

SHAPES = {"layer.weight": [64, 32], "layer.bias": [64], "embed": [100, 16]}
BIG = {**SHAPES, "big": [512, 512]}  # 1 MiB more


@pytest.fixture(scope="module")
def members() -> Iterator[list[ActorHandle]]:
    handles = spawn_many("collective_actors:Member", 3, name_prefix="member")
    try:
        yield handles
    finally:
        for handle in handles:
            handle.kill()


def test_group_ranks_by_handle_order_and_all_reduce(members: list[ActorHandle]) -> None:
    group = create_group(list(reversed(members)), backend="gloo", name="reduce", timeout_s=20)
    try:
        assert [m.rank("reduce").result(10) for m in members] == [2, 1, 0]
        calls = [m.all_reduce("reduce", float(i + 1)) for i, m in enumerate(members)]
        assert [c.result(20) for c in calls] == [6.0, 6.0, 6.0]
    finally:
        destroy_group(group)
    with pytest.raises(CollectiveError, match="not a member of collective group 'reduce'"):
        members[0].rank("reduce").result(10)


def test_a_dead_or_silent_member_fails_the_group_naming_it(members: list[ActorHandle]) -> None:
    (dead,) = spawn_many("collective_actors:Member", 1, name_prefix="doomed")
    os.kill(dead.pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(CollectiveError, match=r"doomed-0 \(rank 1.*died"):
        create_group([members[0], dead], name="with-dead", timeout_s=20)
    assert time.monotonic() - started < 10
    dead.kill()
    (silent,) = spawn_many("collective_actors:Member", 1, name_prefix="silent")
    os.kill(silent.pid, signal.SIGSTOP)  # alive, but never answers: it never joins
    try:
        with pytest.raises(CollectiveError, match=r"silent-0 \(rank 2.*did not join the group within"):
            create_group([members[0], members[1], silent], name="with-silent", timeout_s=2)
    finally:
        os.kill(silent.pid, signal.SIGCONT)
        silent.kill()
    group = create_group(members[:2], name="with-silent", timeout_s=20)  # the members that joined left again
    destroy_group(group)


def test_ref_moves_into_the_receivers_buffers_while_the_owner_is_busy(members: list[ActorHandle]) -> None:
    owner, receiver, _ = members
    group = create_group(members, name="refs", timeout_s=20)
    try:
        ref = owner.put(7, BIG).result(20)
        assert isinstance(ref, TensorRef) and ref.names == list(BIG) and ref.owner.pid == owner.pid
        sent_before = owner.method("__stats__")().result(10)["bytes_out"]
        busy = owner.busy(2.0)  # the owner's default lane is taken: the transfer is served on its collective lane
        time.sleep(0.2)
        started = time.monotonic()
        got = receiver.pull(ref).result(20)
        assert time.monotonic() - started < 1.5 and not busy.done()
        expected = seeded(7, BIG)
        assert set(got) == set(expected) and all(torch.equal(got[n], expected[n]) for n in expected)
        sent = owner.method("__stats__")().result(10)["bytes_out"] - sent_before
        assert sent < 64 * 1024 < ref.nbytes // 2  # the bytes did not ride the actor transport
        assert owner.wait_freed([ref], 5).result(10) == "freed"  # pull() freed it: its only reader
        assert owner.ref_info(ref).result(10) is None
        one = owner.put_one(3, [5, 4]).result(20)
        assert one.single and torch.equal(receiver.pull_one(one).result(20), seeded(3, {"t": [5, 4]})["t"])
        busy.result(10)
    finally:
        destroy_group(group)


def test_mismatched_buffers_are_refused_before_any_byte_moves(members: list[ActorHandle]) -> None:
    owner, receiver, _ = members
    group = create_group(members[:2], name="mismatch", timeout_s=20)
    try:
        ref = owner.put(1, SHAPES).result(20)
        wrong_shape = {**SHAPES, "layer.bias": [65]}
        with pytest.raises(ValueError, match=r"into\['layer.bias'\] is \[65\] float32 but the ref holds \[64\]"):
            receiver.pull_into(ref, wrong_shape).result(20)
        with pytest.raises(ValueError, match=r"into\['layer.weight'\] is \[64, 32\] bfloat16 but the ref holds"):
            receiver.pull_into(ref, SHAPES, "bfloat16").result(20)
        with pytest.raises(ValueError, match=r"missing \['embed'\]"):
            receiver.pull_into(ref, {k: v for k, v in SHAPES.items() if k != "embed"}).result(20)
        assert set(receiver.buffer_sums().result(10).values()) == {0.0}  # the buffers were never written
        one = owner.put_one(2, [256]).result(20)  # fresh buffers are bounded too: a ref may come from a peer
        with pytest.raises(ValueError, match=r"1024 bytes in 1 tensor\(s\) is more than max_bytes=1000; pass into="):
            receiver.pull_one(one, 1000).result(20)
        assert float(receiver.pull_one(one, 1024).result(20).sum()) == pytest.approx(
            float(seeded(2, {"t": [256]})["t"].sum()), rel=1e-5
        )
        assert owner.ref_info(ref).result(10) == {"readers_left": 1, "sends": 0}  # the owner never sent
        assert receiver.pull_into(ref, SHAPES).result(20)["embed"] == pytest.approx(
            float(seeded(1, SHAPES)["embed"].sum()), rel=1e-5
        )
    finally:
        destroy_group(group)


def test_readers_free_and_wait_freed(members: list[ActorHandle]) -> None:
    owner, first, second = members
    group = create_group(members, name="readers", timeout_s=20)
    try:
        ref = owner.put(2, SHAPES, readers=2).result(20)
        waiting = owner.wait_freed([ref], 20)
        first.pull(ref).result(20)
        with pytest.raises(TimeoutError, match=rf"not freed within 0.3s: {ref.key} \(1 reader\(s\) left\)"):
            owner.wait_freed([ref], 0.3).result(10)
        assert not waiting.done()
        second.pull(ref).result(20)
        assert waiting.result(10) == "freed"
        assert ref.free() is False
        with pytest.raises(KeyError, match="not held here"):
            first.pull(ref).result(20)
    finally:
        destroy_group(group)


def test_owner_death_during_a_transfer_fails_the_receiver_with_actor_died() -> None:
    owner, receiver = spawn_many("collective_actors:Member", 2, name_prefix="dies")
    try:
        create_group([owner, receiver], name="owner-dies", timeout_s=20)
        ref = owner.put(5, {"big": [4096, 1024]}).result(20)
        os.kill(owner.pid, signal.SIGSTOP)  # the receiver's pull is then in flight when the owner dies
        pulling = receiver.pull(ref)
        time.sleep(0.5)
        started = time.monotonic()
        os.kill(owner.pid, signal.SIGKILL)
        with pytest.raises(RemoteError, match=r"dies-0 \(rank 0\) died during the transfer") as raised:
            pulling.result(20)
        assert raised.value.remote_type == "runtime.core.errors.ActorDied"  # what the receiver's ref.get raised
        assert time.monotonic() - started < 10
    finally:
        owner.kill()
        receiver.kill()


def test_receiver_death_during_a_transfer_fails_the_owner_with_actor_died() -> None:
    owner, receiver = spawn_many("collective_actors:Member", 2, name_prefix="reader")
    try:
        create_group([owner, receiver], name="reader-dies", timeout_s=20)
        ref = owner.put(5, {"big": [4096, 4096]}).result(20)  # 64 MiB: more than the sockets buffer
        waiting = owner.wait_freed([ref], 30)
        receiver.stall_transfer(ref, "reader-dies")
        deadline = time.monotonic() + 10
        while owner.ref_info(ref).result(10)["sends"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        started = time.monotonic()
        os.kill(receiver.pid, signal.SIGKILL)
        # the failed send or the member watch, whichever sees it first: both name the receiver
        with pytest.raises(RemoteError, match=r"reader-1 \(rank 1\).* died (during the transfer|while)") as raised:
            waiting.result(20)
        assert raised.value.remote_type == "runtime.core.errors.ActorDied"  # what the owner's wait_freed raised
        assert time.monotonic() - started < 10
    finally:
        owner.kill()
        receiver.kill()


def test_a_reader_that_dies_before_freeing_fails_the_owners_wait_freed_at_once() -> None:
    owner, receiver = spawn_many("collective_actors:Member", 2, name_prefix="holder")
    try:
        create_group([owner, receiver], name="holder-dies", timeout_s=20)
        ref = owner.put(4, SHAPES, readers=1).result(20)
        receiver.pull(ref, free=False).result(20)  # pulled, never freed: the owner still waits for one reader
        waiting = owner.wait_freed([ref], 60)
        time.sleep(0.3)
        assert not waiting.done()
        started = time.monotonic()
        os.kill(receiver.pid, signal.SIGKILL)
        pattern = rf"tensor ref {ref.key}: member holder-1 \(rank 1\), pid {receiver.pid} on .* died while the ref"
        with pytest.raises(
            RemoteError, match=pattern + r" still waited for 1 reader\(s\) \(it had pulled the ref\)"
        ) as raised:
            waiting.result(20)
        assert raised.value.remote_type == "runtime.core.errors.ActorDied"  # what the owner's wait_freed raised
        assert time.monotonic() - started < 15  # not its 60 s timeout
        assert owner.ref_info(ref).result(10) == {"readers_left": 1, "sends": 1}  # the ref is still held
    finally:
        owner.kill()
        receiver.kill()


def test_the_rendezvous_opens_no_wildcard_listener(members: list[ActorHandle]) -> None:
    """Rank 0 keeps the keys and members reach them over the actor transport: no TCPStore on every interface."""
    import psutil

    def wildcard_listeners() -> list[tuple[int, object]]:
        return [
            (m.pid, c.laddr)
            for m in members
            for c in psutil.Process(m.pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.ip in ("0.0.0.0", "::")
        ]

    before = wildcard_listeners()
    group = create_group(members, backend="gloo", name="no-store-port", timeout_s=20)
    try:
        calls = [m.all_reduce("no-store-port", 1.0) for m in members]
        assert [c.result(20) for c in calls] == [3.0, 3.0, 3.0]
        assert wildcard_listeners() == before
    finally:
        destroy_group(group)
