"""The typed surface of an actor, checked as miles checks its RPC methods (radixark/miles,
``miles/utils/workers/rpc/common/metadata.py``: which attributes are methods, the receiver, options through
wrappers; ``common/serialization.py``: arguments and results validated against the annotations), against real
actor processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from raw_client import RawClient

from runtime import ActorHandle, CallRejected, RemoteError, spawn
from runtime.caller.handle_names import handle_attributes
from runtime.core.errors import ActorDefinitionError
from runtime.processes.process import ActorProcess

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def typed() -> Iterator[ActorHandle]:
    handle = spawn("typed_actors:Typed", name="typed")
    try:
        yield handle
    finally:
        handle.kill()


def _raw_call(handle: ActorHandle, method: str, *args: object, **kwargs: object) -> tuple[bool, object]:
    """Call past the caller's own checks: what the actor itself accepts."""
    raw = RawClient(handle.endpoint)
    try:
        _, frames = raw.submit_frames(method, *args, **kwargs)
        raw.send(frames)
        return raw.result(raw.recv())
    finally:
        raw.close()


def test_results_are_checked_against_the_return_annotation(typed: ActorHandle) -> None:
    """miles validates every result against the method's return annotation (its serializer's result model)."""
    assert typed.wrong_return(7).result(10) == 7
    with pytest.raises(
        RemoteError, match=r"typed\.wrong_return returned str: 'seven', but its return annotation is int"
    ):
        typed.wrong_return("seven").result(10)
    with pytest.raises(RemoteError, match=r"async_wrong_return returned list: \['a'\], but .* is list\[int\]"):
        typed.async_wrong_return(["a"]).result(10)
    with pytest.raises(RemoteError, match=r"non_negative returned int: -1, .*greater than or equal to 0"):
        typed.non_negative(-1).result(10)
    with pytest.raises(RemoteError, match=r"job_back returned dict.*size: Field required"):
        typed.job_back({"name": "x"}).result(10)
    assert typed.job_back({"name": "x", "size": 1}).result(10) == {"name": "x", "size": 1}
    # -> None, Any and no annotation say nothing to check
    assert typed.says_none().result(10) == 5
    assert typed.unannotated().result(10) == "anything"
    assert typed.anything().result(10) == {"any": 1}
    assert typed.count().result(10) == 0  # the actor lives on


def test_static_and_class_methods_are_not_actor_methods(typed: ActorHandle) -> None:
    """miles skips staticmethod, classmethod and property attributes when it collects RPC methods."""
    listed = typed.method("__methods__")().result(10)
    assert "helper" not in listed and "build" not in listed and "positive" in listed
    for name in ("helper", "build"):
        with pytest.raises(CallRejected, match=f"has no public method '{name}'"):
            typed.method(name)(1 if name == "helper" else None).result(10)
        ok, error = _raw_call(typed, name)
        assert not ok and f"no public method {name!r}" in error["message"]


def test_a_public_function_without_self_is_refused_at_spawn(no_leaks: None) -> None:
    """miles refuses an RPC method whose receiver is missing or not named ``self``."""
    with pytest.raises(ActorDefinitionError, match=r"NoSelf\.helper\(\) takes no `self` \(it takes no parameters\)"):
        spawn("typed_actors:NoSelf")
    with pytest.raises(ActorDefinitionError, match=r"WrongReceiver\.double\(n\) takes no `self` \(its first param"):
        spawn("typed_actors:WrongReceiver")


def test_a_wrapper_hiding_method_options_is_refused_and_wraps_keeps_them(typed: ActorHandle, no_leaks: None) -> None:
    """miles looks for its ``@rpc`` options through ``__wrapped__``; a wrapper that drops them is refused here
    rather than run on the default lane."""
    assert typed.lane_kept().result(10).startswith("lane-io-")  # functools.wraps copied the options
    assert typed.lane_found().result(10).startswith("lane-io-")  # found through __wrapped__
    with pytest.raises(ActorDefinitionError, match=r"HiddenLane\.save wraps a function marked .*group='io'"):
        spawn("typed_actors:HiddenLane")


