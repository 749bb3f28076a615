"""Inference serving for RL: engine cells behind the real sglang-router, run by one controller actor."""

from typing import TYPE_CHECKING

from actors.inference.errors import (
    EngineRequestError,
    EngineStartError,
    InferenceError,
    NoServingEngines,
    UpdateInProgress,
    UpdateNotHeld,
)
from actors.inference.router_settings import RouterSettings
from actors.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from actors.inference.cells import CellState
    from actors.inference.controller import InferenceController
    from actors.inference.engine_launcher import (
        EngineKind,
        EngineLauncher,
        EngineProcess,
        EngineSpec,
        LocalEngineLauncher,
        LocalEngineProcess,
    )

# Imported on first use: they pull in torch and aiohttp (seconds), which the launcher (reading hosts.toml, running
# this package's pool expander, actors.inference.router_table) and config users do not need.
_LAZY = {
    "CellState": "actors.inference.cells",
    "InferenceController": "actors.inference.controller",
    "EngineKind": "actors.inference.engine_launcher",
    "EngineLauncher": "actors.inference.engine_launcher",
    "EngineProcess": "actors.inference.engine_launcher",
    "EngineSpec": "actors.inference.engine_launcher",
    "LocalEngineLauncher": "actors.inference.engine_launcher",
    "LocalEngineProcess": "actors.inference.engine_launcher",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "CellState",
    "EngineKind",
    "EngineLauncher",
    "EngineProcess",
    "EngineRequestError",
    "EngineSpec",
    "EngineStartError",
    "InferenceController",
    "InferenceError",
    "LocalEngineLauncher",
    "LocalEngineProcess",
    "NoServingEngines",
    "RouterSettings",
    "UpdateInProgress",
    "UpdateNotHeld",
]
