"""Bad input gets a clear error that names the actor, method or argument; nothing reaches the wire."""

from __future__ import annotations

import threading

import pytest
from sample_actors import BrokenConstructor, Positional

from runtime import ActorDefinitionError, ActorHandle, CallRejected, RemoteError, spawn


def test_positional_constructor_is_refused_before_spawning(no_leaks: None) -> None:
    with pytest.raises(ActorDefinitionError, match=r"parameter 'a' is positional.*def __init__\(self, \*, a"):
        spawn(Positional, kwargs={"a": 1})


def test_failing_constructor_reports_remote_traceback(no_leaks: None) -> None:
    with pytest.raises(RemoteError, match="constructing BrokenConstructor failed: constructor refused") as info:
        spawn(BrokenConstructor)
    assert "RuntimeError" in info.value.remote_type


def test_unknown_class_path_names_the_module(no_leaks: None) -> None:
    with pytest.raises(RemoteError, match="no_such_module"):
        spawn("no_such_module:Thing")


def test_unknown_method_lists_known_ones(counter: ActorHandle) -> None:
    with pytest.raises(CallRejected, match=r"no public method 'ad'; methods: add, array"):
        counter.ad(1)


def test_wrong_argument_type_names_the_argument(counter: ActorHandle) -> None:
    with pytest.raises(CallRejected, match=r"argument 'n' of counter.add expects int, got str"):
        counter.add("1")
    with pytest.raises(CallRejected, match="missing a required argument: 'n'"):
        counter.add()


def test_unsupported_argument_names_the_argument(counter: ActorHandle) -> None:
    with pytest.raises(
        TypeError, match=r"argument 'key' of actor 'counter' method 'echo' cannot be sent.*_thread.lock"
    ):
        counter.echo(1, key=threading.Lock())


def test_unsendable_return_value_is_a_clear_remote_error(counter: ActorHandle) -> None:
    with pytest.raises(RemoteError, match="returned a value that cannot be sent"):
        counter.unsendable().result(10)
    assert counter.add(0).result(10) == 10  # the actor keeps serving
