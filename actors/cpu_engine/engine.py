"""The CPU engine's state and scheduling: a queue of requests, batched onto one compute thread."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from actors.cpu_engine.generation import Sequence, run_batch
from actors.cpu_engine.metrics import EngineMetrics
from actors.cpu_engine.model import LlamaForCausalLM
from actors.cpu_engine.prefix_cache import PrefixCache
from actors.cpu_engine.protocol import GenerationItem, RequestError
from actors.cpu_engine.released_memory import ReleasedMemory
from actors.cpu_engine.settings import EngineSettings
from actors.cpu_engine.update_lock import ModelUpdateLock, UpdateLockTimeout
from actors.cpu_engine.weight_sync import WeightSync
from actors.tokenizer import BYTE_TOKENIZER, Tokenizer
from runtime import within

logger = logging.getLogger(__name__)

POLL_S = 0.02


@dataclass(eq=False)
class _Group:
    """The sequences of one HTTP request and the future its handler awaits."""

    sequences: list[Sequence]
    future: asyncio.Future[None]
    finished: bool = False
    progress: asyncio.Queue[None] | None = None  # streaming: poked after every decode step


class CPUEngine:
    """Serves generation and weight updates for one model; use ``async with`` or start()/close().

    Weight updates (:mod:`actors.cpu_engine.weight_sync`) land between two decode steps of a paused batch, or,
    unpaused, after the running requests (SGLang's model update lock, :mod:`actors.cpu_engine.update_lock`).
    """

    def __init__(
        self, model: LlamaForCausalLM, settings: EngineSettings, tokenizer: Tokenizer = BYTE_TOKENIZER
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.prefix_cache = PrefixCache(settings.prefix_cache_tokens)
        self.metrics = EngineMetrics(settings.served_model_name)
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids) | frozenset(settings.eos_token_ids)
        self._model_lock = threading.Lock()
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._pause_mode: str | None = None
        self.memory = ReleasedMemory()
        self._closing = False
        self._in_flight: dict[str, Sequence] = {}
        self._rng = torch.Generator().manual_seed(settings.random_seed)
        self._queue: asyncio.Queue[_Group] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpu-engine-compute")
        self._scheduler: asyncio.Task[None] | None = None
        self._num_running = 0
        self._flush_pending = False
        self._update_lock = ModelUpdateLock()
        self._held = False  # the compute thread holds a paused batch between decode steps
        self.weights = WeightSync(
            model, settings, model_lock=self._model_lock, update_lock=self._update_lock, prefix_cache=self.prefix_cache,
            metrics=self.metrics, in_flight=self._in_flight, paused=lambda: self.paused, idle=self._idle,
            abort=self.abort, batch_running=lambda: bool(self._num_running) and not self._held,
        )  # fmt: skip
        self.metrics.num_running_reqs.set_function(lambda: self._num_running)
        self.metrics.num_queue_reqs.set_function(lambda: max(0, len(self._in_flight) - self._num_running))
        self.metrics.token_usage.set_function(lambda: self._tokens_in_use() / settings.max_total_num_tokens)
        self._ready = True

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
        self.weights.close_weights_groups()

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
        sequences = self._admit(items)
        try:
            await self._run_group(sequences, progress=None)
        finally:
            self._release(sequences)
        return [seq.response(self.weights.weight_version) for seq in sequences]

    async def generate_stream(self, items: list[GenerationItem]) -> AsyncIterator[list[tuple[int, dict[str, Any]]]]:
        """Snapshots ``(index, answer so far)`` of the items after each decode step, then their final answers."""
        sequences = self._admit(items)
        progress: asyncio.Queue[list[tuple[int, dict[str, Any]]]] = asyncio.Queue()
        task = asyncio.ensure_future(self._run_group(sequences, progress=progress))
        try:
            while not task.done():
                waiter = asyncio.ensure_future(progress.get())
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if not waiter.done():
                    waiter.cancel()
                elif waiter.result():
                    yield waiter.result()
            task.result()
            yield [(index, seq.response(self.weights.weight_version)) for index, seq in enumerate(sequences)]
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self._release(sequences)

    async def health_generate(self) -> None:
        """One forward of a 1-token prompt, bypassing the queue and pause (a liveness check of the model)."""
        self._check_can_generate()

        def forward() -> None:
            with self._model_lock, torch.inference_mode():
                logits = self.model(torch.tensor([[self.tokenizer.bos_token_id or 0]]))
            if not torch.isfinite(logits).all():
                raise RequestError("health_generate: the model produced non-finite logits", status=503)

        try:
            await within(asyncio.to_thread(forward), self.settings.health_timeout_s)
        except TimeoutError as exc:
            raise RequestError(
                f"health_generate: no token within {self.settings.health_timeout_s}s", status=503
            ) from exc

    def abort(self, rid: str = "", *, abort_all: bool = False, reason: str = "aborted by /abort_request") -> int:
        """Abort request ``rid`` (or every request); returns how many sequences were marked."""
        found = self._in_flight.get(rid)
        targets = list(self._in_flight.values()) if abort_all else [found] if found is not None else []
        for seq in targets:
            seq.abort_message = seq.abort_message or reason
        if targets:
            logger.info("aborted %d request(s): %s", len(targets), reason)
        return len(targets)

    @property
    def ready(self) -> bool:
        """SGLang's ``/ready``: accepting new requests (not paused, memory held, not shutting down)."""
        return self._unpaused.is_set() and not self.memory.blocking_generation() and not self._closing

    async def pause(self, mode: str) -> int:
        """Pause as SGLang does; ``mode="abort"``: abort all until no request holds the update lock (tokenizer_manager).

        ``in_place`` freezes running batches between decode steps (KV kept), ``retract`` holds them as waiting (KV
        recomputed with the current weights on continue); new requests wait until ``/continue_generation`` (at most
        ``pause_wait_timeout_s``, then a 503: :meth:`_wait_until_unpaused`).
        """
        self._pause_mode = mode
        self._unpaused.clear()
        self.metrics.is_paused.set(1)
        aborted, deadline = 0, time.monotonic() + self.settings.pause_wait_timeout_s
        while mode == "abort":
            aborted += self.abort(abort_all=True, reason="aborted by /pause_generation")
            if not (self._update_lock.readers or self._num_running) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        while mode != "abort" and self._num_running and not self._held and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)  # SGLang's scheduler answers once the running batch is held or retracted
        logger.info("generation paused (mode=%s, %d aborted)", mode, aborted)
        return aborted

    def resume(self) -> None:
        self._pause_mode = None
        self._unpaused.set()
        self.metrics.is_paused.set(0)
        logger.info("generation continued")

    async def flush_cache(self, timeout_s: float) -> tuple[bool, str]:
        """SGLang's ``/flush_cache`` (``scheduler.flush_cache`` through ``SchedulerFlushWrapper``): empty the
        prefix cache only when idle; with ``timeout_s > 0`` wait that long for idle. Returns (success, message)."""
        if self._flush_pending:
            return False, "Another flush_cache is already in progress."
        deadline = time.monotonic() + timeout_s
        self._flush_pending = timeout_s > 0
        try:
            while not self._idle():
                if time.monotonic() >= deadline:
                    if timeout_s > 0:
                        return False, "Timed out waiting for idle state."
                    logger.warning("cache not flushed: %d request(s) in flight", len(self._in_flight))
                    return False, ""
                await asyncio.sleep(POLL_S)
        finally:
            self._flush_pending = False
        dropped = self.prefix_cache.flush()
        logger.info("cache flushed (%d tokens)", dropped)
        return True, ""

    def _idle(self) -> bool:
        """SGLang's ``is_fully_idle(ignore_waiting=paused)``: nothing running, and nothing waiting unless paused."""
        return self._num_running == 0 if self.paused else not self._in_flight

    # memory ---------------------------------------------------------------------------------------------

    def release_memory(self, tags: list[str] | None) -> list[str]:
        """Mark memory released (refused while requests are in flight); returns the released tags."""
        return self.memory.release(tags, in_flight=len(self._in_flight))

    def resume_memory(self, tags: list[str] | None) -> list[str]:
        """Take released memory back; returns the tags still released."""
        return self.memory.resume(tags)

    # internals ------------------------------------------------------------------------------------

    def _check_can_generate(self) -> None:
        if self._closing:
            raise RequestError("engine shutting down", status=503)
        self.memory.check_can_generate()

    def _admit(self, items: list[GenerationItem]) -> list[Sequence]:
        self._check_can_generate()
        clash = [item.rid for item in items if item.rid in self._in_flight]
        if clash:
            raise RequestError(f"rid {clash[0]!r} is already in flight; rids must be unique")
        sequences = [self._new_sequence(item) for item in items]
        for seq in sequences:
            self._in_flight[seq.item.rid] = seq
        return sequences

    def _release(self, sequences: list[Sequence]) -> None:
        for seq in sequences:
            self._in_flight.pop(seq.item.rid, None)

    async def _run_group(
        self, sequences: list[Sequence], progress: asyncio.Queue[list[tuple[int, dict[str, Any]]]] | None
    ) -> None:
        try:
            await self._wait_until_unpaused(sequences)
            if all(seq.abort_message is not None for seq in sequences):  # aborted while paused: not scheduled
                for seq in sequences:
                    seq.check_abort()
                return
            self._check_can_generate()
            async with self._update_lock.reader(self.settings.pause_wait_timeout_s):
                group = _Group(sequences, asyncio.get_running_loop().create_future(), progress=progress)
                self._queue.put_nowait(group)
                await group.future
        except UpdateLockTimeout as exc:
            raise RequestError(str(exc), status=503) from exc
        except asyncio.CancelledError:
            for seq in sequences:
                seq.abort_message = seq.abort_message or "client went away"
            raise

    def _tokens_in_use(self) -> int:
        live = sum(len(seq.item.input_ids) + len(seq.output_ids) for seq in list(self._in_flight.values()))
        return live + self.prefix_cache.num_tokens

    def _new_sequence(self, item: GenerationItem) -> Sequence:
        seed = item.params.sampling_seed
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,), generator=self._rng))
        room = self.settings.context_length - len(item.input_ids)
        return Sequence(
            item=item,
            generator=torch.Generator().manual_seed(seed),
            max_new_tokens=room if item.params.max_new_tokens is None else min(item.params.max_new_tokens, room),
            tokenizer=self.tokenizer,
            eos_ids=self.eos_token_ids,
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

    def _hold_while_paused(self, live: list[Sequence]) -> bool:
        """Compute thread, between steps: hold a paused batch; True: recompute its KV (retract: it waits, not runs)."""
        retract, running = self._pause_mode == "retract", self._num_running
        self._num_running, self._held = (0 if retract else running), not self._unpaused.is_set()
        try:
            while not self._unpaused.wait(POLL_S):
                if self._closing or all(seq.done or seq.abort_message is not None for seq in live):
                    return False
        finally:
            self._num_running, self._held = running, False
        return retract

    async def _schedule(self) -> None:
        """Requests that arrive within ``batch_window_s`` of each other (and every prompt of a batched request) run
        as one batch; whole requests join while the batch is under ``max_batch_size`` sequences."""
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

        def before_step(live: list[Sequence]) -> bool:
            nonlocal waiting
            done = [group for group in waiting if all(seq.done for seq in group.sequences)]
            if done:
                waiting = [group for group in waiting if group not in done]
                for group in done:
                    try:
                        loop.call_soon_threadsafe(self._finish_group, group, None)
                    except RuntimeError:  # the loop is closed: nobody is waiting any more
                        return False
            for group in waiting:
                if group.progress is not None:
                    self._report_progress(group, loop)
            return self._hold_while_paused(live)

        sequences = [seq for group in groups for seq in group.sequences]
        with self.metrics.func_latency.labels("run_batch").time():
            run_batch(
                self.model,
                sequences,
                model_lock=self._model_lock,
                before_step=before_step,
                prefix_cache=self.prefix_cache,
            )

    def _report_progress(self, group: _Group, loop: asyncio.AbstractEventLoop) -> None:
        """Compute thread: hand a streaming request a snapshot of its unfinished sequences."""
        assert group.progress is not None
        snapshot = [
            (index, seq.response(self.weights.weight_version))
            for index, seq in enumerate(group.sequences)
            if not seq.done and seq.output_ids
        ]
        try:
            loop.call_soon_threadsafe(group.progress.put_nowait, snapshot)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _finish_group(self, group: _Group, error: RequestError | None) -> None:
        """Event loop: answer one request (once) and record its metrics."""
        if group.finished:
            return
        group.finished = True
        now = time.monotonic()
        for seq in group.sequences:
            self.metrics.record_finished(seq, now)
        if not group.future.done():
            group.future.set_result(None) if error is None else group.future.set_exception(error)
