"""Gradient synchronization and clipping without Megatron's DDP (which needs CUDA).

Tensor parallel needs no sync but for qwen3's q/k norms: Megatron's layers already give each shard its gradient.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from actors.trainer import _megatron as mcore


def allreduce_gradients(params: list[Tensor], extra: Tensor, *, group: dist.ProcessGroup, size: int) -> Tensor:
    """Sum every ``param.grad`` over ``group`` in place, together with ``extra`` (1-D); returns its sum.

    Data parallel: every rank's loss is already divided by the global masked-token count, so gradients are
    *summed* over the DP group (one flat all-reduce), not averaged. Missing gradients count as zeros so that every
    rank sends the same layout.
    """
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = _flatten_dense_tensors([*grads, extra.reshape(-1).to(grads[0].device, grads[0].dtype)])
    if size > 1:
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    synced = _unflatten_dense_tensors(flat, [*grads, extra.reshape(-1)])
    for param, grad in zip(params, synced[:-1], strict=True):
        if param.grad is None:
            param.grad = grad.clone()
        else:
            param.grad.copy_(grad)
    return synced[-1]


def clip_gradients(params: list[Tensor], max_norm: float, *, tp_group: dist.ProcessGroup, tp_size: int) -> float:
    """Global L2 norm of the gradients over the whole model (all TP shards); scales them down to
    ``max_norm`` when it is positive and exceeded. Returns the norm before clipping."""
    squares = torch.zeros(1, dtype=torch.float64, device=params[0].device)
    for param in params:
        if param.grad is not None and mcore.param_is_not_tensor_parallel_duplicate(param):
            squares += param.grad.detach().double().pow(2).sum()
    if tp_size > 1:
        dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=tp_group)
    norm = math.sqrt(float(squares.item()))
    if max_norm > 0 and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for param in params:
            if param.grad is not None:
                param.grad.mul_(scale)
    return norm


def sum_qk_norm_gradients(named: dict[str, Tensor], *, group: dist.ProcessGroup, size: int) -> None:
    """Sum the gradients of the q/k layernorm weights over the TP ``group`` (in place, one all-reduce).

    Norm weights are replicated and get identical gradients on every TP rank, except qwen3's per-head q/k norms:
    each TP rank only sees its own heads, so their gradients are partial sums (megatron-core's
    ``finalize_model_grads`` sums them for ``qk_layernorm`` too).
    """
    grads = [p.grad for name, p in named.items() if ("q_layernorm" in name or "k_layernorm" in name)]
    grads = [g for g in grads if g is not None]
    if size <= 1 or not grads:
        return
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(synced)
