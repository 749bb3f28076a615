"""Tokenizers for the CPU engine, the rollout and the demo: the byte-level one and the :class:`Tokenizer` interface.

The byte tokenizer is the built-in model's vocabulary; a Hugging Face model's own tokenizer serves behind the same
interface (:func:`tokenizer_for` picks one for a ``model_path``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# The byte tokenizer: ids 0..255 are bytes, then a few special tokens.
BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
VOCAB_SIZE = 260  # 256 bytes + BOS, EOS, PAD and one spare
CHAT_ROLES = ("system", "user", "assistant", "tool")


def encode(text: str, *, add_bos: bool = True) -> list[int]:
    """Token ids of ``text`` (UTF-8 bytes), with BOS in front unless ``add_bos`` is false."""
    ids = list(text.encode("utf-8"))
    return [BOS_ID, *ids] if add_bos else ids


def decode(ids: Sequence[int]) -> str:
    """Text of ``ids``; special tokens are dropped, invalid UTF-8 is replaced."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class Tokenizer(Protocol):
    """What the CPU engine and the rollout ask of a tokenizer (transformers' names and meanings): encode, decode, a
    chat template, the special ids. :class:`actors.hf.HfTokenizer` (a Hugging Face directory's own) is one too."""

    @property
    def bos_token_id(self) -> int | None: ...

    @property
    def eos_token_ids(self) -> list[int]: ...

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages`` rendered by the chat template (transformers' ``tokenize=True``)."""
        ...


class ByteTokenizer:
    """The byte tokenizer as a :class:`Tokenizer`; its chat template is ChatML-like plain text after BOS."""

    bos_token_id = BOS_ID
    eos_token_id = EOS_ID

    @property
    def eos_token_ids(self) -> list[int]:
        return [EOS_ID]

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return encode(text, add_bos=add_special_tokens)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return decode(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        return encode(self.render_chat(messages, add_generation_prompt=add_generation_prompt))

    def render_chat(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """``<|role|>\ncontent\n`` per message, then ``<|assistant|>\n`` when a reply is wanted."""
        parts = []
        for index, message in enumerate(messages):
            role, content = message.get("role"), message.get("content")
            if role not in CHAT_ROLES:
                raise ValueError(f"messages[{index}].role must be one of {list(CHAT_ROLES)}, got {role!r}")
            parts.append(f"<|{role}|>\n{message_text(content, index)}\n")
        if add_generation_prompt:
            parts.append("<|assistant|>\n")
        return "".join(parts)


def message_text(content: Any, index: int) -> str:
    """A message's text: a string, or OpenAI's list of ``{"type": "text", "text": ...}`` parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ValueError(f"messages[{index}].content must be text or a list of text parts (no images or audio)")


BYTE_TOKENIZER = ByteTokenizer()


def tokenizer_for(model_path: str | None) -> Tokenizer:
    """The tokenizer of the Hugging Face directory ``model_path`` (local files only), or the byte tokenizer."""
    if model_path is None:
        return BYTE_TOKENIZER
    from actors.hf.tokenizer import HfTokenizer  # imports transformers: only users of HF directories pay it

    return HfTokenizer(model_path)
