"""Values Ray pickles reach runtime.spawn actors and come back: sealed pickles between processes of one driver tree.

What verl hands its workers (verl/protocol.py: ``DataProto`` holds a ``TensorDict`` batch and numpy object arrays
in ``non_tensor_batch``; its trainers pass ``argparse.Namespace``/OmegaConf configs and functions) travels
through real actor processes, arguments and results both; tensordict is the real package (PyPI 0.15.3).
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import tensordict
import torch

from runtime import ActorHandle
from transport import session_secret

pytestmark = pytest.mark.processes


def _scale(x: float) -> float:
    return 2 * x


def test_namespace_function_and_object_array_round_trip(counter: ActorHandle) -> None:
    config = argparse.Namespace(lr=1e-4, model=argparse.Namespace(layers=2), seeds=[1, 2])
    objects = np.array(["prompt one", {"tool": "calc"}, None], dtype=object)
    args, kwargs = counter.echo(config, _scale, objects, fn=lambda x: x + 1).result(30)
    assert args[0] == config and args[1](3.0) == 6.0 and kwargs["fn"](1) == 2
    assert args[2].dtype == object and list(args[2]) == list(objects)


def test_a_tensordict_with_large_tensors_round_trips(counter: ActorHandle) -> None:
    batch = tensordict.TensorDict(
        {"input_ids": torch.arange(4 << 20).reshape(1024, -1), "mask": torch.ones(1024, 16, dtype=torch.bool)},
        batch_size=[1024],
    )
    args, _ = counter.echo(batch).result(60)
    out = args[0]
    assert isinstance(out, tensordict.TensorDict) and out.batch_size == torch.Size([1024])
    assert torch.equal(out["input_ids"], batch["input_ids"]) and torch.equal(out["mask"], batch["mask"])


def test_an_actor_without_the_drivers_secret_refuses_and_says_why(
    counter: ActorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller outside the tree (another secret) is refused; the actor keeps serving the tree's callers."""
    own = session_secret.ensure()
    monkeypatch.setenv(session_secret.SECRET_ENV, "11" * 32)
    with pytest.raises(Exception, match="MAC is not this session's"):
        counter.echo(argparse.Namespace(x=1)).result(30)
    monkeypatch.setenv(session_secret.SECRET_ENV, own)
    assert counter.echo(argparse.Namespace(x=1)).result(30)[0][0].x == 1
