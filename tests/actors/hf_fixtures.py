"""Tiny Hugging Face checkpoints and a tokenizer, built locally (transformers + tokenizers, never the hub).

Reusable by any test: ``make_checkpoint(kind, directory)`` writes a model directory that
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load with local files only.

- ``llama``: GQA (8 query heads over 4 key/value heads), an explicit head_dim (8 * 8 != hidden 32) and llama3
  RoPE scaling that changes the frequencies at these lengths.
- ``mistral``: GQA, no sliding window.
- ``qwen2``: q/k/v biases, tied embeddings, saved as several safetensors shards with an index.
- ``qwen3``: q/k RMSNorm per head, GQA.

Weights are drawn with a large spread (and norms away from 1), so log-probabilities are far from uniform and a
wrong mapping of any tensor changes them.
"""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB_SIZE = 320  # the tokenizer's ~300 tokens fit; divisible by 2 for tensor parallelism
KINDS = ("llama", "mistral", "qwen2", "qwen3")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Reinforcement learning from human feedback trains a policy with rewards.",
    "What is two plus two? Two plus two is four.",
    "A tokenizer splits text into tokens; a model predicts the next token.",
    "Hello world! Hello trainer, hello engine.",
] * 20


def build_tokenizer(directory: Path) -> Path:
    """Train a byte-level BPE tokenizer on a small corpus and save it (with a chat template) in ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",
        eos_token="<|end|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
    )
    directory.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(directory))
    return directory


def hf_config(kind: str):  # -> transformers.PretrainedConfig
    """The tiny transformers config of ``kind``."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-5,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    if kind == "llama":
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}  # fmt: skip
        return LlamaConfig(**common, head_dim=8, rope_parameters=rope, tie_word_embeddings=False)
    if kind == "mistral":
        return MistralConfig(
            **common, sliding_window=None, rope_parameters={"rope_type": "default", "rope_theta": 500.0}
        )
    if kind == "qwen2":
        return Qwen2Config(
            **common, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6}
        )
    if kind == "qwen3":
        return Qwen3Config(**common, head_dim=8, tie_word_embeddings=False)
    raise ValueError(f"unknown checkpoint kind {kind!r}; one of {KINDS}")


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Spread every weight widely (norm weights around 1, biases non-zero) so each tensor matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                param.copy_(0.5 * noise)
            else:
                param.copy_(noise / param.shape[-1] ** 0.5 * 1.5)


def make_checkpoint(kind: str, directory: Path, *, seed: int = 0, with_tokenizer: bool = True) -> Path:
    """Write a random tiny ``kind`` checkpoint (float32 safetensors) and the local tokenizer to ``directory``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(kind), dtype=torch.float32)
    randomize(model, seed)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    shard = "24KB" if kind == "qwen2" else "50MB"  # qwen2: several shards and an index
    model.save_pretrained(str(directory), max_shard_size=shard)
    if with_tokenizer:
        build_tokenizer(directory)
    return directory


def load_reference(directory: Path):  # -> transformers.PreTrainedModel
    """transformers' own model for ``directory``, float32, eval mode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True, dtype=torch.float32)
    return model.eval()


def reference_logprobs(directory: Path, rows: list[list[int]]) -> list[torch.Tensor]:
    """log p(token_t | tokens_<t) for t >= 1 of each row, from transformers (float32)."""
    model = load_reference(directory)
    out = []
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row])
            logits = model(input_ids=ids).logits[0, :-1].float()
            out.append(logits.log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1))
    return out
