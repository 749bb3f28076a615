"""Actor classes used by the runtime tests (importable by dotted path in the actor processes)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import enum
import os
import threading
import time
from typing import Any

import numpy as np

from runtime import method
from transport import register_type


class HttpError(Exception):
    """An exception with attributes of its own, rebuilt from its args when unpickled (as Ray users write them)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(status, body)
        self.status, self.body = status, body
        self.request = argparse.Namespace(url="/v1/generate", attempt=2)  # no wire type: a sealed pickle


class UnsendableFieldError(Exception):
    """An exception with an attribute that cannot travel at all (a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: float
    y: float


class TensorEcho:
    """Echoes its arguments. It imports torch itself: a tensor from the wire never makes a process import it."""

    def __init__(self) -> None:
        import torch  # noqa: F401

    def echo(self, *args: Any) -> list[Any]:
        return list(args)


class Counter:
    """A plain actor: sync, async and control-plane methods."""

    concurrency_groups = {"io": 2}

    def __init__(self, *, start: int = 0) -> None:
        self.value = start
        self.control_cancels = 0
        self.calls = 0
        self.order: list[int] = []

    def add(self, n: int) -> int:
        self.calls += 1
        self.value += n
        return self.value

    def record(self, i: int) -> None:
        self.order.append(i)

    def recorded(self) -> list[Any]:  # ints from record, (tag, i) pairs from record_from
        return self.order

    def call_count(self) -> int:
        return self.calls

    def echo(self, *args: Any, **kwargs: Any) -> Any:
        return [list(args), kwargs]

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    async def async_add(self, n: int) -> int:
        await asyncio.sleep(0.001)
        self.value += n
        return self.value

    async def async_sleep(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    @method(concurrency_group="io")
    def io_thread(self) -> str:
        return threading.current_thread().name

    @method(control_plane=True)
    def heartbeat(self) -> float:
        return time.time()

    def sync_thread(self) -> str:
        return threading.current_thread().name

    async def async_thread(self) -> str:
        return threading.current_thread().name

    @method(control_plane=True)
    def control_thread(self) -> str:
        return threading.current_thread().name

    @method(control_plane=True)
    async def async_control_sleep(self, seconds: float) -> float:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.control_cancels += 1
            raise
        return seconds

    @method(control_plane=True)
    def control_cancelled(self) -> int:
        return self.control_cancels

    @method(control_plane=True)
    async def async_control_thread(self) -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    def record_from(self, tag: int, i: int) -> None:
        self.order.append((tag, i))

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def http_fail(self, status: int) -> None:
        raise HttpError(status, "quota exceeded")

    def unsendable_fail(self) -> None:
        raise UnsendableFieldError("slow down")

    def nbytes(self, data: np.ndarray) -> int:
        return int(data.nbytes)

    def blob(self, size: int) -> bytes:
        return b"x" * size

    def array(self, size: int) -> np.ndarray:
        return np.arange(size, dtype=np.uint8)

    def midpoint(self, a: Point, b: Point, color: Color) -> tuple[Point, Color]:
        return Point((a.x + b.x) / 2, (a.y + b.y) / 2), color

    def get_pid(self) -> int:
        return os.getpid()

    def unsendable(self) -> Any:
        return threading.Lock()

    def call_other(self, other: Any, n: int) -> int:
        return other.add(n).result(timeout=10)

    async def call_other_async(self, other: Any, n: int) -> int:
        return await other.add(n)


register_type(Point)
register_type(Color)


class Positional:
    def __init__(self, a: int) -> None:
        self.a = a


class BrokenConstructor:
    def __init__(self, *, fail: bool = True) -> None:
        if fail:
            raise RuntimeError("constructor refused: fail=True")


class Producer:
    """Holds values and hands out object refs to them."""

    def __init__(self) -> None:
        pass

    def make(self, size: int) -> Any:
        from runtime import put

        return put({"data": np.arange(size, dtype=np.int64), "size": size})

    def held(self) -> int:
        from runtime.objects.object_store import store

        return len(store)


class Consumer:
    def __init__(self) -> None:
        pass

    def total(self, ref: Any) -> int:
        return int(ref.get(timeout=10)["data"].sum())


class SlowRestart:
    """Constructs at once the first time, then takes ``restart_delay_s`` (a restart after a crash)."""

    def __init__(self, *, marker: str, restart_delay_s: float) -> None:
        if os.path.exists(marker):
            time.sleep(restart_delay_s)
        with open(marker, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        self.calls = 0

    def add(self, n: int) -> int:
        self.calls += n
        return self.calls

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds
