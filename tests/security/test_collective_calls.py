"""The collective and stream built-ins called by a peer with hostile arguments: each is refused with an error that
names the field, nothing is allocated or opened past its bound, and the actor goes on serving.

A peer that can reach an actor may call ``__collective_open__`` (rank 0 keeps the group's rendezvous keys in
memory), ``__collective_store__`` (an operation on those keys), ``__collective_join__``, ``__tensor_send__``,
``__tensor_free__``, ``__stream_next__`` and ``__stream_close__``
(runtime/actor/builtin_methods.py) with whatever it likes.
"""

from __future__ import annotations

import pytest

from runtime import ActorHandle, RemoteError
from runtime.tensors.collective_groups import MAX_GROUPS
from runtime.tensors.collective_store import MAX_TABLE_BYTES, MAX_VALUE_BYTES

pytestmark = pytest.mark.processes


def refused(target: ActorHandle, method: str, *args: object) -> str:
    with pytest.raises(RemoteError) as refusal:
        target.method(method)(*args).result(timeout=20)
    return str(refusal.value)


def test_hostile_collective_and_tensor_arguments_are_refused(target: ActorHandle) -> None:
    assert "world size 0 must be 1..4096" in refused(target, "__collective_open__", "g", 0, 10.0)
    assert "timeout_s 1e+300 must be in (0, 86400]" in refused(target, "__collective_open__", "g", 2, 1e300)
    assert "collective group name '../x'" in refused(target, "__collective_open__", "../x", 2, 10.0)
    assert "backend 'mpi' is not one of" in refused(
        target, "__collective_join__", "g", "mpi", 0, 2, "127.0.0.1", 10.0, []
    )
    assert "members must be a list of actor handles" in refused(
        target, "__collective_join__", "g", "gloo", 1, 2, "127.0.0.1", 10.0, ["not", "handles"]
    )
    assert "a key (str), a destination rank and a tag" in refused(target, "__tensor_send__", 7, 1, 0)
    assert "is not held here (freed, or never put)" in refused(target, "__tensor_send__", "k" * 32, 1, 1)
    assert target.method("__tensor_free__")("k" * 32).result(timeout=20) is False
    assert target.echo(b"alive").result(timeout=20) == b"alive"


def test_a_peer_cannot_make_an_actor_open_stores_without_end(target: ActorHandle) -> None:
    opened = [target.method("__collective_open__")(f"flood-{i}", 2, 5.0).result(timeout=20) for i in range(MAX_GROUPS)]
    assert [o["name"] for o in opened] == [f"flood-{i}" for i in range(MAX_GROUPS)]
    assert f"in {MAX_GROUPS} groups already" in refused(target, "__collective_open__", "one-more", 2, 5.0)
    assert all(
        target.method("__collective_leave__")(f"flood-{i}").result(timeout=20) is False for i in range(MAX_GROUPS)
    )  # fmt: skip  (stores only: no group was joined)
    assert target.method("__collective_open__")("after", 2, 5.0).result(timeout=20)["name"] == "after"  # room again
    assert target.method("__collective_leave__")("after").result(timeout=20) is False


def test_the_rendezvous_keys_take_only_bounded_well_formed_operations(target: ActorHandle) -> None:
    store = target.method("__collective_store__")
    assert "keeps no rendezvous for collective group 'keys'" in refused(
        target, "__collective_store__", "keys", "get", ["a"]
    )
    target.method("__collective_open__")("keys", 2, 5.0).result(timeout=20)
    try:
        assert store("keys", "set", ["a", b"1"]).result(timeout=20) is None
        assert store("keys", "add", ["a", 41]).result(timeout=20) == 42
        assert store("keys", "get", ["a"]).result(timeout=20) == b"42"
        assert store("keys", "get", ["unset"]).result(timeout=20) is None  # the member polls: rank 0 never blocks
        assert store("keys", "check", [["a", "unset"]]).result(timeout=20) is False
        assert store("keys", "compare_set", ["b", b"", b"x"]).result(timeout=20) == b"x"
        assert store("keys", "compare_set", ["b", b"y", b"z"]).result(timeout=20) == b"x"  # not expected: kept
        assert store("keys", "num_keys", []).result(timeout=20) == 2
        assert store("keys", "delete_key", ["b"]).result(timeout=20) is True
        assert "unknown operation 'exec'" in refused(target, "__collective_store__", "keys", "exec", [])
        assert "takes at most 3 arguments" in refused(target, "__collective_store__", "keys", "set", [1, 2, 3, 4])
        assert "a key is a str of 1..4096" in refused(target, "__collective_store__", "keys", "set", ["k" * 5000, b""])
        assert "a value is bytes of at most" in refused(target, "__collective_store__", "keys", "set", ["k", "str"])
        assert "a value is bytes of at most" in refused(
            target, "__collective_store__", "keys", "set", ["k", b"v" * (MAX_VALUE_BYTES + 1)]
        )
        assert "add amount True is not an int" in refused(target, "__collective_store__", "keys", "add", ["a", True])
        store("keys", "set", ["word", b"abc"]).result(timeout=20)
        assert "does not hold a number" in refused(target, "__collective_store__", "keys", "add", ["word", 1])
        for i in range(MAX_TABLE_BYTES // MAX_VALUE_BYTES - 1):
            store("keys", "set", [f"fill-{i}", b"v" * MAX_VALUE_BYTES]).result(timeout=20)
        assert "store: full" in refused(target, "__collective_store__", "keys", "set", ["more", b"v" * MAX_VALUE_BYTES])
        assert store("keys", "get", ["a"]).result(timeout=20) == b"42"  # what was set stays
    finally:
        target.method("__collective_leave__")("keys").result(timeout=20)
    assert "keeps no rendezvous" in refused(target, "__collective_store__", "keys", "get", ["a"])
    assert target.echo(b"alive").result(timeout=20) == b"alive"


def test_hostile_stream_arguments_are_refused(target: ActorHandle) -> None:
    assert "a stream is named by its call id" in refused(target, "__stream_next__", b"x" * 200, 0, 4, 0.1)
    assert "window must be a number in 1..1024" in refused(target, "__stream_next__", b"x" * 16, 0, 0, 0.1)
    assert "wait_s must be a number in 0..30" in refused(target, "__stream_next__", b"x" * 16, 0, 4, 3600)
    assert target.method("__stream_next__")(b"x" * 16, 0, 4, 0.0).result(timeout=20) == [[], "unknown"]
    assert target.method("__stream_close__")(b"x" * 16).result(timeout=20) is False  # remembered, bounded
    assert target.echo(b"alive").result(timeout=20) == b"alive"
