"""What ``/model_info`` and ``/get_server_info`` answer about a CPU engine, in SGLang's shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.hf.config import SUPPORTED as HF_ARCHITECTURES

if TYPE_CHECKING:
    from actors.cpu_engine.engine import CPUEngine


def model_info(engine: CPUEngine) -> dict[str, Any]:
    """SGLang's ``/model_info`` (``http_server.py``), plus the CPU engine's ``model_config``."""
    config = engine.model.config
    return {
        "model_path": engine.weights.model_path,
        "tokenizer_path": engine.settings.tokenizer_path,
        "served_model_name": engine.weights.served_model_name,
        "is_generation": True,
        "model_type": config.architecture,
        "architectures": [HF_ARCHITECTURES[config.architecture]],
        "weight_version": engine.weights.weight_version,
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "preferred_sampling_params": None,
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_config": config.model_dump(),
    }


def server_info(engine: CPUEngine, host: str, port: int) -> dict[str, Any]:
    """SGLang's ``/get_server_info`` (``http_server.py``), with the CPU engine's own state."""
    return {
        "version": "miles-actors-cpu-engine",
        "model_path": engine.weights.model_path,
        "served_model_name": engine.weights.served_model_name,
        "tokenizer_path": engine.settings.tokenizer_path,
        "host": host,
        "port": port,
        "tp_size": 1,
        "dp_size": 1,
        "context_length": engine.settings.context_length,
        "random_seed": engine.settings.random_seed,
        "max_running_requests": engine.settings.max_batch_size,
        "max_total_num_tokens": engine.settings.max_total_num_tokens,
        "weight_version": engine.weights.weight_version,
        "internal_states": [
            {
                "paused": engine.paused,
                "pause_mode": engine._pause_mode,
                "released_memory": sorted(engine.memory.released),
                "num_in_flight": len(engine._in_flight),
                "num_in_flight_with_output": sum(1 for seq in list(engine._in_flight.values()) if seq.output_ids),
                "weight_version": engine.weights.weight_version,
                "max_total_num_tokens": engine.settings.max_total_num_tokens,
                "cached_tokens": engine.prefix_cache.num_tokens,
                "weight_update_session": engine.weights.session_open,
            }
        ],
    }
