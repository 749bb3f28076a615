"""How one SGLang engine is launched: an immutable config and the command lines rendered from it.

One config renders real SGLang's command or, on machines without a GPU, the bundled CPU engine's: both serve the same
HTTP API, ready when ``GET`` :data:`READINESS_PATH` answers 200, and both serve a Hugging Face ``model_path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from actors.model_config import ModelConfig

READINESS_PATH = "/health_generate"  # runs one real generation, unlike /health

# Flags rendered from fields (with SGLang's aliases); extra_args must not repeat them. SGLang's own flag names
# (python/sglang/srt/server_args.py): the primary flag is the field name with dashes.
_FIELD_FLAGS: dict[str, tuple[str, ...]] = {
    "model_path": ("--model-path", "--model"),
    "host": ("--host",),
    "port": ("--port",),
    "tp_size": ("--tp-size", "--tp", "--tensor-parallel-size"),
    "base_gpu_id": ("--base-gpu-id",),
    "mem_fraction_static": ("--mem-fraction-static",),
    "nccl_port": ("--nccl-port",),
    "dist_init_addr": ("--dist-init-addr", "--nccl-init-addr"),
    "nnodes": ("--nnodes",),
    "node_rank": ("--node-rank",),
    "random_seed": ("--random-seed",),
    "context_length": ("--context-length",),
    "served_model_name": ("--served-model-name",),
    "dtype": ("--dtype",),
    "log_level": ("--log-level",),
    "skip_tokenizer_init": ("--skip-tokenizer-init",),
    "enable_memory_saver": ("--enable-memory-saver",),
    "trust_remote_code": ("--trust-remote-code",),
}
_FLAG_OWNER = {flag: field for field, flags in _FIELD_FLAGS.items() for flag in flags}


class SGLangConfig(BaseModel):
    """Server arguments of one SGLang engine; unset optional fields are left to SGLang's defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: str = Field(min_length=1, description="HF model directory or hub id")
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(ge=1, le=65535)
    tp_size: int = Field(default=1, ge=1)
    base_gpu_id: int = Field(default=0, ge=0, description="first GPU id the engine uses")
    mem_fraction_static: float | None = Field(default=None, gt=0.0, lt=1.0)
    nccl_port: int | None = Field(default=None, ge=1, le=65535)
    dist_init_addr: str | None = Field(default=None, description="'host:port' of node 0 (multi-node TP)")
    nnodes: int = Field(default=1, ge=1)
    node_rank: int = Field(default=0, ge=0)
    random_seed: int | None = None
    context_length: int | None = Field(default=None, gt=0)
    served_model_name: str | None = None
    dtype: str | None = None
    log_level: str | None = None
    skip_tokenizer_init: bool = False
    enable_memory_saver: bool = Field(default=False, description="needed for release/resume memory")
    trust_remote_code: bool = False
    extra_args: tuple[str, ...] = Field(default=(), description="further flags, passed through verbatim")

    @field_validator("dist_init_addr")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"must be 'host:port', got {value!r}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_managed_flags(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            flag = arg.split("=", 1)[0]
            if flag in _FLAG_OWNER:
                raise ValueError(f"{flag} is set by the field {_FLAG_OWNER[flag]!r}; do not repeat it here")
        return value

    @model_validator(mode="after")
    def _check_nodes(self) -> SGLangConfig:
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank={self.node_rank} must be below nnodes={self.nnodes}")
        if self.nnodes > 1 and self.dist_init_addr is None:
            raise ValueError(f"dist_init_addr is required when nnodes={self.nnodes}")
        return self

    @property
    def url(self) -> str:
        """Base URL of the engine's HTTP server."""
        return f"http://{self.host}:{self.port}"


def launch_server_argv(config: SGLangConfig, *, python: str = sys.executable) -> list[str]:
    """``[python, -m, sglang.launch_server, ...]`` for ``config``."""
    argv = [python, "-m", "sglang.launch_server"]
    for field in _FIELD_FLAGS:
        value = getattr(config, field)
        flag = _FIELD_FLAGS[field][0]
        if isinstance(value, bool):
            argv += [flag] if value else []
        elif value is not None and not (field in ("nnodes", "node_rank") and config.nnodes == 1):
            argv += [flag, str(value)]
    return argv + list(config.extra_args)


def is_hf_directory(model_path: str) -> bool:
    """Whether ``model_path`` is a Hugging Face model directory on this host (it has a config.json)."""
    return (Path(model_path) / "config.json").is_file()


def cpu_engine_argv(
    config: SGLangConfig,
    *,
    model_config: ModelConfig | None = None,
    load_weights_from_model_path: bool = False,
    python: str = sys.executable,
) -> list[str]:
    """``python -m actors.cpu_engine ...`` serving the same address; GPU-only fields are ignored.

    A ``model_path`` that is a Hugging Face directory is served as it is (``--model-path``: architecture,
    weights and tokenizer from the directory; ``model_config`` must then be None). Otherwise the built-in model
    comes from ``model_config`` (default ModelConfig()), its weights from ``model_path`` only if
    ``load_weights_from_model_path`` (a directory, see actors.cpu_engine.weights). The CPU engine is one
    tensor-parallel rank: ``tp_size`` must be 1.
    """
    if config.tp_size != 1:
        raise ValueError(f"tp_size={config.tp_size}: the CPU engine runs one tensor-parallel rank (tp_size=1)")
    argv = [python, "-m", "actors.cpu_engine", "--host", config.host, "--port", str(config.port)]
    if is_hf_directory(config.model_path):
        if model_config is not None:
            raise ValueError(
                f"model_config: {config.model_path} is a Hugging Face directory whose config.json gives the "
                "architecture; give no model_config"
            )
        argv += ["--model-path", config.model_path]
    else:
        argv += ["--model-config", (model_config or ModelConfig()).model_dump_json()]
        if load_weights_from_model_path:
            argv += ["--model-path", config.model_path]
    if config.dtype is not None:
        argv += ["--dtype", config.dtype]
    if config.random_seed is not None:
        argv += ["--seed", str(config.random_seed)]
    if config.context_length is not None:
        argv += ["--context-length", str(config.context_length)]
    if config.served_model_name is not None:
        argv += ["--served-model-name", config.served_model_name]
    return argv
