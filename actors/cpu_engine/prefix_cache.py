"""A radix prefix cache: keys/values of token sequences already computed, reused by requests that start the same way.

As SGLang's radix cache (``srt/mem_cache/radix_cache.py``); reuse shows in each answer's ``meta_info.cached_tokens``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class PrefixHit:
    """``length`` reusable tokens and their keys/values per layer, ``[n_kv_heads, length, head_dim]``."""

    length: int
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


@dataclass(eq=False)
class _Node:
    """A run of ``tokens`` and their keys/values per layer (``[n_kv_heads, len(tokens), head_dim]``)."""

    tokens: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    parent: _Node | None
    last_used: int = 0
    children: dict[int, _Node] = field(default_factory=dict)


class PrefixCache:
    """Thread-safe; ``max_tokens`` bounds the tokens held (0 disables caching).

    A tree keyed by token ids, one node per shared run of tokens holding that run's keys/values per layer. Prompts
    are inserted after their prefill; finished requests insert their prompt plus generated tokens (all but the last,
    whose keys/values were never computed), so a follow-up turn that repeats an earlier answer reuses it.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._root = _Node((), [], [], None)
        self._tokens = 0
        self._clock = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def num_tokens(self) -> int:
        return self._tokens

    def match(self, tokens: Sequence[int], limit: int) -> PrefixHit | None:
        """The longest cached prefix of ``tokens``, at most ``limit`` long; None when under one token."""
        limit = min(limit, len(tokens))
        segments: list[tuple[_Node, int]] = []
        with self._lock:
            now, node, pos = next(self._clock), self._root, 0
            while pos < limit and (child := node.children.get(tokens[pos])) is not None:
                shared = _common_prefix(child.tokens, tokens, pos, limit)
                child.last_used = now
                segments.append((child, shared))
                pos += shared
                if shared < len(child.tokens):
                    break
                node = child
        if pos == 0:
            return None
        layers = range(len(segments[0][0].keys))
        keys = [torch.cat([n.keys[layer][:, :used] for n, used in segments], dim=1) for layer in layers]
        values = [torch.cat([n.values[layer][:, :used] for n, used in segments], dim=1) for layer in layers]
        return PrefixHit(pos, keys, values)

    def insert(self, tokens: Sequence[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Remember ``tokens``' keys/values (``[n_kv_heads, >= len(tokens), head_dim]`` per layer)."""
        if self.max_tokens <= 0 or not tokens:
            return
        with self._lock:
            now, node, pos = next(self._clock), self._root, 0
            while pos < len(tokens):
                child = node.children.get(tokens[pos])
                if child is None:
                    run = slice(pos, len(tokens))
                    leaf = _Node(tuple(tokens[run]), _copy(keys, run), _copy(values, run), node, now)
                    node.children[tokens[pos]] = leaf
                    self._tokens += len(leaf.tokens)
                    break
                shared = _common_prefix(child.tokens, tokens, pos, len(tokens))
                if shared < len(child.tokens):
                    child = _split(child, shared)
                child.last_used = now
                node, pos = child, pos + shared
            self._evict()

    def flush(self) -> int:
        """Forget everything; returns how many tokens were cached. ``/flush_cache`` and weight updates
        (``flush_cache=true``) call it, since cached keys/values belong to the old weights."""
        with self._lock:
            dropped, self._tokens = self._tokens, 0
            self._root.children.clear()
        return dropped

    def _evict(self) -> None:
        """Drop least recently used leaves until at most ``max_tokens`` are held (lock held)."""
        if self._tokens <= self.max_tokens:
            return
        heap = [(leaf.last_used, id(leaf), leaf) for leaf in self._leaves()]
        heapq.heapify(heap)
        while self._tokens > self.max_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.tokens[0]]
            self._tokens -= len(leaf.tokens)
            if parent is not self._root and not parent.children:
                heapq.heappush(heap, (parent.last_used, id(parent), parent))

    def _leaves(self) -> list[_Node]:
        leaves, pending = [], list(self._root.children.values())
        while pending:
            node = pending.pop()
            if node.children:
                pending.extend(node.children.values())
            else:
                leaves.append(node)
        return leaves


def _split(node: _Node, at: int) -> _Node:
    """Cut ``node`` after ``at`` tokens: a new parent holds the head, ``node`` keeps the tail; returns the head."""
    assert node.parent is not None
    head_run, tail_run = slice(0, at), slice(at, len(node.tokens))
    head = _Node(node.tokens[:at], _copy(node.keys, head_run), _copy(node.values, head_run), node.parent)
    head.last_used = node.last_used
    node.parent.children[head.tokens[0]] = head
    node.tokens, node.keys, node.values = node.tokens[at:], _copy(node.keys, tail_run), _copy(node.values, tail_run)
    node.parent = head
    head.children[node.tokens[0]] = node
    return head


def _copy(tensors: list[torch.Tensor], run: slice) -> list[torch.Tensor]:
    """Own copies of ``tensors[:, run]`` (views would keep whole batches alive)."""
    return [t[:, run].clone() for t in tensors]


def _common_prefix(cached: tuple[int, ...], tokens: Sequence[int], start: int, stop: int) -> int:
    """How many of ``cached`` equal ``tokens[start:stop]`` from the front."""
    length = min(len(cached), stop - start)
    for index in range(length):
        if cached[index] != tokens[start + index]:
            return index
    return length
