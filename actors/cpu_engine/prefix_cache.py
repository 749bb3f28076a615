"""A prefix cache: the keys/values of prompts already computed, reused by prompts that start the same way.

SGLang's radix cache does this per token with a tree; here each cached prompt keeps its per-layer keys and
values, a lookup takes the longest common prefix over the entries, and the least recently used prompts are
evicted beyond ``max_tokens``. Reuse shows in each answer's ``meta_info.cached_tokens``; ``/flush_cache``
and weight updates (``flush_cache=true``) empty it, since cached keys/values belong to the old weights.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PrefixHit:
    """``length`` reusable tokens and their keys/values per layer, ``[n_kv_heads, length, head_dim]``."""

    length: int
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class PrefixCache:
    """Thread-safe; ``max_tokens`` bounds the tokens held (0 disables caching)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], tuple[list[torch.Tensor], list[torch.Tensor]]] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    @property
    def num_tokens(self) -> int:
        return self._tokens

    def match(self, prompt: list[int], limit: int) -> PrefixHit | None:
        """The longest cached prefix of ``prompt``, at most ``limit`` tokens long; None when under one token."""
        best_key, best = None, 0
        with self._lock:
            for key in self._entries:
                shared = _common_prefix(key, prompt, limit)
                if shared > best:
                    best_key, best = key, shared
            if best_key is None:
                return None
            self._entries.move_to_end(best_key)
            keys, values = self._entries[best_key]
        return PrefixHit(best, [k[:, :best] for k in keys], [v[:, :best] for v in values])

    def insert(self, prompt: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Remember ``prompt``'s keys/values (``[n_kv_heads, len(prompt), head_dim]`` per layer)."""
        key = tuple(prompt)
        if not key or len(key) > self.max_tokens:
            return
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = ([k.clone() for k in keys], [v.clone() for v in values])
            self._tokens += len(key)
            while self._tokens > self.max_tokens:
                evicted, _ = self._entries.popitem(last=False)
                self._tokens -= len(evicted)

    def flush(self) -> int:
        """Forget everything; returns how many tokens were cached."""
        with self._lock:
            dropped, self._tokens = self._tokens, 0
            self._entries.clear()
        return dropped


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    length = min(len(a), len(b), limit)
    for index in range(length):
        if a[index] != b[index]:
            return index
    return length
