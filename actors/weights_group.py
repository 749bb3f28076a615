"""A torch.distributed group for weight updates, outside the default process group (SGLang's protocol).

``/init_weights_update_group`` makes the trainer (rank 0) and every engine rank join a group through a
TCPStore at ``master_address:master_port`` that the trainer hosts; ``/update_weights_from_distributed``
then broadcasts each tensor from rank 0. The group is built directly from a store and a backend object
(``ProcessGroupGloo``/``ProcessGroupNCCL``), so neither side needs (or disturbs) a default process group.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")


class WeightsGroup:
    """One rank of a weight-update group; :meth:`broadcast` sends (rank 0) or receives (other ranks)."""

    def __init__(
        self,
        *,
        master_address: str,
        master_port: int,
        rank: int,
        world_size: int,
        group_name: str,
        backend: str,
        timeout_s: float,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is not one of {list(BACKENDS)}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside the group's world size {world_size}")
        self.rank, self.world_size, self.group_name, self.backend = rank, world_size, group_name, backend
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self._store = dist.TCPStore(
            master_address,
            master_port,
            world_size,
            is_master=rank == 0,
            timeout=self.timeout,
            wait_for_workers=False,
        )
        store = dist.PrefixStore(f"weights_group/{group_name}", self._store)
        if backend == "gloo":
            self._pg = dist.ProcessGroupGloo(store, rank, world_size, self.timeout)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self.timeout
            self._pg = dist.ProcessGroupNCCL(store, rank, world_size, options)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def start_broadcast(self, tensor: torch.Tensor) -> dist.Work:
        """Start broadcasting ``tensor`` in place from rank 0; poll ``is_completed()`` or ``wait()`` on it."""
        if self._pg is None:
            raise RuntimeError(f"weight-update group {self.group_name!r} is closed")
        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.rootTensor = 0
        options.timeout = self.timeout
        return self._pg.broadcast([tensor], options)

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Broadcast ``tensor`` in place from rank 0; raises if a peer does not join within the timeout."""
        self.start_broadcast(tensor).wait(self.timeout)

    def barrier(self) -> None:
        self.broadcast(torch.zeros(1, device=self.device))

    def close(self, *, abort: bool = False) -> None:
        """Drop the group (local); ``abort`` also cancels pending collectives instead of waiting for them."""
        pg, self._pg = self._pg, None
        method = "abort" if abort else "shutdown"
        if pg is not None and hasattr(pg, method):
            try:
                getattr(pg, method)()
            except Exception:  # best effort: the group is being dropped anyway
                pass
        self._store = None


def dtype_from_name(name: str) -> torch.dtype:
    """``"float32"``/``"torch.bfloat16"`` -> the torch dtype (SGLang sends dtypes as strings)."""
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"dtype {name!r} is not a torch dtype name such as 'float32' or 'bfloat16'")
    return value


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
