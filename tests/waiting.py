"""Waiting in tests: poll a condition until it holds, or fail the test saying what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(condition: Callable[[], object], failure: str, timeout_s: float = 10.0) -> None:
    """Return once ``condition()`` is true; fail with ``failure`` if it is not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"{failure} (waited {timeout_s:g} s)")
        time.sleep(0.02)
