"""Turning a rank's rollout shard (token ids, loss mask, advantages) into padded tensors, checked."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

TokenRows = Sequence[Sequence[int]] | Tensor
FloatRows = Sequence[Sequence[float]] | Tensor
Advantages = Sequence[float] | Sequence[Sequence[float]] | Tensor


@dataclass(frozen=True)
class PackedBatch:
    """Right-padded tensors; ``mask`` is 0 on padding, so padded positions never contribute."""

    tokens: Tensor  # [b, s] int64
    mask: Tensor  # [b, s - 1] float32, for targets tokens[:, 1:]
    advantages: Tensor  # [b, s - 1] float32
    extras: dict[str, Tensor] = field(default_factory=dict)  # [b, s - 1] each, aligned with mask

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def masked_tokens(self) -> int:
        return int(self.mask.sum())

    def rows(self, start: int, stop: int) -> PackedBatch:
        """Rows ``start:stop``, cut after their last masked target (later tokens cannot matter: causal)."""
        mask = self.mask[start:stop]
        used = (mask != 0).any(dim=0).nonzero()
        width = int(used[-1]) + 2 if used.numel() else 2
        extras = {name: value[start:stop, : width - 1] for name, value in self.extras.items()}
        return PackedBatch(
            self.tokens[start:stop, :width], mask[:, : width - 1], self.advantages[start:stop, : width - 1], extras
        )

    def with_extras(self, **extras: Tensor) -> PackedBatch:
        return replace(self, extras={**self.extras, **extras})

    def parts(self, count: int) -> list[PackedBatch]:
        """``count`` consecutive row ranges of near-equal size: the mini-batches of one rollout batch."""
        bounds = [dp_shard_bounds(self.size, dp_rank=index, dp_size=count) for index in range(count)]
        return [self.rows(start, stop) for start, stop in bounds]

    def micro_batches(self, size: int | None) -> list[PackedBatch]:
        """Consecutive groups of ``size`` rows (all rows when None) that have masked tokens; TP peers hold
        the same rows, so they skip the same empty groups together."""
        step = size or self.size
        groups = [self.rows(start, min(start + step, self.size)) for start in range(0, self.size, step)]
        return [group for group in groups if group.masked_tokens > 0]

    def fingerprint(self) -> int:
        """A 62-bit hash of the contents, to check that TP peers were given the same shard."""
        digest = hashlib.blake2b(digest_size=8)
        for tensor in (self.tokens, self.mask, self.advantages):
            digest.update(str(tuple(tensor.shape)).encode())
            digest.update(tensor.contiguous().numpy().tobytes())
        return int.from_bytes(digest.digest(), "little") >> 2


def _rows(name: str, value: Sequence[Sequence[float]] | Tensor, dtype: torch.dtype) -> list[Tensor]:
    if isinstance(value, Tensor):
        if value.dim() != 2:
            raise ValueError(f"{name} must be 2-D [batch, seq], got shape {list(value.shape)}")
        return [row.to(dtype) for row in value.detach().cpu()]
    rows: list[Tensor] = []
    for index, row in enumerate(value):
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, Tensor)):
            raise ValueError(f"{name}[{index}] must be a sequence of numbers, got {type(row).__name__}")
        rows.append(torch.as_tensor(list(row) if not isinstance(row, Tensor) else row, dtype=dtype))
    return rows


def _per_sequence(advantages: Advantages, count: int) -> bool:
    if isinstance(advantages, Tensor):
        return advantages.dim() == 1
    return len(advantages) == count and all(not isinstance(a, (Sequence, Tensor)) for a in advantages)


# tokens: prompt + response per sample, at least 2 each. loss_mask: per token, 1 where the policy produced it
# (the first token is never predicted, so its entry is ignored; None: all). advantages: one per sequence or one per
# token. Per-token values of the response (logprobs, version lags) align with each sequence's last tokens
# (pack_tail_values, in PackedBatch.extras). Targets are tokens[:, 1:], so the mask and advantages lose a column.
def pack_batch(
    tokens: TokenRows,
    loss_mask: FloatRows | None,
    advantages: Advantages,
    *,
    vocab_size: int,
    max_length: int,
) -> PackedBatch:
    """Check and pad one rank's shard; raises ValueError naming the argument and the row."""
    token_rows = _rows("tokens", tokens, torch.int64)
    count = len(token_rows)
    if count == 0:
        raise ValueError("tokens is empty: a training batch needs at least one sequence")
    for index, row in enumerate(token_rows):
        if not 2 <= len(row) <= max_length:
            raise ValueError(f"tokens[{index}] has {len(row)} tokens; need 2..{max_length}")
        if int(row.min()) < 0 or int(row.max()) >= vocab_size:
            raise ValueError(f"tokens[{index}] has ids outside [0, {vocab_size})")
    lengths = [len(row) for row in token_rows]
    mask_rows = _aligned("loss_mask", loss_mask, lengths) if loss_mask is not None else None
    for index, row in enumerate(mask_rows or []):
        if not bool(((row == 0) | (row == 1)).all()):
            raise ValueError(f"loss_mask[{index}] must hold only 0 and 1")
    if _per_sequence(advantages, count):
        per_seq = torch.as_tensor(advantages, dtype=torch.float32).reshape(-1)  # type: ignore[arg-type]
        if per_seq.numel() != count:
            raise ValueError(f"advantages has {per_seq.numel()} values for {count} sequences")
        adv_rows = [torch.full((n,), float(a)) for n, a in zip(lengths, per_seq.tolist(), strict=True)]
    else:
        adv_rows = _aligned("advantages", advantages, lengths)  # type: ignore[arg-type]
    width = max(lengths)
    packed_tokens = torch.zeros((count, width), dtype=torch.int64)
    packed_mask = torch.zeros((count, width - 1), dtype=torch.float32)
    packed_adv = torch.zeros((count, width - 1), dtype=torch.float32)
    for index, n in enumerate(lengths):
        packed_tokens[index, :n] = token_rows[index]
        packed_mask[index, : n - 1] = 1.0 if mask_rows is None else mask_rows[index][1:]
        packed_adv[index, : n - 1] = adv_rows[index][1:]
    if not torch.isfinite(packed_adv).all():
        raise ValueError("advantages contain NaN or infinity")
    return PackedBatch(packed_tokens, packed_mask, packed_adv)