def test_a_method_a_handle_attribute_shadows_is_refused_before_any_process_starts(
    no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """miles' RPC handle refuses a worker class whose RPC methods shadow handle attributes (radixark/miles,
    ``miles/utils/workers/rpc/client/handle.py``, ``RpcWorkerHandle.__init__``: ``hasattr(type(self), name)``);
    spawn refuses such a class before it starts a process, naming each method and a name to rename it to."""
    started: list[str] = []

    def start(self: ActorProcess, label: str, *args: object, **kwargs: object) -> None:
        started.append(label)
        raise AssertionError(f"spawn started a process for {label}")

    monkeypatch.setattr(ActorProcess, "__init__", start)
    shadowed = r"typed_actors:ShadowsHandle: methods 'info', 'pid' would be shadowed by the actor handle's own"
    with pytest.raises(ActorDefinitionError, match=shadowed) as refused:
        spawn("typed_actors:ShadowsHandle")
    assert "rename them ('info' -> 'get_info', 'pid' -> 'get_pid')" in str(refused.value)
    assert "'work'" not in str(refused.value).partition("Names a handle keeps")[0]
    assert started == []
    # the list is read off ActorHandle: its methods and properties, and what its constructor sets
    assert {"info", "host", "pid", "kill", "process", "endpoint", "connection", "method", "dead"} <= handle_attributes()
    assert not any(name.startswith("_") for name in handle_attributes())


def test_a_class_only_the_actor_host_imports_is_checked_for_shadowed_names_by_the_worker(
    no_leaks: None, tmp_path: Path
) -> None:
    """The caller cannot import ``shadowing:OnlyThere`` (it lives in the worker's working directory only), so the
    worker's ``__construct__`` refuses it, with the same message, before the constructor runs."""
    (tmp_path / "shadowing.py").write_text(
        "class OnlyThere:\n"
        "    def __init__(self) -> None:\n"
        "        open('constructed', 'w').close()\n\n"
        "    def endpoint(self) -> str:\n"
        "        return 'mine'\n"
    )
    with pytest.raises(ActorDefinitionError, match=r"shadowing:OnlyThere: method 'endpoint' would be shadowed"):
        spawn("shadowing:OnlyThere", cwd=str(tmp_path))
    assert not (tmp_path / "constructed").exists()


def test_annotated_constraints_are_enforced_on_the_caller_and_on_the_actor(typed: ActorHandle) -> None:
    """``Annotated[int, Field(ge=1)]``: miles builds a pydantic model from the annotations; here pydantic's
    TypeAdapter checks the constraint, on the caller before the wire and again on the actor."""
    assert typed.positive(3).result(10) == 3
    before = typed.count().result(10)
    with pytest.raises(CallRejected, match=r"argument 'n' of typed\.positive expects .*got int: 0: .*greater than"):
        typed.positive(0)  # raised at once, on the caller
    with pytest.raises(CallRejected, match="argument 'n'"):
        typed.positive(n=-5)
    ok, error = _raw_call(typed, "positive", 0)  # past the caller's check: the actor refuses it too
    assert not ok and error["code"] == "rejected" and "greater than or equal to 1" in error["message"], error
    assert typed.count().result(10) == before  # never ran


def test_typed_dict_parameters_are_validated_as_dicts_with_their_keys(typed: ActorHandle) -> None:
    assert typed.job_size({"name": "a", "size": 3}).result(10) == 3
    assert typed.job_size({"name": "a", "size": 3, "tags": ["x", "y"]}).result(10) == 5
    assert typed.maybe_jobs([{"name": "a", "size": 1}]).result(10) == 1
    assert typed.maybe_jobs(None).result(10) == 0
    before = typed.count().result(10)
    for bad, why in [
        ({"name": "a"}, "size: Field required"),
        ({"name": "a", "size": "3"}, "size: Input should be a valid integer"),
        ({"name": "a", "size": 3, "color": "red"}, "color: Extra inputs are not permitted"),
        ({"name": "a", "size": 3, "tags": [1]}, "tags.0: Input should be a valid string"),
        (["name", "a"], "expects Job, got list"),
    ]:
        with pytest.raises(CallRejected, match=f"argument 'job' of typed.job_size .*{why}"):
            typed.job_size(bad)
        ok, error = _raw_call(typed, "job_size", bad)
        assert not ok and error["code"] == "rejected" and why in error["message"], error
    with pytest.raises(CallRejected, match=r"argument 'jobs' .*0.size: Field required"):
        typed.maybe_jobs([{"name": "a"}])
    assert typed.count().result(10) == before


def test_an_int_outside_64_bits_is_a_type_error_naming_the_argument(typed: ActorHandle) -> None:
    """msgpack carries ints from -2**63 to 2**64-1 and nothing wider: a wider one cannot reach the actor at all
    (no msgpack body can hold it), so the caller refuses it before the wire, naming the argument."""
    assert typed.identity(2**64 - 1).result(10) == 2**64 - 1
    assert typed.identity(-(2**63)).result(10) == -(2**63)
    for value in (2**64, -(2**63) - 1, 10**30):
        with pytest.raises(TypeError, match=r"argument 'n' of actor 'typed' method 'identity' cannot be sent: .*64"):
            typed.identity(value)
        with pytest.raises(TypeError, match=r"argument 'n' of actor 'typed'"):
            typed.identity(n=value)
