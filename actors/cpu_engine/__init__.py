"""A CPU inference engine speaking SGLang's HTTP API, for machines without a GPU: a llama-style torch model
(transformers' llama/mistral/qwen2/qwen3 math and parameter names) behind aiohttp.
Run it with ``python -m actors.cpu_engine --host 127.0.0.1 --port N [--model-path HF_DIR]``; embed :func:`create_app`.
"""

from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.model import LlamaForCausalLM, build_model, expected_shapes
from actors.cpu_engine.model_source import ServedModel, load_hf_model
from actors.cpu_engine.protocol import RequestError
from actors.cpu_engine.server import create_app
from actors.cpu_engine.settings import EngineSettings
from actors.cpu_engine.weights import (
    WeightsError,
    build_model_from_named_tensors,
    load_named_tensors,
    read_weights_dir,
)

# A model from a trainer's export: build_model_from_named_tensors; from a Hugging Face directory: load_hf_model.
__all__ = [
    "CPUEngine",
    "EngineSettings",
    "LlamaForCausalLM",
    "RequestError",
    "ServedModel",
    "WeightsError",
    "build_model",
    "build_model_from_named_tensors",
    "create_app",
    "expected_shapes",
    "load_hf_model",
    "load_named_tensors",
    "read_weights_dir",
]
