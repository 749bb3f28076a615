"""The latest weights the controller knows, so that a restarted engine is brought to the current version."""

from __future__ import annotations

import logging
from typing import Any

from actors.inference.engine_client import EngineClient

logger = logging.getLogger(__name__)


# A fresh engine starts from its initial weights; bringing it up replays what the controller saw since: a weights
# directory (replayed with /update_weights_from_disk; it resets the tensor overlay), or named tensors pushed through
# the controller, merged by name (one /update_weights_from_tensor; CPU engine only, real SGLang's payload is CUDA
# IPC). Holding tensors costs memory: fine for tiny CPU models, give a directory for real ones. When the trainer
# pushes itself and names no directory, the cache is not restorable and restarted engines wait in pending_weights
# (unregistered, never serving stale weights) until the next update.
class WeightsCache:
    """Version, base directory and tensor overlay of the newest weights (what is replayed: the comment above)."""

    def __init__(self, *, version: str, restorable: bool) -> None:
        self.version = version
        self.restorable = restorable
        self.weights_dir: str | None = None
        self.overlay: dict[str, Any] = {}

    @property
    def is_initial(self) -> bool:
        """Nothing to replay: a fresh engine already holds these weights."""
        return self.weights_dir is None and not self.overlay

    def record_tensors(self, named: dict[str, Any], version: str, *, complete: bool) -> None:
        """Tensors pushed through the controller; ``complete``: they are every parameter of the model."""
        if complete:
            self.weights_dir, self.overlay = None, {}
        self.overlay.update(named)
        self.version = version
        self.restorable = self.restorable or complete

    def record_dir(self, weights_dir: str, version: str) -> None:
        self.weights_dir, self.overlay = weights_dir, {}
        self.version = version
        self.restorable = True

    def record_unknown(self, version: str) -> None:
        """An update the controller did not see (the trainer pushed to the engines itself)."""
        if self.restorable:
            logger.warning(
                "weights of version %s were pushed without a copy for the controller: engines restarted from "
                "now on wait in pending_weights until the next update (pass weights_dir= to avoid this)",
                version,
            )
        self.version = version
        self.restorable = False
        self.weights_dir, self.overlay = None, {}

    async def replay(self, client: EngineClient, *, timeout_s: float) -> None:
        """Bring a fresh engine to :attr:`version`; the caller checks :attr:`restorable` first."""
        if self.weights_dir is not None:
            await client.update_from_disk(self.weights_dir, self.version, timeout_s=timeout_s)
        if self.overlay:
            await client.update_from_tensors(list(self.overlay.items()), self.version, timeout_s=timeout_s)
        if self.is_initial and await client.weight_version(timeout_s=timeout_s) != self.version:
            await client.set_weight_version(self.version, timeout_s=timeout_s)
