"""Sending exported HF weights to inference engines over SGLang's HTTP API (the CPU path)."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from torch import Tensor

from actors.trainer.errors import WeightPushError
from actors.weights_group import WeightsGroup, dtype_name
from actors.weights_wire import encode_named_tensors

logger = logging.getLogger(__name__)

UPDATE_PATH = "/update_weights_from_tensor"
BEGIN_PATH = "/begin_weight_update"
END_PATH = "/end_weight_update"


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


# POST /update_weights_from_tensor per bucket, the cache flushed and the version set on the last one only. As
# SGLang 0.5.23's scheduler requires (scheduler_components/weight_updater.py), tensor and distributed updates run
# between /begin_weight_update and /end_weight_update; the session is closed even when a bucket fails.
def push_to_engines(
    urls: Sequence[str],
    pairs: Sequence[tuple[str, Tensor]],
    *,
    weight_version: str,
    bucket_bytes: int | None,
    timeout_s: float,
    flush_cache: bool = True,
) -> list[dict[str, object]]:
    """Send ``pairs`` to every engine in turn; returns each engine's last reply. Stops at the first error.
    ``flush_cache`` (on the last request): False under an ``in_place`` pause (its requests keep their KV)."""
    chunks = buckets(pairs, bucket_bytes)
    encoded = [encode_named_tensors(chunk) for chunk in chunks]  # encode once, reuse for every engine
    replies: list[dict[str, object]] = []
    for url in urls:
        endpoint = url.rstrip("/") + UPDATE_PATH
        reply: dict[str, object] = {}
        post_json(url.rstrip("/") + BEGIN_PATH, {}, timeout_s=timeout_s)
        try:
            for index, payload in enumerate(encoded):
                last = index == len(encoded) - 1
                body: dict[str, object] = {"serialized_named_tensors": [payload], "flush_cache": last and flush_cache}
                if last:
                    body["weight_version"] = weight_version
                reply = post_json(endpoint, body, timeout_s=timeout_s)
        finally:
            _end_session(url.rstrip("/"), timeout_s)
        logger.info(
            "pushed %d tensors (%d request(s)) to %s as version %s",
            len(pairs),
            len(encoded),
            url,
            weight_version,
        )
        replies.append(reply)
    return replies


INIT_GROUP_PATH = "/init_weights_update_group"
DISTRIBUTED_PATH = "/update_weights_from_distributed"
DESTROY_GROUP_PATH = "/destroy_weights_update_group"
GROUP_NAME = "miles_weight_update"
POLL_S = 0.02


# Real SGLang's serialized_named_tensors carries CUDA IPC handles, valid on one host only. Across hosts, SGLang's
# distributed protocol: rank 0 hosts a torch.distributed group (/init_weights_update_group), posts each bucket's
# metadata to /update_weights_from_distributed and broadcasts its tensors, then /destroy_weights_update_group.
# gloo on CPU (the CPU engine), nccl with real SGLang on GPUs; the trainer code is the same.
def push_over_group(
    urls: Sequence[str],
    pairs: Sequence[tuple[str, Tensor]],
    *,
    weight_version: str,
    master_address: str,
    master_port: int,
    backend: str,
    bucket_bytes: int | None,
    timeout_s: float,
    group_name: str = GROUP_NAME,
    flush_cache: bool = True,
) -> list[dict[str, object]]:
    """Broadcast ``pairs`` to every engine over a torch.distributed group (SGLang's distributed protocol).

    The caller is rank 0 of a group of ``1 + len(urls)`` ranks (engine ``i`` is rank ``1 + i``; one TP rank
    per engine). Every HTTP request runs in a thread while this thread joins the group or broadcasts;
    returns each engine's last ``/update_weights_from_distributed`` reply; raises :class:`WeightPushError`
    naming the engine that failed. The group is destroyed on both sides in every case (best effort).
    """
    if not urls:
        return []
    endpoints = [url.rstrip("/") for url in urls]
    world_size = 1 + len(endpoints)
    chunks = [chunk for chunk in buckets(pairs, bucket_bytes) if chunk]
    deadline = time.monotonic() + timeout_s * (2 + len(chunks))
    pool = ThreadPoolExecutor(max_workers=1 + len(endpoints), thread_name_prefix="weights-push")
    group: WeightsGroup | None = None
    joined: list[str] = []
    in_session: list[str] = []
    pushed = False
    try:
        init_body = {
            "master_address": master_address,
            "master_port": master_port,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }
        inits = {
            url: pool.submit(post_json, url + INIT_GROUP_PATH, {**init_body, "rank_offset": 1 + i}, timeout_s=timeout_s)
            for i, url in enumerate(endpoints)
        }
        hosting = pool.submit(
            WeightsGroup,
            master_address=master_address,
            master_port=master_port,
            rank=0,
            world_size=world_size,
            group_name=group_name,
            backend=backend,
            timeout_s=timeout_s,
        )
        try:
            while not hosting.done():  # an engine that refuses to join fails the push now, not at the timeout
                joined = [url for url, future in inits.items() if future.done() and future.exception() is None]
                _fail_fast(inits)
                time.sleep(POLL_S)
            group = hosting.result()
        except WeightPushError:
            raise
        except Exception as exc:
            _collect(inits, deadline)  # an engine's refusal explains a failed join best
            raise WeightPushError(
                f"trainer could not host weight-update group {group_name!r} at {master_address}:{master_port} "
                f"for {', '.join(endpoints)}: {exc}"
            ) from exc
        _collect(inits, deadline)
        joined = list(endpoints)
        begins = {url: pool.submit(post_json, url + BEGIN_PATH, {}, timeout_s=timeout_s) for url in endpoints}
        in_session = list(endpoints)  # ended in every case; an engine whose begin failed just says so
        _collect(begins, deadline)
        replies: dict[str, dict[str, object]] = {}
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            body: dict[str, object] = {
                "names": [name for name, _ in chunk],
                "dtypes": [dtype_name(tensor.dtype) for _, tensor in chunk],
                "shapes": [list(tensor.shape) for _, tensor in chunk],
                "group_name": group_name,
                "flush_cache": last and flush_cache,
            }
            if last:
                body["weight_version"] = weight_version
            updates = {
                url: pool.submit(post_json, url + DISTRIBUTED_PATH, body, timeout_s=timeout_s) for url in endpoints
            }
            for name, tensor in chunk:
                try:
                    _broadcast(group, tensor.detach().to(group.device).contiguous(), updates, timeout_s)
                except WeightPushError:
                    raise
                except Exception as exc:
                    _collect(updates, deadline)
                    raise WeightPushError(
                        f"broadcasting {name!r} to {', '.join(endpoints)} failed (timeout {timeout_s}s): {exc}"
                    ) from exc
            replies = _collect(updates, deadline)
        logger.info(
            "pushed %d tensors (%d bucket(s)) over %s group %r to %s as version %s",
            len(pairs), len(chunks), backend, group_name, ", ".join(endpoints), weight_version,
        )  # fmt: skip
        pushed = True
        return [replies.get(url, {}) for url in endpoints]
    finally:
        for url in in_session:
            _end_session(url, timeout_s)
        # Engines leave first: a pending send of ours then fails at once instead of blocking our abort.
        for url in joined:
            try:
                post_json(url + DESTROY_GROUP_PATH, {"group_name": group_name}, timeout_s=timeout_s)
            except WeightPushError as exc:
                logger.warning("could not destroy weight-update group on %s: %s", url, exc)
        if group is not None:
            group.close(abort=not pushed)
        pool.shutdown(wait=False, cancel_futures=True)


def _end_session(url: str, timeout_s: float) -> None:
    """Close the engine's weight-update session (best effort: logged, never raised)."""
    try:
        post_json(url + END_PATH, {}, timeout_s=timeout_s)
    except WeightPushError as exc:
        logger.warning("could not end the weight-update session on %s: %s", url, exc)


def _broadcast(
    group: WeightsGroup, tensor: Tensor, updates: dict[str, Future[dict[str, object]]], timeout_s: float
) -> None:
    """Broadcast one tensor, failing at once if an engine refuses the request meanwhile (it will not receive)."""
    work = group.start_broadcast(tensor)
    deadline = time.monotonic() + timeout_s
    pause = 0.0
    while not work.is_completed():
        _fail_fast(updates)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no engine took the tensor within {timeout_s}s")
        time.sleep(pause)
        pause = min(POLL_S, pause + 0.001)
    work.wait()  # raises the backend's error, if any


def _fail_fast(futures: dict[str, Future[dict[str, object]]]) -> None:
    """Raise now if an engine already refused (it will not receive what is broadcast next)."""
    for future in futures.values():
        if future.done() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]  # a WeightPushError naming the URL


def _collect(futures: dict[str, Future[dict[str, object]]], deadline: float) -> dict[str, dict[str, object]]:
    """Every reply, by URL; raises the first :class:`WeightPushError` (it names its engine)."""
    replies: dict[str, dict[str, object]] = {}
    for url, future in futures.items():
        try:
            replies[url] = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout as exc:
            raise WeightPushError(f"{url} did not answer before the push deadline") from exc
    return replies
