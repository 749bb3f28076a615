"""The trainer's optimizer and gradient synchronization, chosen per device in one place.

CPU: our DP all-reduce (:mod:`.grads`), torch AdamW; CUDA: Megatron's DDP and optimizer (:mod:`.megatron_optimizer`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch
from torch import Tensor

from actors.trainer.config import OptimizerConfig
from actors.trainer.distributed import ParallelLayout
from actors.trainer.grads import allreduce_gradients, clip_gradients, sum_qk_norm_gradients

if TYPE_CHECKING:
    from actors.trainer._megatron import GPTModel

OptimizerKind = Literal["torch_adamw", "megatron", "megatron_distributed"]


# Both paths: AdamW with decoupled weight decay (none on 1-D weights), the global gradient norm clipped to
# grad_clip, gradients summed over DP (the loss is already divided by the global token count;
# calculate_per_token_loss tells Megatron's DDP to sum). The model is float32 on both, so Megatron's bf16/fp16 are
# off. Megatron allocates its buffers on CUDA, hence the split: a CUDA-only feature asked for on CPU fails at
# construction, naming the field.
def choose_optimizer(config: OptimizerConfig, device: torch.device) -> OptimizerKind:
    """The optimizer path for ``device``; raises ValueError naming the field a device cannot honour."""
    if device.type != "cuda":
        for field in ("use_distributed_optimizer", "overlap_grad_reduce"):
            if getattr(config, field):
                raise ValueError(
                    f"optimizer.{field}=True needs CUDA (Megatron's DistributedDataParallel allocates its buffers "
                    f"there), but this trainer runs on {device.type} (backend gloo); set optimizer.{field} to "
                    "false, or run on GPUs with backend nccl"
                )
        return "torch_adamw"
    return "megatron" if config.use_distributed_optimizer is False else "megatron_distributed"


class TrainerOptimizer(Protocol):
    """What a train step needs: the module to run, gradient sync, the update, and checkpointable state."""

    kind: OptimizerKind
    model: torch.nn.Module  # what the training forward runs (the DDP wrapper on CUDA)
    dp_sharded: bool  # each DP rank holds a different part of the state (saved per rank)

    def zero_grad(self) -> None: ...
    def micro_batch(self, *, last: bool) -> contextlib.AbstractContextManager[None]: ...
    def finish_gradients(self, local_loss: Tensor) -> Tensor: ...
    def step(self) -> float: ...
    def state_dict(self) -> dict[str, Any] | None: ...
    def load_state_dict(self, state: dict[str, Any] | None) -> None: ...
    def torch_optimizers(self) -> list[torch.optim.Optimizer]: ...


def build_optimizer(
    kind: OptimizerKind, gpt: GPTModel, config: OptimizerConfig, layout: ParallelLayout
) -> TrainerOptimizer:
    """The optimizer of ``kind`` (from :func:`choose_optimizer`) over ``gpt``'s parameters (collective on CUDA)."""
    if kind == "torch_adamw":
        return TorchAdamW(gpt, config, layout)
    from actors.trainer.megatron_optimizer import MegatronDdpOptimizer  # CUDA only

    return MegatronDdpOptimizer(gpt, config, layout, distributed=kind == "megatron_distributed")


class TorchAdamW:
    """torch AdamW with our DP all-reduce and clipping (any device; the CPU path)."""

    kind: OptimizerKind = "torch_adamw"
    dp_sharded = False

    def __init__(self, gpt: GPTModel, config: OptimizerConfig, layout: ParallelLayout) -> None:
        self.model = gpt
        self._config = config
        self._layout = layout
        self._named = dict(gpt.named_parameters())
        self._params = list(self._named.values())
        decay = [p for p in self._params if p.dim() >= 2]
        no_decay = [p for p in self._params if p.dim() < 2]  # norm weights and biases, as in Megatron
        self._adamw = torch.optim.AdamW(
            [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.lr,
            betas=config.betas,
            eps=config.eps,
        )

    def zero_grad(self) -> None:
        self._adamw.zero_grad(set_to_none=False)

    def micro_batch(self, *, last: bool) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def finish_gradients(self, local_loss: Tensor) -> Tensor:
        """Sum the qk-norm gradients over TP and every gradient over DP; returns the global loss sum."""
        layout = self._layout
        sum_qk_norm_gradients(self._named, group=layout.tp_group, size=layout.tp_size)  # no-op without qk-norm
        return allreduce_gradients(self._params, local_loss, group=layout.dp_group, size=layout.dp_size)

    def step(self) -> float:
        layout = self._layout
        norm = clip_gradients(self._params, self._config.grad_clip, tp_group=layout.tp_group, tp_size=layout.tp_size)
        self._adamw.step()
        return norm

    def state_dict(self) -> dict[str, Any] | None:
        return self._adamw.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self._adamw.load_state_dict(state)

    def torch_optimizers(self) -> list[torch.optim.Optimizer]:
        return [self._adamw]


def state_pairs(optimizer: TrainerOptimizer) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) of every moment and step count of this rank's optimizer state, in a stable order."""
    for index, inner in enumerate(optimizer.torch_optimizers()):
        state = inner.state_dict()["state"]
        for key in sorted(state):
            for name, value in sorted(state[key].items()):
                yield f"{index}.{key}.{name}", torch.as_tensor(value).detach().cpu()
