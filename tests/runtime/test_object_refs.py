"""Object refs: made in one actor, fetched by another straight from the owner, freed explicitly."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from runtime import ActorDied, ObjectRef, spawn

pytestmark = pytest.mark.processes


def test_refs_travel_and_are_fetched_from_the_owner(no_leaks: None) -> None:
    producer = spawn("sample_actors:Producer")
    consumer = spawn("sample_actors:Consumer")
    try:
        ref = producer.make(1000).result(10)
        assert isinstance(ref, ObjectRef) and ref.owner.pid == producer.pid
        assert consumer.total(ref).result(10) == sum(range(1000))  # fetched by a third process
        value = ref.get()
        assert value["size"] == 1000 and np.array_equal(value["data"], np.arange(1000))
        assert producer.held().result(10) == 1
        assert ref.free() is True and ref.free() is False
        assert producer.held().result(10) == 0
        with pytest.raises(Exception, match="not held here"):
            ref.get()
        second = producer.make(10).result(10)
        os.kill(producer.pid, signal.SIGKILL)
        with pytest.raises(ActorDied):
            second.get(timeout=5)
    finally:
        producer.kill()
        consumer.kill()
