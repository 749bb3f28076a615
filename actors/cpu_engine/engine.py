"""The CPU engine's state and scheduling: a queue of requests, batched onto one compute thread.

Requests that arrive within ``batch_window_s`` of each other (and every prompt of a batched request)
run as one batch. Pausing follows SGLang: ``mode="abort"`` aborts every request in flight,
``in_place``/``retract`` freeze running batches between decode steps; in every mode new requests wait
until ``/continue_generation``, for at most ``pause_wait_timeout_s``, then get a 503 that says so.
Weight updates take the model lock, so they land between two decode steps of a running batch.
Releasing memory is bookkeeping only (weights stay in RAM): while released, generation gets a 503.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from actors import tokenizer
from actors.cpu_engine.generation import Sequence, run_batch
from actors.cpu_engine.metrics import EngineMetrics
from actors.cpu_engine.model import LlamaForCausalLM
from actors.cpu_engine.protocol import GenerationItem, RequestError
from actors.cpu_engine.weights import WeightsError, check_named_tensors, load_named_tensors, read_weights_dir
from actors.weights_group import WeightsGroup, dtype_from_name
from actors.weights_wire import decode_named_tensors

logger = logging.getLogger(__name__)

GENERATION_MEMORY_TAGS = frozenset({"weights", "kv_cache"})
ALL_MEMORY_TAGS = ("weights", "kv_cache", "cuda_graph")
POLL_S = 0.02


class EngineSettings(BaseModel):
    """How one CPU engine behaves; immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: str = Field(description="Reported as the model path; where weights came from.")
    served_model_name: str = "cpu-engine"
    weight_version: str = "default"
    random_seed: int = Field(default=0, description="Seeds sampling for requests without a seed.")
    context_length: int = Field(gt=1, description="Prompt plus completion must fit in this.")
    max_batch_size: int = Field(default=64, gt=0)
    batch_window_s: float = Field(default=0.002, ge=0.0)
    pause_wait_timeout_s: float = Field(default=300.0, gt=0.0)
    health_timeout_s: float = Field(default=30.0, gt=0.0)
    weights_group_timeout_s: float = Field(
        default=120.0, gt=0.0, description="Deadline to join a weight-update group and for each broadcast."
    )


@dataclass(eq=False)
class _Group:
    """The sequences of one HTTP request and the future its handler awaits."""

    sequences: list[Sequence]
    future: asyncio.Future[None]
    finished: bool = False


