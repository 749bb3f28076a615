"""Actor classes for the Ray-parity tests (tests/runtime/test_ray_parity_*.py), importable by dotted path."""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time
from pathlib import Path

from runtime import ActorHandle, CallRejected, ObjectRef, get_actor, method, spawn


class ParityError(Exception):
    """An exception class of the user's own, with a constructor that takes more than a message."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"code {code}: {detail}")
        self.code = code


class Relay:
    """Reaches other actors from inside an actor: by an unpickled handle, or by name."""

    def call_pickled(self, blob: bytes, n: int) -> int:
        handle: ActorHandle = pickle.loads(blob)
        return handle.add(n).result(10)

    def kill_pickled(self, blob: bytes) -> str:
        handle: ActorHandle = pickle.loads(blob)
        try:
            handle.kill()
        except CallRejected as exc:
            return f"refused: {exc}"
        return "killed"

    def add_by_name(self, name: str, namespace: str, n: int) -> int:
        return get_actor(name, namespace=namespace).add(n).result(10)

    def spawn_named(self, name: str, lifetime: str) -> int:
        child = spawn("sample_actors:Counter", kwargs={"start": 0}, name=name, lifetime=lifetime or None)
        return child.pid

    def get_pid(self) -> int:
        return os.getpid()


class RefReader:
    def total(self, ref: ObjectRef) -> int:
        return int(ref.get(timeout=10)["tokens"].sum())


class Raiser:
    def value_error(self, text: str) -> None:
        raise ValueError(text)

    def parity_error(self, code: int) -> None:
        raise ParityError(code, "from the actor")

    def connection_error(self) -> None:
        """Fails as a method whose own outbound connection failed (the call ran)."""
        self.connection_errors = getattr(self, "connection_errors", 0) + 1
        raise ConnectionError(f"refused (attempt {self.connection_errors})")

    def connection_errors_seen(self) -> int:
        return getattr(self, "connection_errors", 0)

    def key_error(self, key: str) -> None:
        raise KeyError(key)


class CrashingConstructor:
    """Its process dies inside the constructor while ``crashes`` (a count in a file) is above zero."""

    def __init__(self, *, counter_path: str) -> None:
        path = Path(counter_path)
        left = int(path.read_text())
        if left > 0:
            path.write_text(str(left - 1))
            os._exit(3)

    def get_pid(self) -> int:
        return os.getpid()


class Sleeper:
    """Sync calls that block (a threaded actor under max_concurrency), and a record of what ran."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.lock = threading.Lock()

    def nap(self, seconds: float) -> str:
        time.sleep(seconds)
        return threading.current_thread().name

    def mark(self, i: int) -> None:
        with self.lock:
            self.ran.append(i)

    @method(control_plane=True)
    def marks(self) -> list[int]:
        return list(self.ran)


class AsyncGroups:
    """Async methods in two concurrency groups; a blocking coroutine in one must stall nothing else."""

    concurrency_groups = {"slow": 1, "fast": 1}

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    @method(concurrency_group="slow")
    async def block(self, seconds: float) -> str:
        time.sleep(seconds)  # blocks this group's loop on purpose
        return threading.current_thread().name

    @method(concurrency_group="fast")
    async def quick(self) -> str:
        return threading.current_thread().name

    async def where(self) -> str:
        return threading.current_thread().name

    async def sleep_until_cancelled(self, tag: str, seconds: float) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled.append(tag)
            raise
        return "finished"

    @method(control_plane=True)
    def cancelled_tags(self) -> list[str]:
        return list(self.cancelled)

    @method(control_plane=True)
    def control_thread(self) -> str:
        return threading.current_thread().name
