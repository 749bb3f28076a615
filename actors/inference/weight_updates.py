"""The inference controller's weight updater: SGLang's update sequence under one lock."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors.inference.actor_engines import engine_handles
from actors.inference.cells import LIVE_STATES, CellState, EngineCell
from actors.inference.errors import InferenceError, NoServingEngines, UpdateInProgress, UpdateNotHeld
from actors.weights_wire import encode_named_tensors

if TYPE_CHECKING:
    from actors.inference.cell_keeper import CellKeeper
    from actors.inference.update_lock import UpdateLock
    from actors.inference.weights_cache import WeightsCache

logger = logging.getLogger(__name__)

PAUSE_MODES = ("abort", "retract", "in_place")


@dataclass(eq=False)
class UpdateSession:
    """One held update: who holds it, since when, and which engine incarnations it paused."""

    token: str
    started_at: float
    targets: dict[str, str]  # cell id -> URL of the incarnation paused for this update
    tensors: dict[str, Any] = field(default_factory=dict)
    weights_dir: str | None = None
    watchdog: asyncio.Task[None] | None = None


# The lock is held between start_update_weights and end/abort (the token proves who holds it), and while a
# restarted engine is brought to the current weights, so no engine misses an update. A second start waits up to its
# timeout_s, then fails with UpdateInProgress; an update holding the lock past update_lock_timeout_s is aborted.
# An engine that fails a step without refusing it (no answer, 5xx) is restarted and left out; a refusal (4xx:
# weights that do not fit) fails the call. At the end every paused engine must report the new version (set if not),
# pending engines are registered with the router, and those that missed the update are brought up to date from
# the weights cache.
class WeightUpdater:
    """Runs the controller's weight updates on its cells, through its cell keeper, and records them in its
    weights cache."""

    def __init__(
        self, keeper: CellKeeper, weights: WeightsCache, lock: UpdateLock, check_weights_held: Callable[[], None]
    ) -> None:
        """``keeper``: whose cells and settings it updates, which restarts engines that fail a step and registers or
        catches up the others afterwards; ``check_weights_held`` refuses an update while the engines' weights memory
        is released."""
        self.settings = keeper.settings
        self._cells = keeper.cells
        self._weights = weights
        self._lock = lock
        self._keeper = keeper
        self._check_weights_held = check_weights_held
        self._update: UpdateSession | None = None

    # ---- public ---------------------------------------------------------------------------------------

    async def start_update_weights(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Take the lock (waiting up to ``timeout_s``), pause generation and flush every engine.

        Returns ``{"token", "engine_urls", "weight_version", "flush_cache", "engine_handles"}``: post the weights to
        ``engine_urls`` (with that ``flush_cache``) or pull them into ``engine_handles`` (None unless the engines are
        actors), then call end_update_weights(token, version) or abort_update_weights(token).
        """
        self._check_weights_held()
        if not await self._lock.acquire(timeout_s):
            held = self._update
            holder = f"update {held.token} (held {time.monotonic() - held.started_at:.1f}s)" if held else "a restart"
            raise UpdateInProgress(
                f"server {self.settings.server_id}: the weight-update lock is held by {holder}; waited {timeout_s}s. "
                f"End or abort that update first (it expires after {self.settings.update_lock_timeout_s}s)"
            )
        cells = [c for c in self._cells if c.state in LIVE_STATES and c.client is not None]
        session = UpdateSession(uuid.uuid4().hex, time.monotonic(), {c.cell_id: str(c.url) for c in cells})
        self._update = session
        try:
            await self._keeper.on_all(self._targets(session), self._pause, "pause")
            if self.flushes_cache:
                await self._keeper.on_all(self._targets(session), self._flush, "flush")
            if not self._targets(session):
                raise NoServingEngines(f"server {self.settings.server_id}: no engine to update: {self._cell_errors()}")
        except BaseException:
            await self._finish(session)
            raise
        session.targets = {c.cell_id: str(c.url) for c in self._targets(session)}
        session.watchdog = asyncio.create_task(self._expire(session), name=f"{self.settings.server_id}-update-expiry")
        logger.info(
            "server %s: weight update %s started on %s", self.settings.server_id, session.token, session.targets
        )
        return {
            "token": session.token,
            "engine_urls": list(session.targets.values()),
            "weight_version": self._weights.version,
            "flush_cache": self.flushes_cache,
            "engine_handles": engine_handles(self._targets(session)),  # actor engines (actors.inference.actor_engines)
        }

    async def end_update_weights(
        self, token: str, weight_version: str, weights_dir: str | None = None
    ) -> dict[str, Any]:
        """Set ``weight_version`` on the updated engines, continue generation and release the lock.

        ``weights_dir``: a directory holding the new weights, from which restarted engines are restored when the
        trainer pushed the weights itself (else they wait for the next update).
        """
        session = self._session_for(token)
        try:

            async def confirm(cell: EngineCell) -> None:
                assert cell.client is not None
                if await cell.client.weight_version(timeout_s=self.settings.request_timeout_s) != weight_version:
                    await cell.client.set_weight_version(weight_version, timeout_s=self.settings.request_timeout_s)

            updated = await self._keeper.on_all(self._targets(session), confirm, "set version")
            if not updated:
                raise NoServingEngines(
                    f"server {self.settings.server_id}: every engine failed during the update: {self._cell_errors()}"
                )
        except BaseException:
            await self._finish(session)
            raise
        self._record(session, weight_version, weights_dir)
        for cell in updated:
            cell.weight_version = weight_version
        await self._finish(session)
        newly = [c for c in updated if c.state == CellState.PENDING_WEIGHTS and not c.busy]
        await asyncio.gather(*(self._resync(cell, register_only=True) for cell in newly))
        for cell in self._cells:
            if cell.state in LIVE_STATES and not cell.busy and cell not in updated:
                self._keeper.background(self._resync(cell, register_only=False), f"resync-{cell.cell_id}")
        logger.info(
            "server %s: weight update %s done: version %s on %d engine(s)",
            self.settings.server_id,
            token,
            weight_version,
            len(updated),
        )
        return {"weight_version": weight_version, "engine_urls": [str(c.url) for c in updated]}

    async def abort_update_weights(self, token: str) -> dict[str, Any]:
        """Continue generation and release the lock; the version stays. Engines keep what they were sent."""
        session = self._session_for(token)
        await self._finish(session)
        logger.warning(
            "server %s: weight update %s aborted; engines that received part of it hold mixed weights labelled %s",
            self.settings.server_id, token, self._weights.version,
        )  # fmt: skip
        return {"weight_version": self._weights.version, "aborted": True}

    async def update_weights_from_tensors(
        self, named_tensors: dict[str, Any], weight_version: str, token: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """Send CPU tensors (HF names) to every engine (CPU engine only); the whole sequence unless ``token``
        names an update already started (then this is one bucket of it)."""
        if self.settings.engine != "cpu":
            raise InferenceError(
                f"server {self.settings.server_id}: update_weights_from_tensors sends CPU tensors, which only the CPU "
                "engine takes (real SGLang's tensor payload is CUDA IPC); use update_weights_from_disk, or push from "
                "the trainer"
            )
        payload = await asyncio.to_thread(encode_named_tensors, list(named_tensors.items()))

        async def push(cell: EngineCell) -> None:
            assert cell.client is not None
            await cell.client.update_from_serialized(
                payload, weight_version, flush=self.flushes_cache, timeout_s=self.settings.update_timeout_s
            )

        def record(session: UpdateSession) -> None:
            session.tensors.update(named_tensors)

        return await self._push(token, weight_version, timeout_s, push, record)

    async def update_weights_from_disk(
        self, model_path: str, weight_version: str, token: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """Every engine loads ``model_path`` (a directory both SGLang and the CPU engine read); restarted
        engines are restored from it too."""

        async def load(cell: EngineCell) -> None:
            assert cell.client is not None
            await cell.client.update_from_disk(
                model_path, weight_version, flush=self.flushes_cache, timeout_s=self.settings.update_timeout_s
            )

        def record(session: UpdateSession) -> None:
            session.weights_dir, session.tensors = model_path, {}

        return await self._push(token, weight_version, timeout_s, load, record)

    @property
    def flushes_cache(self) -> bool:
        """miles' ``weight_push_session``: ``in_place`` resumes requests on their KV, so an update neither flushes
        nor asks the engine to (SGLang 0.5.23 refuses a flush while a paused batch still runs); abort and retract
        leave nothing running (retract moves the requests to the waiting queue), so the flush succeeds."""
        return self.settings.pause_mode != "in_place"

    # ---- internals --------------------------------------------------------------------------------------

    async def _pause(self, cell: EngineCell) -> None:
        assert cell.client is not None
        await cell.client.pause(self.settings.pause_mode, timeout_s=self.settings.request_timeout_s)

    async def _flush(self, cell: EngineCell) -> None:
        assert cell.client is not None
        await cell.client.flush_cache(timeout_s=self.settings.request_timeout_s)

    async def _resume(self, cell: EngineCell) -> None:
        assert cell.client is not None
        await cell.client.resume(timeout_s=self.settings.request_timeout_s)

    async def _push(
        self,
        token: str | None,
        weight_version: str,
        timeout_s: float,
        action: Callable[[EngineCell], Awaitable[None]],
        record: Callable[[UpdateSession], None],
    ) -> dict[str, Any]:
        own = token is None
        if token is None:
            token = (await self.start_update_weights(timeout_s=timeout_s))["token"]
        session = self._session_for(token)
        try:
            done = await self._keeper.on_all(self._targets(session), action, "update")
            if not done:
                raise NoServingEngines(
                    f"server {self.settings.server_id}: every engine failed the update: {self._cell_errors()}"
                )
            record(session)
        except BaseException:
            if own:
                await self.abort_update_weights(token)
            raise
        if own:
            return await self.end_update_weights(token, weight_version)
        return {"weight_version": weight_version, "engine_urls": [str(c.url) for c in done]}

    def _targets(self, session: UpdateSession) -> list[EngineCell]:
        """The cells paused for ``session`` whose engine is still that incarnation and alive."""
        return [
            c for c in self._cells
            if c.state in LIVE_STATES and c.client is not None and session.targets.get(c.cell_id) == c.url
        ]  # fmt: skip

    def _record(self, session: UpdateSession, version: str, weights_dir: str | None) -> None:
        if weights_dir or session.weights_dir:
            self._weights.record_dir(str(weights_dir or session.weights_dir), version)
        if session.tensors:
            self._weights.record_tensors(session.tensors, version, complete=self._complete(session.tensors))
        elif not (weights_dir or session.weights_dir):
            self._weights.record_unknown(version)

    def _complete(self, tensors: dict[str, Any]) -> bool:
        from actors.cpu_engine.model import expected_shapes

        return set(expected_shapes(self.settings.model)) <= set(tensors)

    async def _finish(self, session: UpdateSession) -> None:
        """Continue generation on the session's engines and release the lock (never raises for an engine)."""
        cells = self._targets(session)
        await self._on_all_quietly(cells, self._resume)
        if session.watchdog is not None and session.watchdog is not asyncio.current_task():
            session.watchdog.cancel()
        if self._update is session:
            self._update = None
            self._lock.release()

    async def _on_all_quietly(self, cells: list[EngineCell], action: Callable[[EngineCell], Awaitable[None]]) -> None:
        results = await asyncio.gather(*(action(cell) for cell in cells), return_exceptions=True)
        for cell, result in zip(cells, results, strict=True):
            if isinstance(result, Exception):
                self._keeper.fail(cell, result)

    async def _expire(self, session: UpdateSession) -> None:
        await asyncio.sleep(self.settings.update_lock_timeout_s)
        if self._update is session:
            logger.error(
                "server %s: weight update %s held the lock for %.0fs (update_lock_timeout_s); aborting it",
                self.settings.server_id, session.token, self.settings.update_lock_timeout_s,
            )  # fmt: skip
            await self._finish(session)

    async def _resync(self, cell: EngineCell, *, register_only: bool) -> None:
        """Register a cell that just got weights, or bring one that missed the update up to date."""
        cell.busy = True
        try:
            if register_only:
                await self._keeper.register(cell)
                return
            await self._keeper.unregister(cell)
            cell.move(CellState.PENDING_WEIGHTS)
            await self._keeper.catch_up(cell)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            cell.busy = False
            self._keeper.fail(cell, exc)
        finally:
            cell.busy = False

    def _session_for(self, token: str) -> UpdateSession:
        if self._update is None or self._update.token != token:
            why = "another update holds it" if self._update is not None else "no update is in progress"
            raise UpdateNotHeld(
                f"server {self.settings.server_id}: token {token!r} does not hold the weight-update lock ({why})"
            )
        return self._update

    def view(self) -> dict[str, Any] | None:
        session = self._update
        if session is None:
            return None
        return {
            "token": session.token,
            "held_s": time.monotonic() - session.started_at,
            "engine_urls": list(session.targets.values()),
        }

    def drop_session(self) -> None:
        session, self._update = self._update, None
        if session is not None:
            if session.watchdog is not None:
                session.watchdog.cancel()
            self._lock.release()

    def _cell_errors(self) -> str:
        return "; ".join(f"{c.cell_id} ({c.state.value}): {c.last_error}" for c in self._cells)
