"""torch.distributed and megatron-core parallel state, set up from explicit arguments (no environment).

Megatron keeps its process groups in module globals, so a process hosts at most one trainer at a time:
:func:`setup_parallel` refuses to run twice without :func:`teardown_parallel` in between.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from actors.trainer import _megatron as mcore
from actors.trainer.config import Backend
from runtime.collective import interface_towards

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParallelLayout:
    """Where this rank sits: TP groups are consecutive ranks, DP groups stride over them (Megatron order)."""

    rank: int
    world_size: int
    tp_rank: int
    tp_size: int
    dp_rank: int
    dp_size: int
    device: torch.device

    @property
    def tp_group(self) -> dist.ProcessGroup:
        return mcore.parallel_state.get_tensor_model_parallel_group()

    @property
    def dp_group(self) -> dist.ProcessGroup:
        return mcore.parallel_state.get_data_parallel_group()


def resolve_backend(backend: Backend) -> str:
    """``auto`` becomes nccl when CUDA is usable, else gloo."""
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return backend


def init_distributed(
    *, rank: int, world_size: int, master_addr: str, master_port: int, backend: str, timeout_s: float
) -> None:
    """Join the default process group through a TCP rendezvous at ``master_addr:master_port``.

    Rank 0 hosts the rendezvous store. Raises if the other ranks do not arrive within ``timeout_s``;
    the same timeout applies to every later collective on the default group.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialized in this process; call teardown first")
    host = f"[{master_addr}]" if ":" in master_addr and not master_addr.startswith("[") else master_addr
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = interface_towards(master_addr)
        if interface is not None:  # else gloo resolves the hostname, often to loopback on multi-host setups
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    logger.info("rank %d/%d joining %s:%d (backend %s)", rank, world_size, master_addr, master_port, backend)
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{host}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def setup_parallel(*, tensor_model_parallel_size: int, seed: int, timeout_s: float) -> ParallelLayout:
    """Create Megatron's TP/DP groups (after :func:`init_distributed`) and its RNG tracker."""
    if mcore.parallel_state.model_parallel_is_initialized():
        raise RuntimeError("megatron-core parallel state is already initialized in this process")
    # Megatron takes minutes; a fractional value keeps the per-group timeout at timeout_s.
    mcore.parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tensor_model_parallel_size,
        distributed_timeout_minutes=timeout_s / 60.0,  # type: ignore[arg-type]
        create_gloo_process_groups=False,
    )
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
        mcore.mcore_random.model_parallel_cuda_manual_seed(seed, force_reset_rng=True)
    else:
        device = torch.device("cpu")
        # The training tracker forks CUDA RNG states; the inference tracker's fork is a no-op, which is
        # exact here because the trainer runs without dropout.
        mcore.mcore_random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    torch.manual_seed(seed)
    return ParallelLayout(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        tp_rank=mcore.parallel_state.get_tensor_model_parallel_rank(),
        tp_size=mcore.parallel_state.get_tensor_model_parallel_world_size(),
        dp_rank=mcore.parallel_state.get_data_parallel_rank(),
        dp_size=mcore.parallel_state.get_data_parallel_world_size(),
        device=device,
    )


def teardown_parallel() -> None:
    """Destroy Megatron's groups and the default group; safe to call more than once."""
    if mcore.parallel_state.model_parallel_is_initialized():
        mcore.parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def all_ok(ok: bool, *, group: dist.ProcessGroup | None = None) -> bool:
    """True when ``ok`` holds on every rank of ``group``; lets all ranks fail together instead of hanging."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    flag = torch.tensor([1 if ok else 0], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())


def gather_along(tensor: torch.Tensor, dim: int, group: dist.ProcessGroup | None, size: int) -> torch.Tensor:
    """Concatenate every group rank's ``tensor`` along ``dim``, on every rank (a copy when ``size`` is 1)."""
    tensor = tensor.detach().contiguous()
    if size == 1:
        return tensor.clone()
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor, group=group)
    return torch.cat(parts, dim=dim)
