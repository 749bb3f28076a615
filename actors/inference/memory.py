"""Colocation: the engines give their GPU memory back while the trainer trains on the same GPUs.

SGLang's memory saver (``/release_memory_occupation``, ``/resume_memory_occupation`` with ``{"tags": [...]}``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from actors.inference.cells import LIVE_STATES, EngineCell
from actors.inference.errors import InferenceError, MemoryReleased, UpdateInProgress

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from actors.inference.controller_settings import ControllerSettings
    from actors.inference.update_lock import UpdateLock

logger = logging.getLogger(__name__)

MEMORY_TAGS = ("kv_cache", "weights", "cuda_graph")  # sglang/srt/constants.py: GPU_MEMORY_ALL_TYPES
GENERATION_TAGS = frozenset({"kv_cache", "weights"})  # without them an engine cannot generate


# miles' order around a train step: release every tag; train; resume ["weights"]; update the weights; resume
# ["kv_cache", "cuda_graph"]. While weights or kv_cache is released, generation is refused (router_url() raises
# MemoryReleased), and so is a weight update while weights is released. An engine (re)started meanwhile is released
# like the others once it holds the current weights.
class MemoryReleaser:
    """Releases and resumes the memory of every live engine, and says whether generation and updates may run."""

    def __init__(
        self,
        settings: ControllerSettings,
        cells: list[EngineCell],
        lock: UpdateLock,
        on_all: Callable[[list[EngineCell], Callable[[EngineCell], Awaitable[None]], str], Awaitable[object]],
        released: set[str],
    ) -> None:
        """``cells``: the controller's; ``lock``: the weight-update lock (no release during an update);
        ``on_all``: runs an action on cells, restarting those that fail (CellKeeper.on_all); ``released``: the
        tags released now, which this object alone changes (the cell keeper reads them)."""
        self.settings = settings
        self._cells = cells
        self._lock = lock
        self._on_all = on_all
        self.released = released

    async def release_memory(self, tags: list[str] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Release ``tags`` (default: all) on every engine; returns memory_state(). Waits up to ``timeout_s`` for
        a weight update in progress to end. Engines must be idle (SGLang requires it: end the rollout first)."""
        wanted = self._memory_tags(tags, "release_memory")
        await self._memory_locked(timeout_s, "release_memory", self.released.update, wanted, "release")
        return self.memory_state()

    async def resume_memory(self, tags: list[str] | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Take ``tags`` (default: all released) back on every engine; returns memory_state()."""
        wanted = self._memory_tags(tags, "resume_memory") if tags is not None else set(self.released)
        missing = sorted(wanted - self.released)
        if missing:
            raise InferenceError(
                f"server {self.settings.server_id}: memory {missing} is not released "
                f"(released: {sorted(self.released)}); call release_memory first"
            )
        await self._memory_locked(timeout_s, "resume_memory", self.released.difference_update, wanted, "resume")
        return self.memory_state()

    def memory_state(self) -> dict[str, Any]:
        """``{"released": [tags], "generation": whether generation is allowed}``."""
        return {"released": sorted(self.released), "generation": not (GENERATION_TAGS & self.released)}

    # ---- checks used by the controller and the weight updater ----------------------------------------------

    def check_generation(self) -> None:
        """Refuse generation while the engines' weights or KV cache are released."""
        released = sorted(GENERATION_TAGS & self.released)
        if released:
            raise MemoryReleased(
                f"server {self.settings.server_id}: generation is refused while the engines' memory {released} is "
                "released (colocated training); call resume_memory() first"
            )

    def check_weights_held(self) -> None:
        if "weights" in self.released:
            raise MemoryReleased(
                f"server {self.settings.server_id}: the engines' weights memory is released; call "
                "resume_memory(['weights']) before updating weights (SGLang's order: resume weights, update, "
                "resume kv_cache)"
            )

    # ---- internals --------------------------------------------------------------------------------------

    def _memory_tags(self, tags: list[str] | None, what: str) -> set[str]:
        if tags is None:
            return set(MEMORY_TAGS)
        if not isinstance(tags, list) or not tags or len(tags) > len(MEMORY_TAGS):
            raise ValueError(f"{what}: tags must be a non-empty list of {list(MEMORY_TAGS)}, got {str(tags)[:200]}")
        unknown = sorted(str(t)[:40] for t in tags if t not in MEMORY_TAGS)
        if unknown:
            raise ValueError(f"{what}: unknown tags {unknown}; SGLang's tags are {list(MEMORY_TAGS)}")
        return set(tags)

    async def _memory_locked(
        self, timeout_s: float, what: str, record: Callable[[set[str]], None], wanted: set[str], op: str
    ) -> None:
        """Under the update lock: ``op`` the ``wanted`` tags on every live engine, then ``record`` them."""
        if not await self._lock.acquire(timeout_s):
            raise UpdateInProgress(
                f"server {self.settings.server_id}: {what} waited {timeout_s}s for a weight update to end"
            )
        try:
            tags = sorted(wanted)

            async def apply(cell: EngineCell) -> None:
                assert cell.client is not None
                await cell.client.memory(op, tags, timeout_s=self.settings.request_timeout_s)

            cells = [c for c in self._cells if c.state in LIVE_STATES and c.client is not None and not c.busy]
            await self._on_all(cells, apply, what)
            record(wanted)
            logger.info(
                "server %s: %s %s; released now: %s", self.settings.server_id, what, tags, sorted(self.released)
            )
        finally:
            self._lock.release()
