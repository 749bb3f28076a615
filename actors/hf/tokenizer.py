"""A Hugging Face tokenizer from a model directory (local files only, never the hub) and its chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TokenizerError(ValueError):
    """The directory holds no usable tokenizer, or it lacks what was asked (e.g. a chat template)."""


class HfTokenizer:
    """Text <-> token ids with the directory's tokenizer; ``apply_chat_template`` renders chat messages."""

    def __init__(self, model_path: str | Path) -> None:
        from transformers import AutoTokenizer  # seconds to import; only users of HF directories pay it

        self.path = Path(model_path)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise TokenizerError(f"no tokenizer loadable from {self.path} (local files only): {exc}") from exc

    @property
    def vocab_size(self) -> int:
        """Token ids this tokenizer can produce (base vocabulary plus added tokens)."""
        return len(self._tokenizer)

    @property
    def bos_token_id(self) -> int | None:
        """The tokenizer's bos token id (None for tokenizers without one, such as Qwen's)."""
        bos = self._tokenizer.bos_token_id
        return None if bos is None else int(bos)

    @property
    def eos_token_ids(self) -> list[int]:
        """Ids that end a generation (the tokenizer's eos token; empty if it has none)."""
        eos = self._tokenizer.eos_token_id
        return [] if eos is None else [int(eos)]

    @property
    def has_chat_template(self) -> bool:
        return bool(self._tokenizer.chat_template)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages`` rendered with the directory's chat template."""
        if not self.has_chat_template:
            raise TokenizerError(f"the tokenizer in {self.path} has no chat template")
        rendered = self.render_chat(messages, add_generation_prompt=add_generation_prompt)
        return self.encode(rendered, add_special_tokens=False)

    def render_chat(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The chat template's text for ``messages``."""
        if not self.has_chat_template:
            raise TokenizerError(f"the tokenizer in {self.path} has no chat template")
        text = self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return str(text)
