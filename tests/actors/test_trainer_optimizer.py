"""The trainer's optimizer path per device (actors/trainer/optimizer.py, megatron_optimizer.py), on CPU.

The CUDA path itself (Megatron's DistributedDataParallel and DistributedOptimizer allocate their buffers on
CUDA) runs in ``scripts/gpu_megatron_check.py`` on a GPU host. Here: the choice and its errors, the CPU path
(torch AdamW), and that the config handed to Megatron is ours, checked against megatron-core 0.16.1's own
classes (``megatron/core/optimizer/optimizer_config.py``, ``distributed/distributed_data_parallel_config.py``)
and its own parameter grouping (``megatron/core/optimizer/__init__.py`` ``_get_param_groups``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import free_port

from actors.model_config import ModelConfig
from actors.trainer import CheckpointError, OptimizerConfig, TrainerConfig
from actors.trainer.optimizer import choose_optimizer

TINY = ModelConfig(vocab_size=64, hidden_size=32, num_layers=1, num_attention_heads=4, num_key_value_heads=2,
                   ffn_hidden_size=64, max_position_embeddings=32, architecture="qwen2")  # fmt: skip
CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)  # a device object only: nothing here touches CUDA


def trainer_config(**optimizer: object) -> TrainerConfig:
    return TrainerConfig(
        model=TINY, optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.1, **optimizer), backend="gloo",
        collective_timeout_s=60.0, cpu_threads=1,
    )  # fmt: skip


@pytest.fixture
def make_trainer() -> Iterator:
    """A world-size-1 trainer in this process (gloo on 127.0.0.1); closed even when the test fails."""
    from actors.trainer import Trainer

    made: list[Trainer] = []

    def make(config: TrainerConfig) -> Trainer:
        trainer = Trainer(rank=0, world_size=1, master_addr="127.0.0.1", master_port=free_port(), config=config)
        made.append(trainer)
        return trainer

    yield make
    for trainer in made:
        trainer.close()
    assert not dist.is_initialized()


@pytest.mark.parametrize("field", ["use_distributed_optimizer", "overlap_grad_reduce"])
def test_cuda_only_fields_on_cpu_fail_naming_the_field(field: str) -> None:
    with pytest.raises(ValueError, match=rf"optimizer\.{field}=True needs CUDA.*set optimizer\.{field} to false"):
        choose_optimizer(OptimizerConfig(**{field: True}), CPU)


def test_path_per_device() -> None:
    assert choose_optimizer(OptimizerConfig(), CPU) == "torch_adamw"
    assert choose_optimizer(OptimizerConfig(use_distributed_optimizer=False), CPU) == "torch_adamw"
    assert choose_optimizer(OptimizerConfig(), CUDA) == "megatron_distributed"  # the default on CUDA
    assert choose_optimizer(OptimizerConfig(use_distributed_optimizer=True), CUDA) == "megatron_distributed"
    assert choose_optimizer(OptimizerConfig(use_distributed_optimizer=False), CUDA) == "megatron"


def test_trainer_asking_for_the_distributed_optimizer_on_cpu_fails_and_leaves_the_group(make_trainer) -> None:
    with pytest.raises(ValueError, match=r"optimizer\.use_distributed_optimizer=True needs CUDA"):
        make_trainer(trainer_config(use_distributed_optimizer=True))
    assert not dist.is_initialized()  # the constructor tore the process group down again


def test_cpu_trainer_uses_torch_adamw_without_decay_on_1d_weights(make_trainer) -> None:
    trainer = make_trainer(trainer_config())
    assert trainer.optimizer_kind == "torch_adamw"
    [adamw] = trainer._optimizer.torch_optimizers()
    assert type(adamw) is torch.optim.AdamW
    decay = {id(p): group["weight_decay"] for group in adamw.param_groups for p in group["params"]}
    for name, param in trainer._model.named_parameters():
        assert decay[id(param)] == (0.0 if param.dim() < 2 else 0.1), name
    before = trainer.weights_digest()
    metrics = trainer.train_step([[1, 2, 3, 4, 5]], None, [1.0])
    assert metrics["step"] == 1.0 and metrics["grad_norm"] > 0 and trainer.weights_digest() != before


def test_megatron_configs_carry_ours() -> None:
    """Our OptimizerConfig as megatron-core's own OptimizerConfig and DistributedDataParallelConfig."""
    from actors.trainer.megatron_optimizer import ddp_config, megatron_optimizer_config

    ours = OptimizerConfig(lr=3e-4, weight_decay=0.05, betas=(0.8, 0.95), eps=1e-6, grad_clip=0.5)
    theirs = megatron_optimizer_config(ours, distributed=True)
    assert (theirs.optimizer, theirs.lr, theirs.min_lr, theirs.weight_decay) == ("adam", 3e-4, 3e-4, 0.05)
    assert (theirs.adam_beta1, theirs.adam_beta2, theirs.adam_eps, theirs.clip_grad) == (0.8, 0.95, 1e-6, 0.5)
    assert theirs.decoupled_weight_decay and theirs.use_distributed_optimizer
    assert not theirs.bf16 and not theirs.fp16 and theirs.params_dtype == torch.float32  # the model is float32
    wrapping = ddp_config(OptimizerConfig(overlap_grad_reduce=True, grad_reduce_in_fp32=False), distributed=False)
    assert wrapping.overlap_grad_reduce and not wrapping.grad_reduce_in_fp32 and not wrapping.use_distributed_optimizer
    default = ddp_config(OptimizerConfig(), distributed=True)
    assert default.grad_reduce_in_fp32 and not default.overlap_grad_reduce and default.use_distributed_optimizer


