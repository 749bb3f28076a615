"""Sending exported HF weights to inference engines over SGLang's HTTP API (the CPU path).

``POST {url}/update_weights_from_tensor`` with ``{"serialized_named_tensors": [encode_named_tensors(pairs)],
"flush_cache": ..., "weight_version": ...}``; weights may go in several requests (buckets), with the cache
flushed and the version set on the last one only.

Design note (GPU): real SGLang's ``serialized_named_tensors`` carries CUDA IPC handles, valid only on
the same host. Across hosts the trainer's TP leader joins a torch.distributed/NCCL group with the engines
(``/init_weights_update_group`` then ``/update_weights_from_distributed``) and broadcasts each tensor;
that path needs GPUs and is not implemented in this module.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence

from torch import Tensor

from actors.trainer.errors import WeightPushError
from actors.weights_wire import encode_named_tensors

logger = logging.getLogger(__name__)

UPDATE_PATH = "/update_weights_from_tensor"


def buckets(pairs: Sequence[tuple[str, Tensor]], bucket_bytes: int | None) -> list[list[tuple[str, Tensor]]]:
    """Split ``pairs`` into runs of at most ``bucket_bytes`` (a tensor bigger than that goes alone)."""
    if bucket_bytes is None:
        return [list(pairs)]
    out: list[list[tuple[str, Tensor]]] = [[]]
    size = 0
    for name, tensor in pairs:
        nbytes = tensor.numel() * tensor.element_size()
        if out[-1] and size + nbytes > bucket_bytes:
            out.append([])
            size = 0
        out[-1].append((name, tensor))
        size += nbytes
    return out


def post_json(url: str, body: dict[str, object], *, timeout_s: float) -> dict[str, object]:
    """POST ``body`` as JSON; returns the decoded reply or raises :class:`WeightPushError`."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise WeightPushError(f"{url} answered HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise WeightPushError(f"{url} unreachable or too slow (timeout {timeout_s}s): {exc}") from exc
    try:
        reply = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise WeightPushError(f"{url} answered non-JSON: {raw[:200]!r}") from exc
    if isinstance(reply, dict) and reply.get("success") is False:
        raise WeightPushError(f"{url} refused the weights: {reply.get('message', reply)}")
    return reply if isinstance(reply, dict) else {"reply": reply}


def push_to_engines(
    urls: Sequence[str],
    pairs: Sequence[tuple[str, Tensor]],
    *,
    weight_version: str,
    bucket_bytes: int | None,
    timeout_s: float,
) -> list[dict[str, object]]:
    """Send ``pairs`` to every engine in turn; returns each engine's last reply. Stops at the first error."""
    chunks = buckets(pairs, bucket_bytes)
    encoded = [encode_named_tensors(chunk) for chunk in chunks]  # encode once, reuse for every engine
    replies: list[dict[str, object]] = []
    for url in urls:
        endpoint = url.rstrip("/") + UPDATE_PATH
        reply: dict[str, object] = {}
        for index, payload in enumerate(encoded):
            last = index == len(encoded) - 1
            body: dict[str, object] = {"serialized_named_tensors": [payload], "flush_cache": last}
            if last:
                body["weight_version"] = weight_version
            reply = post_json(endpoint, body, timeout_s=timeout_s)
        logger.info(
            "pushed %d tensors (%d request(s)) to %s as version %s",
            len(pairs),
            len(encoded),
            url,
            weight_version,
        )
        replies.append(reply)
    return replies
