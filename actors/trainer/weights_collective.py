"""Sending the trainer's weights to engines over collective refs: no HTTP body, no pickle, no actor transport."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from torch import Tensor

import runtime
from actors.trainer.errors import WeightPushError
from actors.trainer.weights_push import buckets, post_json
from runtime import ActorError, ActorHandle, collective

logger = logging.getLogger(__name__)

VERSION_PATH = "/update_weight_version"


# The trainer (global rank 0) and the engines are one collective group, the trainer first. Per bucket of
# HF-named tensors the trainer puts a device-resident ref with one reader per engine; each engine pulls it into its
# live parameters and frees it, and wait_freed lets the bucket go before the next, so at most one is held. Then the
# version is set on each engine (POST /update_weight_version). gloo moves CPU tensors; nccl moves CUDA tensors (the
# bucket goes to the trainer's GPU first; scripts/gpu_collective_check.py).
def push_over_refs(
    engines: Sequence[ActorHandle],
    pairs: Sequence[tuple[str, Tensor]],
    *,
    weight_version: str,
    group: str | None,
    bucket_bytes: int | None,
    timeout_s: float,
) -> list[dict[str, object]]:
    """Every engine pulls every bucket, then gets ``weight_version``; returns each engine's version reply with
    ``loaded`` (tensors it loaded). Raises :class:`WeightPushError` naming the engine that failed."""
    if not engines:
        return []
    member = collective.member(group) if group is not None else None
    device = "cuda" if member is not None and member.backend == "nccl" else "cpu"
    urls = [_answer(engine, engine.url(), timeout_s, "report its URL") for engine in engines]
    chunks = [chunk for chunk in buckets(pairs, bucket_bytes) if chunk]
    loaded = [0] * len(engines)
    for index, chunk in enumerate(chunks):
        bucket = {name: tensor.detach().to(device) for name, tensor in chunk}
        ref = runtime.put(bucket, transport="collective", group=group, readers=len(engines))
        last = index == len(chunks) - 1
        calls = [engine.pull_weights([ref], last, timeout_s) for engine in engines]
        for i, (engine, call) in enumerate(zip(engines, calls, strict=True)):
            loaded[i] += _answer(engine, call, timeout_s + 15, f"pull bucket {index + 1}/{len(chunks)}")
        try:
            collective.wait_freed([ref], timeout=timeout_s)
        except (ActorError, TimeoutError) as exc:
            raise WeightPushError(f"bucket {index + 1}/{len(chunks)} was not freed by every engine: {exc}") from exc
    replies = []
    for url, count in zip(urls, loaded, strict=True):
        reply = post_json(url.rstrip("/") + VERSION_PATH, {"new_version": weight_version}, timeout_s=timeout_s)
        replies.append({**reply, "loaded": count})
    logger.info(
        "pushed %d tensors (%d bucket(s)) over collective refs to %d engine(s) as version %s",
        len(pairs), len(chunks), len(engines), weight_version,
    )  # fmt: skip
    return replies


def _answer(engine: ActorHandle, call: runtime.PendingCall, timeout_s: float, what: str) -> object:
    try:
        return call.result(timeout=timeout_s)
    except (ActorError, TimeoutError) as exc:
        raise WeightPushError(f"engine {engine.actor_name} could not {what}: {exc}") from exc