def test_megatron_param_groups_decay_like_the_cpu_path(make_trainer) -> None:
    """Megatron's own grouping (wd_mult 0 on 1-D weights and biases) with our multipliers gives each
    parameter the weight decay the CPU path gives it; the model also asks Megatron's DDP to sum over DP."""
    from megatron.core.optimizer import _get_param_groups

    from actors.trainer.megatron_optimizer import _apply_group_multipliers, megatron_optimizer_config

    trainer = make_trainer(trainer_config())
    gpt = trainer._model
    assert gpt.config.calculate_per_token_loss  # DDP's gradient_scaling_factor 1: a sum, as our loss needs
    ours = trainer_config().optimizer
    groups = _get_param_groups([gpt], megatron_optimizer_config(ours, distributed=True), None)
    adamw = torch.optim.AdamW(groups, lr=ours.lr, weight_decay=ours.weight_decay)
    _apply_group_multipliers(adamw, ours)
    decay = {id(p): (group["weight_decay"], group["lr"]) for group in adamw.param_groups for p in group["params"]}
    [cpu_adamw] = trainer._optimizer.torch_optimizers()
    cpu_decay = {
        id(p): (group["weight_decay"], group["lr"]) for group in cpu_adamw.param_groups for p in group["params"]
    }
    assert decay == cpu_decay and len(decay) == len(list(gpt.parameters()))


def test_checkpoint_of_another_optimizer_kind_is_refused(make_trainer, tmp_path: Path) -> None:
    trainer = make_trainer(trainer_config())
    trainer.train_step([[1, 2, 3, 4]], None, [1.0])
    directory = Path(trainer.save_checkpoint(str(tmp_path / "ckpt")))
    metadata = json.loads((directory / "metadata.json").read_text())
    assert metadata["optimizer"] == "torch_adamw" and metadata["data_parallel_size"] == 1
    assert trainer.load_checkpoint(str(directory)) == 1
    metadata["optimizer"] = "megatron_distributed"
    (directory / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(CheckpointError, match="'megatron_distributed', this trainer uses 'torch_adamw'"):
        trainer.load_checkpoint(str(directory))
    del metadata["optimizer"]  # checkpoints written before the CUDA path: torch AdamW
    (directory / "metadata.json").write_text(json.dumps(metadata))
    assert trainer.load_checkpoint(str(directory)) == 1
