"""A start stops at its first failure: an actor whose constructor fails at once (a kwarg typo in hosts.toml) ends
the start with its traceback and pool/cell/host while a slow constructor still runs (issue 42: the error came only
after the slowest actor was constructed, the progress line said ``inference 0/1``); a Ctrl-C during construction
leaves no thread behind for the interpreter to wait for at exit (the launcher lingered 3-15 s after its teardown).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import toml_text
from launch_helpers import local_host, wait_for

from launcher.config.hosts_config import parse_config
from launcher.errors import WorkerStartError
from launcher.launch.worker_provider import WorkerProvider

pytestmark = pytest.mark.processes

SLOW = {"kind": "serve", "actor_class": "launch_actors:SlowStart", "kwargs": {"seconds": 60}}
TYPO = {"kind": "serve", "actor_class": "launch_actors:Counter", "kwargs": {"strat": 5}}  # Counter takes start=


def config(tmp_path: Path, pools: list[dict[str, Any]]) -> Any:
    data = {
        "launcher": {"workdir": str(tmp_path / "run"), "stop_grace_s": 2},
        "hosts": [local_host("n0", tmp_path / "n0")],
        "job": {"entrypoint": "launch_jobs:exit_code"},
        "pools": pools,
    }
    path = tmp_path / "hosts.toml"
    path.write_text(toml_text.dump(data))
    return parse_config(path.read_text(), source=path)


def test_a_constructor_that_fails_stops_the_start_at_once(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"id": "trainer", "worker": SLOW}, {"id": "inference", "worker": TYPO}])
    said: list[str] = []
    with WorkerProvider(cfg, progress=said.append) as provider:
        started = time.monotonic()
        with pytest.raises(WorkerStartError) as info:
            provider.start_all(deadline_s=120)
        took = time.monotonic() - started
        assert provider.worker_infos() == []  # the slow one was stopped with the batch
    assert took < 40, f"the failure waited for the slow constructor ({took:.1f}s)"
    message = str(info.value)
    assert "inference-0-0" in message and "pool inference, cell inference-0, host n0" in message, message
    assert "unexpected keyword argument 'strat'" in message and "remote traceback" in message, message
    assert "trainer-0-0" not in message  # only the one that failed, not the one that was cut short
    failed = [line for line in said if " failed (" in line]
    assert failed and re.fullmatch(
        r"constructing 2 actor\(s\): trainer 0/1, inference 0/1 failed \(inference-0-0 after \d+\.\ds\)", failed[0]
    ), said


def _non_daemon_threads() -> list[str]:
    main = threading.main_thread()
    return [t.name for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not main]


def test_ctrl_c_while_constructing_leaves_no_thread_to_wait_for(tmp_path: Path) -> None:
    cfg = config(tmp_path, [{"id": "trainer", "cells": 2, "worker": SLOW}])
    said: list[str] = []
    sent: list[object] = []
    before = set(_non_daemon_threads())
    # miles-launch's main installs Python's own SIGINT handler (launcher/console/cli.py): the same here, whatever an
    # earlier test in this process left.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    with WorkerProvider(cfg, progress=said.append) as provider:

        def ctrl_c_once_constructing() -> None:
            try:
                wait_for("the constructors to run", lambda: any(s.startswith("constructing") for s in said), 60)
            except AssertionError as exc:
                sent.append(exc)
                return
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # a Ctrl-C, as the kernel sends it
            sent.append(time.monotonic())

        threading.Thread(target=ctrl_c_once_constructing, daemon=True).start()
        try:
            with pytest.raises(KeyboardInterrupt):
                provider.start_all(deadline_s=120)
        except pytest.fail.Exception:
            raise AssertionError(f"no KeyboardInterrupt; the Ctrl-C thread: {sent}, progress: {said}") from None
        finally:
            signal.signal(signal.SIGINT, previous)
        # What the interpreter would join at exit (an executor's threads are no daemons): none may be left, even
        # before the teardown (a thread blocked in a constructor call lasted until its worker's death was seen).
        assert set(_non_daemon_threads()) <= before, _non_daemon_threads()
        pids = [w.pid for w in provider.worker_infos()]
    assert set(_non_daemon_threads()) <= before, _non_daemon_threads()
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
