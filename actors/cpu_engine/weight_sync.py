"""The CPU engine's weight updates, as SGLang 0.5.23's scheduler does them
(``srt/managers/scheduler_components/weight_updater.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping

import torch

from actors.cpu_engine.generation import Sequence
from actors.cpu_engine.metrics import EngineMetrics
from actors.cpu_engine.model import LlamaForCausalLM
from actors.cpu_engine.prefix_cache import PrefixCache
from actors.cpu_engine.protocol import RequestError
from actors.cpu_engine.ref_weights import ref_loader
from actors.cpu_engine.settings import EngineSettings
from actors.cpu_engine.update_lock import ModelUpdateLock, UpdateLockTimeout
from actors.cpu_engine.weight_versions import VersionEvent
from actors.cpu_engine.weights import (
    WeightsError,
    check_named_tensors,
    check_same_architecture,
    load_named_tensors,
    read_weights_dir,
)
from actors.weights_group import WeightsGroup, dtype_from_name
from actors.weights_wire import decode_named_tensors
from runtime import TensorRef, within

logger = logging.getLogger(__name__)

TP_RANK = 0  # the CPU engine is one TP rank
# srt/managers/scheduler_components/weight_updater.py flush_cache_after_weight_update: the weights are loaded, the
# call fails (400) when requests still run or wait (not while paused) and flush_cache was asked for.
FLUSH_AFTER_UPDATE_REFUSED = (
    "Weights were updated, but the cache was not flushed because requests are still running or queued. "
    "Retract or finish them, then call /flush_cache."
)
# /update_weights_from_tensor and /update_weights_from_distributed run only inside a session (one at a time);
# /update_weights_from_disk and pulls of collective refs run any time.
SESSION_REQUIRED = "{what} must run between begin_weight_update() and end_weight_update()"


class WeightSync:
    """The engine's weights: their version and origin, the update session, the weight-update groups, and every way
    of loading new weights into the live model (the engine's scheduling is consulted through the callables given).

    ``selector`` picks the runners ("target", "draft" or "all"); the CPU engine has no draft model, so "draft"
    loads nothing.
    """

    def __init__(
        self,
        model: LlamaForCausalLM,
        settings: EngineSettings,
        *,
        model_lock: threading.Lock,
        update_lock: ModelUpdateLock,
        prefix_cache: PrefixCache,
        metrics: EngineMetrics,
        in_flight: Mapping[str, Sequence],
        paused: Callable[[], bool],
        idle: Callable[[], bool],
        abort: Callable[..., int],
        batch_running: Callable[[], bool],
    ) -> None:
        """The model, its lock, SGLang's model update lock, the prefix cache and the metrics are the engine's, shared;
        ``in_flight`` (read here): its live sequences by rid; ``paused``, ``idle`` (SGLang's
        is_fully_idle(ignore_waiting=paused)), ``abort`` and ``batch_running`` (a batch runs and is not held between
        decode steps): its scheduler's."""
        self.model = model
        self.settings = settings
        self._model_lock = model_lock
        self._update_lock = update_lock
        self._prefix_cache = prefix_cache
        self._metrics = metrics
        self._in_flight = in_flight
        self._paused = paused
        self._idle = idle
        self._abort = abort
        self._batch_running = batch_running
        self.weight_version = settings.weight_version
        self.model_path = settings.model_path
        self.served_model_name = settings.served_model_name
        self._weights_groups: dict[str, WeightsGroup] = {}
        self._session_selector: str | None = None

    @property
    def session_open(self) -> bool:
        """Whether a weight-update session (begin_weight_update .. end_weight_update) is open."""
        return self._session_selector is not None

    # ---- sessions and versions (SGLang: begin_weight_update / end_weight_update / update_weight_version) ----

    def begin_weight_update(self, selector: str) -> None:
        if self._session_selector is not None:
            raise RequestError("a weight-update session is already open; call end_weight_update() first")
        self._session_selector = selector

    def end_weight_update(self) -> None:
        if self._session_selector is None:
            raise RequestError("no weight-update session is open; call begin_weight_update() first")
        self._session_selector = None

    def set_weight_version(self, version: str, *, abort_all_requests: bool) -> None:
        if abort_all_requests:
            self._abort(abort_all=True, reason="aborted by /update_weight_version")
        self.record_version_change(version)

    def record_version_change(self, new_version: str | None) -> None:
        """SGLang's ``record_weight_version_change``: live requests with output remember who made it so far."""
        if new_version is None or new_version == self.weight_version:
            return
        for seq in list(self._in_flight.values()):
            if seq.output_ids:
                seq.version_events.append(VersionEvent(self.weight_version, len(seq.output_ids)))
        self.weight_version = new_version

    def weights_by_name(self, name: str, truncate_size: int) -> list[float] | list[list[float]]:
        """SGLang's ``get_weights_by_name``: the first ``truncate_size`` rows (or values) as nested floats."""
        params = dict(self.model.named_parameters())
        if name not in params:
            raise RequestError(
                f"Get parameter by name failed: no parameter {name!r} (HF names such as 'model.norm.weight')"
            )
        with self._model_lock:
            return params[name].detach()[:truncate_size].float().tolist()

    # ---- updates ---------------------------------------------------------------------------------------

    async def update_weights_from_serialized(
        self, payloads: list[str], *, selector: str, weight_version: str | None, flush: bool, abort_all: bool
    ) -> int:
        """Decode ``actors.weights_wire`` payloads and load them (partial updates allowed)."""
        self._require_session("update_weights_from_tensor")

        def decode_and_load() -> int:
            named: list[tuple[str, torch.Tensor]] = []
            for index, payload in enumerate(payloads):
                try:
                    named.extend(decode_named_tensors(payload))
                except Exception as exc:  # untrusted input: base64, unpickling and shape errors alike
                    raise RequestError(
                        f"serialized_named_tensors[{index}] is not an actors.weights_wire payload: {exc}"
                    ) from exc
            return self._load_locked(named, require_all=False) if selector != "draft" else 0

        return await self._update(decode_and_load, weight_version, flush, abort_all)

    async def update_weights_from_disk(
        self, model_path: str, *, weight_version: str | None, flush: bool, abort_all: bool
    ) -> int:
        """Load a full set of weights from a model directory (see actors.cpu_engine.weights).

        As SGLang's ``tokenizer_manager._update_model_path_info``, the model path and the served model name
        become ``model_path`` afterwards.
        """

        def read_and_load() -> int:
            try:
                check_same_architecture(self.model.config, model_path)
                named = read_weights_dir(model_path)
            except WeightsError as exc:
                raise RequestError(str(exc)) from exc
            return self._load_locked(named, require_all=True)

        count = await self._update(read_and_load, weight_version, flush, abort_all)
        self.model_path = self.served_model_name = model_path
        return count

    async def init_weights_update_group(
        self, *, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str, backend: str
    ) -> None:
        """Join the trainer's group as rank ``rank_offset + tp_rank`` (SGLang's weight_updater), in a thread; the
        rendezvous is :class:`actors.weights_group.WeightsGroup` (SGLang's ``init_custom_process_group``)."""
        if group_name in self._weights_groups:
            raise RequestError(f"group_name: weight-update group {group_name!r} already exists; destroy it first")
        if backend != "gloo":
            raise RequestError(f"backend: the CPU engine supports 'gloo' only, got {backend!r}")
        rank = rank_offset + TP_RANK
        if rank >= world_size:
            raise RequestError(f"rank_offset {rank_offset} must be below world_size {world_size}")
        timeout_s = self.settings.weights_group_timeout_s
        where = f"weight-update group {group_name!r} at {master_address}:{master_port}"

        def join() -> WeightsGroup:
            return WeightsGroup(
                master_address=master_address,
                master_port=master_port,
                rank=rank,
                world_size=world_size,
                group_name=group_name,
                backend=backend,
                timeout_s=timeout_s,
            )

        try:
            group = await within(asyncio.to_thread(join), timeout_s + 5.0)
        except TimeoutError as exc:
            raise RequestError(
                f"Failed to initialize custom process group: {where}: no join within {timeout_s}s"
            ) from exc
        except Exception as exc:
            raise RequestError(f"Failed to initialize custom process group: {where}: {exc}") from exc
        self._weights_groups[group_name] = group
        logger.info("joined weight-update group %r as rank %d/%d", group_name, rank, world_size)

    async def update_weights_from_distributed(
        self,
        *,
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
        group_name: str,
        load_format: str | None,
        selector: str,
        weight_version: str | None,
        flush: bool,
        abort_all: bool,
    ) -> int:
        """Receive the named tensors by broadcast from rank 0, then load them all (or none)."""
        self._require_session("update_weights_from_distributed")
        group = self._weights_groups.get(group_name)
        if group is None:
            raise RequestError(f"group_name: no weight-update group {group_name!r}; call /init_weights_update_group")
        if load_format is not None:
            raise RequestError(f"load_format: the CPU engine receives tensors one by one (null), not {load_format!r}")
        if not len(names) == len(dtypes) == len(shapes):
            raise RequestError(
                f"names, dtypes and shapes must have the same length, got {len(names)}, {len(dtypes)}, {len(shapes)}"
            )
        empties: list[tuple[str, torch.Tensor]] = []
        for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
            try:
                empties.append((name, torch.empty(shape, dtype=dtype_from_name(dtype), device="meta")))
            except (ValueError, RuntimeError, TypeError) as exc:
                raise RequestError(f"parameter {name!r}: {exc}") from exc
        try:  # refuse before receiving anything: nothing has been broadcast into this engine yet
            check_named_tensors(self.model.config, empties, require_all=False)
        except WeightsError as exc:
            raise RequestError(str(exc)) from exc

        def receive_and_load() -> int:
            received: list[tuple[str, torch.Tensor]] = []
            for name, meta in empties:
                tensor = torch.empty(meta.shape, dtype=meta.dtype)
                try:
                    group.broadcast(tensor)
                except Exception as exc:
                    self._drop_group(group_name, abort=True)  # out of step with the trainer: unusable
                    raise RequestError(
                        f"receiving parameter {name!r} in group {group_name!r} failed: {exc}", status=500
                    ) from exc
                received.append((name, tensor))
            return self._load_locked(received, require_all=False) if selector != "draft" else 0

        return await self._update(receive_and_load, weight_version, flush, abort_all)

    async def update_weights_from_refs(
        self, refs: list[TensorRef], *, weight_version: str | None, flush: bool, timeout_s: float
    ) -> int:
        """Pull collective refs into the live parameters (actors.cpu_engine.ref_weights); any time, as from disk."""
        try:
            load = ref_loader(self.model, self._model_lock, refs, timeout_s)
        except WeightsError as exc:  # refused before any byte moved
            raise RequestError(str(exc)) from exc
        return await self._update(load, weight_version, flush, abort_all=False)

    def destroy_weights_update_group(self, group_name: str) -> None:
        if group_name not in self._weights_groups:
            raise RequestError("The group to be destroyed does not exist.")
        # abort, not a graceful shutdown: after a refused update the trainer may still have a send pending
        self._drop_group(group_name, abort=True)

    def close_weights_groups(self) -> None:
        for name in list(self._weights_groups):
            self._drop_group(name)

    # ---- internals -------------------------------------------------------------------------------------

    def _require_session(self, what: str) -> None:
        if self._session_selector is None:
            raise RequestError(SESSION_REQUIRED.format(what=what))

    def _drop_group(self, group_name: str, *, abort: bool = False) -> None:
        group = self._weights_groups.pop(group_name, None)
        if group is not None:
            group.close(abort=abort)
            logger.info("left weight-update group %r", group_name)

    async def _update(self, load: Callable[[], int], weight_version: str | None, flush: bool, abort_all: bool) -> int:
        """SGLang's tokenizer_manager.update_weights_from_*: ``abort_all_requests`` aborts first; unless generation
        is paused the update takes ``model_update_lock.writer_lock``, so the aborted (or still running) requests
        end before the weights load and the cache flush finds the engine idle."""
        if abort_all:
            self._abort(abort_all=True, reason="aborted by a weight update (abort_all_requests)")
        if self._paused():
            await self._until_batch_held()
            count = await self._load_and_record(load, weight_version)
            if flush:  # SGLang's flush_cache_after_weight_update: a flush that cannot happen fails the call
                if not self._idle():
                    raise RequestError(FLUSH_AFTER_UPDATE_REFUSED)
                self._prefix_cache.flush()
            return count
        try:
            async with self._update_lock.writer(self.settings.pause_wait_timeout_s):
                count = await self._load_and_record(load, weight_version)
                if flush:  # the writer holds the lock: nothing runs, new requests wait for it (not scheduled)
                    self._prefix_cache.flush()
        except UpdateLockTimeout as exc:
            raise RequestError(f"{exc}; pause generation or abort the requests first", status=503) from exc
        return count

    async def _load_and_record(self, load: Callable[[], int], weight_version: str | None) -> int:
        """Load; only once that succeeded is the new version recorded."""
        count = await asyncio.to_thread(load)
        self.record_version_change(weight_version)
        self._metrics.weight_updates.inc()
        logger.info("loaded %d tensors; weight_version=%s", count, self.weight_version)
        return count

    async def _until_batch_held(self) -> None:
        """Paused: a running batch stops between decode steps; load after it does, so every token before the
        change came from the old weights (SGLang's scheduler updates between steps)."""
        deadline = time.monotonic() + self.settings.pause_wait_timeout_s
        while self._batch_running() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def _load_locked(self, named: list[tuple[str, torch.Tensor]], *, require_all: bool) -> int:
        try:
            checked = check_named_tensors(self.model.config, named, require_all=require_all)
        except WeightsError as exc:
            raise RequestError(str(exc)) from exc
        with self._model_lock:
            return load_named_tensors(self.model, checked)
