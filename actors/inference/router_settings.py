"""How an inference server runs its sglang-router: one frozen pydantic model, cheap to import.

The launcher's pool expander (:mod:`actors.inference.router_table`) validates a controller's ``router`` kwargs with it
at plan time, so this module imports neither torch nor the controller.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from actors.processes import advertised_host


class RouterSettings(BaseModel):
    """How the controller runs sglang-router (``python -m sglang_router.launch_router``); immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(
        default_factory=lambda: advertised_host(),
        description="address the router listens on (default: this host's advertised address, MILES_ADVERTISE_HOST, "
        "set by the launcher; else 127.0.0.1)",
    )
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    prometheus_port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    policy: str = Field(default="cache_aware", description="cache_aware, round_robin, random, power_of_two")
    health_check_interval_s: int = Field(default=5, ge=1)
    health_failure_threshold: int = Field(default=2, ge=1)
    worker_startup_timeout_s: int = Field(default=120, ge=1)
    start_timeout_s: float = Field(default=60.0, gt=0)
    add_worker_timeout_s: float = Field(default=60.0, gt=0, description="until a new worker is listed healthy")
    log_level: str = "warn"
    extra_args: tuple[str, ...] = ()