def _aligned(name: str, value: FloatRows, lengths: list[int]) -> list[Tensor]:
    rows = _rows(name, value, torch.float32)
    if len(rows) != len(lengths):
        raise ValueError(f"{name} has {len(rows)} rows for {len(lengths)} sequences")
    exact = not isinstance(value, Tensor)  # a tensor's rows may run past a sequence's end (padding)
    for index, (row, n) in enumerate(zip(rows, lengths, strict=True)):
        if len(row) < n or (exact and len(row) != n):
            raise ValueError(f"{name}[{index}] has {len(row)} values for a sequence of {n} tokens")
    return [row[:n] for row, n in zip(rows, lengths, strict=True)]


def pack_tail_values(name: str, rows: Sequence[Sequence[float]], packed: PackedBatch) -> Tensor:
    """Per-token values of each response as a [b, s - 1] tensor aligned with ``packed.mask``: row ``i``'s values
    belong to the tokens of sequence ``i`` that end at its last trained one, and must cover all its trained ones."""
    if len(rows) != packed.size:
        raise ValueError(f"{name} has {len(rows)} rows for {packed.size} sequences")
    out = torch.zeros_like(packed.mask)
    for index, row in enumerate(rows):
        values = torch.as_tensor(list(row), dtype=torch.float32)
        trained = packed.mask[index].nonzero()
        if not trained.numel():
            continue
        end = int(trained[-1]) + 1
        start = end - values.numel()
        if start < 0 or int(trained[0]) < start:
            raise ValueError(
                f"{name}[{index}] has {values.numel()} values for a response of {end - int(trained[0])} trained "
                "tokens: one per generated token is needed"
            )
        out[index, start:end] = values
    if not torch.isfinite(out).all():
        raise ValueError(f"{name} contains NaN or infinity")
    return out


def dp_shard_bounds(count: int, *, dp_rank: int, dp_size: int) -> tuple[int, int]:
    """``[start, stop)`` of data-parallel rank ``dp_rank``'s contiguous share of ``count`` samples."""
    if not 0 <= dp_rank < dp_size:
        raise ValueError(f"dp_rank={dp_rank} must be in [0, dp_size={dp_size})")
    base, extra = divmod(count, dp_size)
    start = dp_rank * base + min(dp_rank, extra)
    return start, start + base + (1 if dp_rank < extra else 0)
