"""Immutable configuration of the Megatron trainer: parallelism, optimizer, and the trainer as a whole.

Parsed once at the edge (pydantic, ``frozen=True``, unknown fields refused); errors name the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.model_config import ModelConfig
from actors.trainer.objective_config import ObjectiveConfig

Backend = Literal["auto", "gloo", "nccl"]


class ParallelConfig(BaseModel):
    """How the ranks split the work; data parallelism is whatever the world size leaves over."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_model_parallel_size: int = Field(
        default=1, gt=0, description="Ranks that split each weight matrix (Megatron TP); consecutive ranks."
    )

    def data_parallel_size(self, world_size: int) -> int:
        """Number of model replicas for ``world_size`` ranks; raises ValueError naming the field."""
        if world_size <= 0:
            raise ValueError(f"world_size must be positive, got {world_size}")
        if world_size % self.tensor_model_parallel_size:
            raise ValueError(
                f"parallel.tensor_model_parallel_size={self.tensor_model_parallel_size} must divide "
                f"world_size={world_size}"
            )
        return world_size // self.tensor_model_parallel_size


class OptimizerConfig(BaseModel):
    """AdamW with global-norm clipping: torch AdamW and our gradient all-reduce on CPU, Megatron's
    DistributedDataParallel and optimizer (``get_megatron_optimizer``) on CUDA. See :mod:`actors.trainer.optimizer`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0, description="Not applied to norm weights and biases (1-D).")
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(default=1e-8, gt=0)
    grad_clip: float = Field(default=1.0, ge=0, description="Max global grad L2 norm; 0 disables clipping.")
    use_distributed_optimizer: bool | None = Field(
        default=None,
        description="Shard the optimizer state over the DP ranks (Megatron's DistributedOptimizer; CUDA only). "
        "None: on with CUDA, off on CPU.",
    )
    overlap_grad_reduce: bool = Field(
        default=False, description="Overlap the DP gradient reduction with the backward pass (Megatron DDP; CUDA only)."
    )
    grad_reduce_in_fp32: bool = Field(
        default=True, description="Accumulate and reduce gradients in float32 (Megatron DDP; CUDA only)."
    )

    @model_validator(mode="after")
    def _check_betas(self) -> OptimizerConfig:
        for index, beta in enumerate(self.betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"optimizer.betas[{index}]={beta} must be in [0, 1)")
        return self


class TrainerConfig(BaseModel):
    """Everything a :class:`actors.trainer.Trainer` rank needs besides its rank and rendezvous address."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelConfig = ModelConfig()
    model_path: str | None = Field(
        default=None,
        description="A Hugging Face model directory (config.json, *.safetensors, tokenizer files) on every rank's "
        "host: the architecture comes from its config.json (``model`` is filled from it) and the weights from its "
        "safetensors, each TP rank reading only its slices. None: the built-in model with random weights.",
    )
    parallel: ParallelConfig = ParallelConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    seed: int = Field(
        default=0,
        description="Seeds the trainer's RNG after the weights exist; initial weights use model.seed, so "
        "trainers with the same ModelConfig start from the same weights whatever their TP size.",
    )
    backend: Backend = Field(
        default="auto", description="torch.distributed backend; auto: nccl when CUDA is available, else gloo."
    )
    collective_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Every collective (and the rendezvous) fails after this long, e.g. when a peer died.",
    )
    micro_batch_size: int | None = Field(
        default=None, gt=0, description="Sequences per forward/backward; None: the whole local batch at once."
    )
    checkpoint_dir: str | None = Field(
        default=None, description="Where save_checkpoint() writes when no path is given (shared filesystem)."
    )
    cpu_threads: int | None = Field(
        default=None, gt=0, description="torch.set_num_threads for this rank's process; None leaves it."
    )
    objective: ObjectiveConfig = Field(
        default=ObjectiveConfig(),
        description="The RL objective (actors/trainer/objective_config.py): policy loss, off-policy correction, "
        "aggregation, KL to the reference model, entropy, steps per rollout batch.",
    )

    @model_validator(mode="before")
    @classmethod
    def _model_from_path(cls, data: Any) -> Any:
        """With ``model_path``, ``model`` comes from its config.json; a ``model`` given too must agree with it."""
        if not isinstance(data, dict) or data.get("model_path") is None:
            return data
        from actors.hf.config import read_model_config

        derived = read_model_config(data["model_path"])
        given = data.get("model")
        if given is None:
            return {**data, "model": derived}
        given = given if isinstance(given, ModelConfig) else ModelConfig.model_validate(given)
        differing = [name for name in ModelConfig.model_fields if getattr(given, name) != getattr(derived, name)]
        if differing:
            raise ValueError(
                f"model.{differing[0]}={getattr(given, differing[0])!r} differs from {data['model_path']}/config.json "
                f"({getattr(derived, differing[0])!r}); give model_path alone and the model comes from config.json"
            )
        return data

    @model_validator(mode="after")
    def _check_model_splits(self) -> TrainerConfig:
        tp = self.parallel.tensor_model_parallel_size
        splits = {
            "model.num_attention_heads": self.model.num_attention_heads,
            "model.num_key_value_heads": self.model.num_key_value_heads,
            "model.ffn_hidden_size": self.model.ffn_hidden_size,
            "model.vocab_size": self.model.vocab_size,
        }
        for field, value in splits.items():
            if value % tp:
                raise ValueError(
                    f"{field}={value} must be divisible by parallel.tensor_model_parallel_size={tp} "
                    "(each TP rank holds an equal slice)"
                )
        return self
