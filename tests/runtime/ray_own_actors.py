"""Actor classes of Ray's own tests (python/ray/tests/test_actor.py at 00257fb2, Apache-2.0), as module-level
classes (they define them inside the test function; here they are sent the same way, by value, from this module),
and Ray's test helpers the ported files share (ray._private.test_utils' SignalActor, wait_for_condition)."""

from __future__ import annotations

import asyncio
import os
import time


class Foo:
    def __init__(self, x):
        self.x = x


class Grandparent:
    GRANDPARENT = 2

    @staticmethod
    def grandparent_static():
        assert Grandparent.GRANDPARENT == 2
        return 1


class Parent1(Grandparent):
    PARENT1 = 6

    @staticmethod
    def parent1_static():
        assert Parent1.PARENT1 == 6
        return 2

    def parent1(self):
        assert Parent1.PARENT1 == 6


class Parent2:
    PARENT2 = 7

    def parent2(self):
        assert Parent2.PARENT2 == 7


class StaticActor(Parent1, Parent2):
    X = 3

    @staticmethod
    def f():
        assert StaticActor.GRANDPARENT == 2
        assert StaticActor.PARENT1 == 6
        assert StaticActor.PARENT2 == 7
        assert StaticActor.X == 3
        return 4

    @classmethod
    def c(cls):
        return cls.X + 1

    def g(self):
        assert StaticActor.f() == 4
        return StaticActor.X


class Pinger:
    def ping(self):
        return "ok"

    def pid(self):
        return os.getpid()


class SignalActor:
    """ray._private.test_utils.SignalActor, as Ray declares it (a sync send, an async wait); Ray's tests make it
    with ``@ray.remote(num_cpus=0)``."""

    def __init__(self):
        self.ready_event = asyncio.Event()
        self.num_waiters = 0

    def send(self, clear=False):
        self.ready_event.set()
        if clear:
            self.ready_event.clear()

    async def wait(self, should_wait=True):
        if should_wait:
            self.num_waiters += 1
            await self.ready_event.wait()
            self.num_waiters -= 1

    async def cur_num_waiters(self):
        return self.num_waiters


def wait_for_condition(condition, timeout=30, retry_interval_ms=50):
    """ray._common.test_utils.wait_for_condition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(retry_interval_ms / 1000)
    raise RuntimeError("The condition wasn't met before the timeout expired.")
