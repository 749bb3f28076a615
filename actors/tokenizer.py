"""A byte-level tokenizer: ids 0..255 are bytes, then a few special tokens. Used by the CPU engine and the demo."""

from __future__ import annotations

BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
VOCAB_SIZE = 260  # 256 bytes + BOS, EOS, PAD and one spare


def encode(text: str, *, add_bos: bool = True) -> list[int]:
    """Token ids of ``text`` (UTF-8 bytes), with BOS in front unless ``add_bos`` is false."""
    ids = list(text.encode("utf-8"))
    return [BOS_ID, *ids] if add_bos else ids


def decode(ids: list[int]) -> str:
    """Text of ``ids``; special tokens are dropped, invalid UTF-8 is replaced."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")
