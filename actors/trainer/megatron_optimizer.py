"""The CUDA path: Megatron's DistributedDataParallel, ``finalize_model_grads`` and ``get_megatron_optimizer``.

It follows megatron-core 0.16.1's own ``training.train_step`` protocol."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from actors.trainer._megatron import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    GPTModel,
    MegatronOptimizerConfig,
    finalize_model_grads,
    get_megatron_optimizer,
)
from actors.trainer.config import OptimizerConfig
from actors.trainer.distributed import ParallelLayout
from actors.trainer.errors import TrainerError

PARAM_STATE_KEY = "dp_reshardable_param_state"


def megatron_optimizer_config(config: OptimizerConfig, *, distributed: bool) -> MegatronOptimizerConfig:
    """Megatron's OptimizerConfig equal to ours: AdamW (decoupled decay), float32 (no bf16/fp16), clipping."""
    return MegatronOptimizerConfig(
        optimizer="adam",
        lr=config.lr,
        min_lr=config.lr,
        weight_decay=config.weight_decay,
        adam_beta1=config.betas[0],
        adam_beta2=config.betas[1],
        adam_eps=config.eps,
        decoupled_weight_decay=True,
        clip_grad=config.grad_clip,
        bf16=False,
        fp16=False,
        params_dtype=torch.float32,
        use_distributed_optimizer=distributed,
    )


def ddp_config(config: OptimizerConfig, *, distributed: bool) -> DistributedDataParallelConfig:
    return DistributedDataParallelConfig(
        grad_reduce_in_fp32=config.grad_reduce_in_fp32,
        overlap_grad_reduce=config.overlap_grad_reduce,
        use_distributed_optimizer=distributed,
    )


def _apply_group_multipliers(optimizer: Any, config: OptimizerConfig) -> None:
    """Set each param group's lr and weight decay as Megatron's LR scheduler would (constant schedule)."""
    for group in optimizer.param_groups:
        group["lr"] = config.lr * group.get("lr_mult", 1.0)
        group["weight_decay"] = config.weight_decay * group.get("wd_mult", 1.0)


def _to_cpu(value: Any) -> Any:
    """A deep copy of ``value`` with every tensor cloned to the CPU (views would drag whole buffers along)."""
    if isinstance(value, Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(item) for item in value)
    return value


# Zero the DDP grad buffers and grads, forward/backward per micro-batch (earlier ones under no_sync, so an
# overlapped reduction starts only on the last), finalize_model_grads (DP all-reduce or reduce-scatter; qk-norm
# grads summed over TP), then optimizer.step() (norm, clipping, AdamW, the distributed optimizer's all-gather).
# Without Megatron's LR scheduler nobody applies the param groups' wd_mult/lr_mult: _apply_group_multipliers does.
class MegatronDdpOptimizer:
    """``gpt`` wrapped in Megatron's DDP, with Megatron's (distributed) optimizer; CUDA only."""

    def __init__(self, gpt: GPTModel, config: OptimizerConfig, layout: ParallelLayout, *, distributed: bool) -> None:
        self.kind: Literal["megatron", "megatron_distributed"] = "megatron_distributed" if distributed else "megatron"
        self.dp_sharded = distributed
        self._layout = layout
        self._has_state = False
        wrapping = ddp_config(config, distributed=distributed)
        ddp = DistributedDataParallel(config=gpt.config, ddp_config=wrapping, module=gpt)
        ddp.broadcast_params()  # replicas start equal anyway (same seed or file); this makes it a guarantee
        self.model: DistributedDataParallel = ddp
        # Our groups have no gloo twins (setup_parallel); the dp_reshardable checkpoint format needs none.
        self._optimizer = get_megatron_optimizer(
            megatron_optimizer_config(config, distributed=distributed), [ddp], use_gloo_process_groups=False
        )
        _apply_group_multipliers(self._optimizer, config)

    def zero_grad(self) -> None:
        self.model.zero_grad_buffer()
        self._optimizer.zero_grad()

    def micro_batch(self, *, last: bool) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext() if last else self.model.no_sync()

    def finish_gradients(self, local_loss: Tensor) -> Tensor:
        """Megatron's DP reduction and qk-norm TP sum; returns the global loss sum (one more DP all-reduce)."""
        if self.model.ddp_config.overlap_grad_reduce:
            self._launch_missing_reductions()
        finalize_model_grads([self.model])
        total = local_loss.clone()
        if self._layout.dp_size > 1:
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self._layout.dp_group)
        return total

    def _launch_missing_reductions(self) -> None:
        """With overlap, the backward hooks launch each bucket's reduction once all its gradients are in; a
        rank with no masked token ran no backward, so launch what is missing (every DP rank must join)."""
        for group in self.model.bucket_groups:
            if not group.is_first_batch and group.grad_reduce_handle is None:
                group.start_grad_sync()

    def step(self) -> float:
        """Global norm, clipping and AdamW (then the distributed optimizer's param all-gather)."""
        update_successful, grad_norm, _ = self._optimizer.step()
        if not update_successful:
            raise TrainerError("Megatron's optimizer skipped the step: non-finite gradients (weights unchanged)")
        self._has_state = True
        return float(grad_norm or 0.0)

    def _inner(self) -> list[Any]:
        return list(self._optimizer.chained_optimizers)

    # The plain optimizer's state is torch AdamW's (DP replicas equal); the distributed optimizer's is per DP rank
    # (its state_dict and its dp_reshardable parameter state), so it resumes at the same TP and DP size only. Before
    # the first step there is no state (Megatron's state_dict() needs one): saved as None.
    def state_dict(self) -> dict[str, Any] | None:
        if not self._has_state:
            return None
        states = []
        for inner in self._inner():
            state = {"common": _to_cpu(inner.state_dict())}
            if self.dp_sharded:
                param_state = _to_cpu(inner.get_parameter_state_dp_reshardable())
                state[PARAM_STATE_KEY] = param_state
            states.append(state)
        return {"kind": self.kind, "optimizers": states}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is None:
            return
        inners = self._inner()
        if state.get("kind") != self.kind or len(state["optimizers"]) != len(inners):
            raise ValueError(f"optimizer state of kind {state.get('kind')!r} does not fit a {self.kind!r} optimizer")
        for inner, saved in zip(inners, state["optimizers"], strict=True):
            inner.load_state_dict(saved["common"])  # allocates the moments (dummy values when distributed)
            if self.dp_sharded:  # copies into views of the parameters: not an autograd operation
                with torch.no_grad():
                    inner.load_parameter_state_from_dp_reshardable(_mark_unpadded(saved[PARAM_STATE_KEY]))
        self._has_state = True

    def torch_optimizers(self) -> list[torch.optim.Optimizer]:
        return [inner.optimizer for inner in self._inner()]


def _mark_unpadded(param_state: dict[Any, Any]) -> dict[Any, Any]:
    """``get_parameter_state_dp_reshardable`` lists real parameters only; its loader skips entries marked as
    padding, so every entry gets ``padding=False`` (as ``sharded_param_state_dp_reshardable`` marks them)."""
    for key, per_dtype in param_state.items():
        if isinstance(key, int):
            for buckets in per_dtype.values():
                for bucket in buckets:
                    for entry in bucket:
                        entry["padding"] = False
    return param_state
