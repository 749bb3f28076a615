"""A torch.distributed group for weight updates, built exactly as SGLang builds it.

The same recipe on both sides is what lets our trainer talk to real SGLang and real trainers (miles) talk to our CPU
engine.
"""

from __future__ import annotations

import datetime
import ipaddress

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from runtime.collective import new_process_group

BACKENDS = ("gloo", "nccl")


def tcp_init_method(host: str, port: int) -> str:
    """``tcp://host:port`` with IPv6 hosts bracketed (SGLang's ``NetworkAddress.to_tcp``)."""
    try:
        bracket = isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        bracket = False
    return f"tcp://[{host}]:{port}" if bracket else f"tcp://{host}:{port}"


def init_weights_process_group(
    *, backend: str, init_method: str, world_size: int, rank: int, group_name: str, timeout: datetime.timedelta
) -> dist.ProcessGroup:
    """Join (rank 0: host) a named group by SGLang's recipe; blocks until all ``world_size`` ranks joined.

    SGLang 0.5.23 (``srt/utils/common.py`` ``init_custom_process_group``, called from
    ``srt/model_executor/model_runner_components/weight_updater.py`` ``init_weights_update_group``) joins through
    torch's ``tcp://`` rendezvous (a TCPStore hosted by rank 0 that counts every joining rank), wraps the store in
    ``PrefixStore(group_name, store)`` and builds the group with ``_new_process_group_helper``, outside the default
    process group."""
    store, rank, world_size = next(c10d.rendezvous(init_method, rank, world_size, timeout=timeout))
    return new_process_group(store, rank=rank, world_size=world_size, backend=backend, name=group_name, timeout=timeout)


class WeightsGroup:
    """One rank of a weight-update group; :meth:`broadcast` sends (rank 0) or receives (other ranks).

    The trainer is rank 0; engine TP rank ``r`` joins as ``rank_offset + r``. Tensors go by
    ``torch.distributed.broadcast(tensor, src=0, group=group)``."""

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
        if not group_name:
            raise ValueError("group_name must not be empty (SGLang refuses it too)")
        self.rank, self.world_size, self.group_name, self.backend = rank, world_size, group_name, backend
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self._pg: dist.ProcessGroup | None = init_weights_process_group(
            backend=backend,
            init_method=tcp_init_method(master_address, master_port),
            world_size=world_size,
            rank=rank,
            group_name=group_name,
            timeout=self.timeout,
        )

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def start_broadcast(self, tensor: torch.Tensor) -> dist.Work:
        """Start broadcasting ``tensor`` in place from rank 0; poll ``is_completed()`` or ``wait()`` on it."""
        if self._pg is None:
            raise RuntimeError(f"weight-update group {self.group_name!r} is closed")
        work = dist.broadcast(tensor, src=0, group=self._pg, async_op=True)
        assert work is not None
        return work

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Broadcast ``tensor`` in place from rank 0; raises if a peer does not join within the timeout."""
        self.start_broadcast(tensor).wait(self.timeout)

    def barrier(self) -> None:
        self.broadcast(torch.zeros(1, device=self.device))

    def close(self, *, abort: bool = False) -> None:
        """Leave the group (as SGLang: ``destroy_process_group``); ``abort`` first cancels pending collectives."""
        pg, self._pg = self._pg, None
        if pg is None:
            return
        if abort and hasattr(pg, "abort"):
            try:
                pg.abort()
            except Exception:  # best effort: the group is being dropped anyway
                pass
        try:
            dist.destroy_process_group(pg)
        except Exception:  # an aborted group may refuse a second shutdown; it is unregistered either way
            c10d._world.pg_group_ranks.pop(pg, None)


def dtype_from_name(name: str) -> torch.dtype:
    """``"float32"``/``"torch.bfloat16"`` -> the torch dtype (SGLang sends dtypes as strings)."""
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"dtype {name!r} is not a torch dtype name such as 'float32' or 'bfloat16'")
    return value


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
