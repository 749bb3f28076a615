"""Bad input gets a clear error that names the actor, method or argument; nothing reaches the wire."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sample_actors import BrokenConstructor, HttpError, Positional, UnsendableFieldError

from runtime import ActorDefinitionError, ActorHandle, CallRejected, RemoteError, spawn

pytestmark = pytest.mark.processes


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


def test_a_remote_exception_keeps_attributes_that_have_no_wire_type(counter: ActorHandle) -> None:
    """The error state carries the exception's attributes (runtime.core.outcome); one with no wire type of its own (an
    argparse.Namespace) travels as a sealed pickle, and one that cannot be pickled leaves the error as it was."""
    with pytest.raises(HttpError) as info:
        counter.http_fail(429).result(10)
    error = info.value
    assert isinstance(error, RemoteError) and error.status == 429 and error.body == "quota exceeded"
    assert error.request == argparse.Namespace(url="/v1/generate", attempt=2)
    assert "counter" in str(error) and "HttpError" in error.remote_traceback  # still says where
    with pytest.raises(UnsendableFieldError, match="slow down") as info:
        counter.unsendable_fail().result(10)
    assert not hasattr(info.value, "lock") and info.value.remote_type == "sample_actors.UnsendableFieldError"
    assert counter.add(0).result(10) == 10  # the actor keeps serving


def test_unsupported_argument_names_the_argument(counter: ActorHandle) -> None:
    with pytest.raises(
        TypeError, match=r"argument 'key' of actor 'counter' method 'echo' cannot be sent.*_thread.lock"
    ):
        counter.echo(1, key=threading.Lock())


def test_unsendable_return_value_is_a_clear_remote_error(counter: ActorHandle) -> None:
    with pytest.raises(RemoteError, match="returned a value that cannot be sent"):
        counter.unsendable().result(10)
    assert counter.add(0).result(10) == 10  # the actor keeps serving


_DRIVER = """
from runtime import spawn
actor = spawn("sample_actors:Counter", kwargs={"start": 1})
try:
    print(sum(actor.add(1).result(10) for _ in range(20)))
finally:
    actor.kill()
"""


def test_wait_spin_setting_is_checked_and_zero_turns_spinning_off(no_leaks: None) -> None:
    tests_dir = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests_dir), str(tests_dir.parent.parent)])}
    bad = subprocess.run(
        [sys.executable, "-c", _DRIVER], env={**env, "MILES_WAIT_SPIN_US": "fast"}, capture_output=True, text=True
    )
    assert bad.returncode != 0 and "MILES_WAIT_SPIN_US must be microseconds" in bad.stderr and "'fast'" in bad.stderr
    off = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        env={**env, "MILES_WAIT_SPIN_US": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == [str(sum(range(2, 22)))]  # every call answered, waiting without spinning
