"""What the inference controller was configured with, frozen, for the collaborators that keep its cells, update
their weights and release their memory (each gets this one object instead of a back-pointer to the controller)."""

from __future__ import annotations

from dataclasses import dataclass

from actors.inference.engine_launcher import EngineKind
from actors.inference.router_settings import RouterSettings
from actors.model_config import ModelConfig
from actors.sglang_config import SGLangConfig


@dataclass(frozen=True)
class ControllerSettings:
    """The controller's checked arguments (see InferenceController.__init__ for each one's meaning)."""

    server_id: str
    engine: EngineKind
    sglang: SGLangConfig
    model: ModelConfig
    router: RouterSettings
    health_check_interval_s: float
    health_failure_threshold: int
    max_restarts: int
    engine_start_timeout_s: float
    request_timeout_s: float
    update_timeout_s: float
    update_lock_timeout_s: float
    pause_mode: str
    cpu_engine_args: tuple[str, ...]
    initial_weight_version: str