class CPUEngine:
    """Serves generation and weight updates for one model; use ``async with`` or start()/close()."""

    def __init__(self, model: LlamaForCausalLM, settings: EngineSettings) -> None:
        self.model = model
        self.settings = settings
        self.metrics = EngineMetrics(settings.served_model_name)
        self.model_path = settings.model_path
        self.weight_version = settings.weight_version
        self._model_lock = threading.Lock()
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._pause_mode: str | None = None
        self._released: set[str] = set()
        self._closing = False
        self._in_flight: dict[str, Sequence] = {}
        self._rng = torch.Generator().manual_seed(settings.random_seed)
        self._weights_groups: dict[str, WeightsGroup] = {}
        self._queue: asyncio.Queue[_Group] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpu-engine-compute")
        self._scheduler: asyncio.Task[None] | None = None
        self._num_running = 0
        self.metrics.num_running_reqs.set_function(lambda: self._num_running)
        self.metrics.num_queue_reqs.set_function(lambda: max(0, len(self._in_flight) - self._num_running))

    async def start(self) -> None:
        self._scheduler = asyncio.create_task(self._schedule(), name="cpu-engine-scheduler")

    async def close(self) -> None:
        """Abort everything in flight, stop the scheduler and the compute thread."""
        self._closing = True
        self.abort(abort_all=True, reason="engine shutting down")
        if self._scheduler is not None:
            self._scheduler.cancel()
            await asyncio.gather(self._scheduler, return_exceptions=True)
        while not self._queue.empty():
            group = self._queue.get_nowait()
            if not group.future.done():
                group.future.set_exception(RequestError("engine shutting down", status=503))
        self._executor.shutdown(wait=True, cancel_futures=True)
        for name in list(self._weights_groups):
            self._drop_group(name)

    async def __aenter__(self) -> CPUEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def paused(self) -> bool:
        return not self._unpaused.is_set()

    # generation ---------------------------------------------------------------------------------

    async def generate(self, items: list[GenerationItem]) -> list[dict[str, Any]]:
        """Complete every item (one batch); results in SGLang's ``/generate`` shape, in order."""
        self._check_can_generate()
        clash = [item.rid for item in items if item.rid in self._in_flight]
        if clash:
            raise RequestError(f"rid {clash[0]!r} is already in flight; rids must be unique")
        sequences = [self._new_sequence(item) for item in items]
        for seq in sequences:
            self._in_flight[seq.item.rid] = seq
        try:
            await self._wait_until_unpaused(sequences)
            self._check_can_generate()
            group = _Group(sequences, asyncio.get_running_loop().create_future())
            self._queue.put_nowait(group)
            await group.future
        except asyncio.CancelledError:
            for seq in sequences:
                seq.abort_message = seq.abort_message or "client went away"
            raise
        finally:
            for seq in sequences:
                self._in_flight.pop(seq.item.rid, None)
        return [seq.response(self.weight_version) for seq in sequences]

    async def health_generate(self) -> None:
        """One forward of a 1-token prompt, bypassing the queue and pause (a liveness check of the model)."""
        self._check_can_generate()

        def forward() -> None:
            with self._model_lock, torch.inference_mode():
                logits = self.model(torch.tensor([[tokenizer.BOS_ID]]))
            if not torch.isfinite(logits).all():
                raise RequestError("health_generate: the model produced non-finite logits", status=503)

        try:
            await asyncio.wait_for(asyncio.to_thread(forward), self.settings.health_timeout_s)
        except asyncio.TimeoutError as exc:
            raise RequestError(
                f"health_generate: no token within {self.settings.health_timeout_s}s", status=503
            ) from exc

    def abort(self, rid: str = "", *, abort_all: bool = False, reason: str = "aborted by /abort_request") -> int:
        """Abort request ``rid`` (or every request); returns how many sequences were marked."""
        if abort_all:
            targets = list(self._in_flight.values())
        else:
            targets = [self._in_flight[rid]] if rid in self._in_flight else []
        for seq in targets:
            seq.abort_message = seq.abort_message or reason
        if targets:
            logger.info("aborted %d request(s): %s", len(targets), reason)
        return len(targets)

    def pause(self, mode: str) -> int:
        """Pause generation; ``mode="abort"`` also aborts what is in flight (returns how many)."""
        self._pause_mode = mode
        self._unpaused.clear()
        self.metrics.is_paused.set(1)
        aborted = self.abort(abort_all=True, reason="aborted by /pause_generation") if mode == "abort" else 0
        logger.info("generation paused (mode=%s, %d aborted)", mode, aborted)
        return aborted

    def resume(self) -> None:
        self._pause_mode = None
        self._unpaused.set()
        self.metrics.is_paused.set(0)
        logger.info("generation continued")

    # weights and memory ---------------------------------------------------------------------------

    async def update_weights_from_serialized(
        self, payloads: list[str], *, weight_version: str | None, abort_all_requests: bool
    ) -> int:
        """Decode ``actors.weights_wire`` payloads and load them (partial updates allowed)."""

        def decode_and_load() -> int:
            named: list[tuple[str, torch.Tensor]] = []
            for index, payload in enumerate(payloads):
                try:
                    named.extend(decode_named_tensors(payload))
                except Exception as exc:  # untrusted input: base64, unpickling and shape errors alike
                    raise RequestError(
                        f"serialized_named_tensors[{index}] is not an actors.weights_wire payload: {exc}"
                    ) from exc
            return self._load_locked(named, require_all=False)

        return await self._update(decode_and_load, weight_version, abort_all_requests)

    async def update_weights_from_disk(
        self, model_path: str, *, weight_version: str | None, abort_all_requests: bool
    ) -> int:
        """Load a full set of weights from a model directory (see actors.cpu_engine.weights)."""

        def read_and_load() -> int:
            try:
                named = read_weights_dir(model_path)
            except WeightsError as exc:
                raise RequestError(str(exc)) from exc
            return self._load_locked(named, require_all=True)

        count = await self._update(read_and_load, weight_version, abort_all_requests)
        self.model_path = model_path
        return count

    async def init_weights_update_group(
        self, *, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str, backend: str
    ) -> None:
        """Join the trainer's weight-update group as rank ``rank_offset`` (one TP rank here), in a thread."""
        if group_name in self._weights_groups:
            raise RequestError(f"group_name: weight-update group {group_name!r} already exists; destroy it first")
        if backend != "gloo":
            raise RequestError(f"backend: the CPU engine supports 'gloo' only, got {backend!r}")
        if rank_offset >= world_size:
            raise RequestError(f"rank_offset {rank_offset} must be below world_size {world_size}")
        timeout_s = self.settings.weights_group_timeout_s

        def join() -> WeightsGroup:
            return WeightsGroup(
                master_address=master_address,
                master_port=master_port,
                rank=rank_offset,
                world_size=world_size,
                group_name=group_name,
                backend=backend,
                timeout_s=timeout_s,
            )

        try:
            group = await asyncio.wait_for(asyncio.to_thread(join), timeout_s + 5.0)
        except asyncio.TimeoutError as exc:
            raise RequestError(
                f"could not join weight-update group {group_name!r} at {master_address}:{master_port} "
                f"within {timeout_s}s",
                status=504,
            ) from exc
        except Exception as exc:
            raise RequestError(
                f"could not join weight-update group {group_name!r} at {master_address}:{master_port}: {exc}",
                status=500,
            ) from exc
        self._weights_groups[group_name] = group
        logger.info("joined weight-update group %r as rank %d/%d", group_name, rank_offset, world_size)

    async def update_weights_from_distributed(
        self,
        *,
        names: list[str],
        dtypes: list[str],
        shapes: list[list[int]],
        group_name: str,
        weight_version: str | None,
        abort_all_requests: bool,
    ) -> int:
        """Receive the named tensors by broadcast from rank 0, then load them all (or none)."""
        group = self._weights_groups.get(group_name)
        if group is None:
            raise RequestError(f"group_name: no weight-update group {group_name!r}; call /init_weights_update_group")
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
            return self._load_locked(received, require_all=False)

        return await self._update(receive_and_load, weight_version, abort_all_requests)

    def destroy_weights_update_group(self, group_name: str) -> None:
        if group_name not in self._weights_groups:
            raise RequestError(f"group_name: no weight-update group {group_name!r}")
        # abort, not a graceful shutdown: after a refused update the trainer may still have a send pending
        self._drop_group(group_name, abort=True)

    def _drop_group(self, group_name: str, *, abort: bool = False) -> None:
        group = self._weights_groups.pop(group_name, None)
        if group is not None:
            group.close(abort=abort)
            logger.info("left weight-update group %r", group_name)

    def release_memory(self, tags: list[str] | None) -> list[str]:
        """Mark memory released; refused while requests are in flight (as SGLang requires idle)."""
        if self._in_flight:
            raise RequestError(
                f"cannot release memory while {len(self._in_flight)} request(s) are in flight; "
                "pause generation with mode='abort' first"
            )
        self._released.update(tags or ALL_MEMORY_TAGS)
        logger.info("memory released: %s", sorted(self._released))
        return sorted(self._released)

    def resume_memory(self, tags: list[str] | None) -> list[str]:
        self._released.difference_update(tags or ALL_MEMORY_TAGS)
        logger.info("memory resumed; still released: %s", sorted(self._released))
        return sorted(self._released)

    # reports ------------------------------------------------------------------------------------

    def model_info(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "model_path": self.model_path,
            "tokenizer_path": "actors.tokenizer (bytes)",
            "served_model_name": self.settings.served_model_name,
            "is_generation": True,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "weight_version": self.weight_version,
            "preferred_sampling_params": None,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_config": config.model_dump(),
        }

    def server_info(self, host: str, port: int) -> dict[str, Any]:
        return {
            "version": "miles-actors-cpu-engine",
            "model_path": self.model_path,
            "served_model_name": self.settings.served_model_name,
            "host": host,
            "port": port,
            "tp_size": 1,
            "dp_size": 1,
            "context_length": self.settings.context_length,
            "random_seed": self.settings.random_seed,
            "max_running_requests": self.settings.max_batch_size,
            "weight_version": self.weight_version,
            "internal_states": [
                {
                    "paused": self.paused,
                    "pause_mode": self._pause_mode,
                    "released_memory": sorted(self._released),
                    "num_in_flight": len(self._in_flight),
                    "weight_version": self.weight_version,
                }
            ],
        }

    # internals ------------------------------------------------------------------------------------

    def _check_can_generate(self) -> None:
        if self._closing:
            raise RequestError("engine shutting down", status=503)
        released = GENERATION_MEMORY_TAGS & self._released
        if released:
            raise RequestError(
                f"memory is released ({', '.join(sorted(released))}); call /resume_memory_occupation first",
                status=503,
            )

    def _new_sequence(self, item: GenerationItem) -> Sequence:
        seed = item.params.effective_seed
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,), generator=self._rng))
        room = self.settings.context_length - len(item.input_ids)
        return Sequence(
            item=item,
            generator=torch.Generator().manual_seed(seed),
            max_new_tokens=room if item.params.max_new_tokens is None else min(item.params.max_new_tokens, room),
        )

    async def _wait_until_unpaused(self, sequences: list[Sequence]) -> None:
        deadline = time.monotonic() + self.settings.pause_wait_timeout_s
        while not self._unpaused.is_set():
            if all(seq.abort_message is not None for seq in sequences):
                return  # run_batch finishes them as aborted right away
            if time.monotonic() >= deadline:
                raise RequestError(
                    f"generation is paused and was not continued within "
                    f"{self.settings.pause_wait_timeout_s}s; call /continue_generation",
                    status=503,
                )
            await asyncio.sleep(POLL_S)

    def _hold_while_paused(self, live: list[Sequence]) -> None:
        """Compute thread, between decode steps: hold a paused batch until continued or aborted."""
        while not self._unpaused.wait(POLL_S):
            if self._closing or all(seq.abort_message is not None for seq in live):
                return

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            groups = [await self._queue.get()]
            if self.settings.batch_window_s:
                await asyncio.sleep(self.settings.batch_window_s)
            size = len(groups[0].sequences)
            while not self._queue.empty() and size < self.settings.max_batch_size:
                groups.append(self._queue.get_nowait())
                size += len(groups[-1].sequences)
            self._num_running = size
            started = time.monotonic()
            error: RequestError | None = None
            try:
                await loop.run_in_executor(self._executor, self._run, groups, loop)
            except asyncio.CancelledError:
                error = RequestError("engine shutting down", status=503)
                raise
            except Exception as exc:
                logger.exception("batch of %d sequences failed", size)
                error = RequestError(f"generation failed: {exc!r}", status=500)
            finally:
                self._num_running = 0
                elapsed = time.monotonic() - started
                generated = sum(len(seq.output_ids) for group in groups for seq in group.sequences)
                self.metrics.gen_throughput.set(generated / elapsed if elapsed > 0 else 0.0)
                for group in groups:
                    self._finish_group(group, error)

    def _run(self, groups: list[_Group], loop: asyncio.AbstractEventLoop) -> None:
        """Compute thread: run one batch; each request is answered as soon as its sequences are done."""
        waiting = list(groups)

        def before_step(live: list[Sequence]) -> None:
            nonlocal waiting
            done = [group for group in waiting if all(seq.done for seq in group.sequences)]
            if done:
                waiting = [group for group in waiting if group not in done]
                for group in done:
                    try:
                        loop.call_soon_threadsafe(self._finish_group, group, None)
                    except RuntimeError:  # the loop is closed: nobody is waiting any more
                        return
            self._hold_while_paused(live)

        sequences = [seq for group in groups for seq in group.sequences]
        run_batch(self.model, sequences, model_lock=self._model_lock, before_step=before_step)

    def _finish_group(self, group: _Group, error: RequestError | None) -> None:
        """Event loop: answer one request (once) and record its metrics."""
        if group.finished:
            return
        group.finished = True
        now = time.monotonic()
        for seq in group.sequences:
            self.metrics.generation_tokens.inc(len(seq.output_ids))
            self.metrics.prompt_tokens.inc(len(seq.item.input_ids))
            self.metrics.num_requests.inc()
            self.metrics.e2e_request_latency.observe(now - seq.created_at)
            if seq.finish_reason and seq.finish_reason["type"] == "abort":
                self.metrics.num_aborted_requests.inc()
        if group.future.done():
            return
        if error is None:
            group.future.set_result(None)
        else:
            group.future.set_exception(error)

    async def _update(self, load: Any, weight_version: str | None, abort_all_requests: bool) -> int:
        if abort_all_requests:
            self.abort(abort_all=True, reason="aborted by a weight update (abort_all_requests)")
        count = await asyncio.to_thread(load)
        if weight_version is not None:
            self.weight_version = weight_version
        self.metrics.weight_updates.inc()
        logger.info("loaded %d tensors; weight_version=%s", count, self.weight_version)
        return count

    def _load_locked(self, named: list[tuple[str, torch.Tensor]], *, require_all: bool) -> int:
        try:
            checked = check_named_tensors(self.model.config, named, require_all=require_all)
        except WeightsError as exc:
            raise RequestError(str(exc)) from exc
        with self._model_lock:
            return load_named_tensors(self.model, checked)
