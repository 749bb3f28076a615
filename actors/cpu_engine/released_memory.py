"""Which of the CPU engine's memory tags are released (SGLang's memory saver, as bookkeeping only).

The weights stay in RAM: releasing only refuses generation (a 503) until ``weights`` and ``kv_cache`` are
resumed, and resuming memory that was not released is an error, as in SGLang (``offload_tags.remove``).
"""

from __future__ import annotations

import logging

from actors.cpu_engine.protocol import RequestError

logger = logging.getLogger(__name__)

GENERATION_MEMORY_TAGS = frozenset({"weights", "kv_cache"})
ALL_MEMORY_TAGS = ("weights", "kv_cache", "cuda_graph")


class ReleasedMemory:
    """The set of released tags; mutated on the engine's event loop."""

    def __init__(self) -> None:
        self.released: set[str] = set()

    def blocking_generation(self) -> frozenset[str]:
        """The released tags without which the engine cannot generate."""
        return GENERATION_MEMORY_TAGS & self.released

    def check_can_generate(self) -> None:
        blocking = self.blocking_generation()
        if blocking:
            raise RequestError(
                f"memory is released ({', '.join(sorted(blocking))}); call /resume_memory_occupation first",
                status=503,
            )

    def release(self, tags: list[str] | None, *, in_flight: int) -> list[str]:
        """Mark ``tags`` (default: all) released; refused while requests are in flight (SGLang requires idle)."""
        if in_flight:
            raise RequestError(
                f"cannot release memory while {in_flight} request(s) are in flight; "
                "pause generation with mode='abort' first"
            )
        self.released.update(tags or ALL_MEMORY_TAGS)
        logger.info("memory released: %s", sorted(self.released))
        return sorted(self.released)

    def resume(self, tags: list[str] | None) -> list[str]:
        """Take ``tags`` (default: all) back; returns the tags still released."""
        wanted = set(tags or ALL_MEMORY_TAGS)
        never = sorted(wanted - self.released)
        if never:
            raise RequestError(f"tags: memory {never} was not released; call /release_memory_occupation first")
        self.released.difference_update(wanted)
        logger.info("memory resumed; still released: %s", sorted(self.released))
        return sorted(self.released)
