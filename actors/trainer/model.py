"""A megatron-core GPTModel built from the shared :class:`ModelConfig` (llama/mistral/qwen2/qwen3), runnable on CPU.

megatron-core 0.16's CUDA-only pieces are replaced or turned off here; the rest of its local spec runs as-is."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from actors.hf.rope import rope_inv_freq
from actors.model_config import ModelConfig
from actors.trainer import _megatron as mcore

if TYPE_CHECKING:
    from actors.trainer._megatron import GPTModel, ModuleSpec, TransformerConfig


# use_cpu_initialization: weights are drawn whole on the CPU RNG, then sliced per TP rank, so the initial
# weights are the same for every TP size. Every fusion is CUDA-only and off; dropout is 0, which also makes the
# CUDA RNG tracker unnecessary (distributed.setup_parallel).
def transformer_config(
    model: ModelConfig, *, tensor_model_parallel_size: int, initialize: bool = True
) -> TransformerConfig:
    """Megatron's TransformerConfig for a llama-style model: RMSNorm, SwiGLU, no dropout, biases only on q/k/v
    (qwen2), RMSNorm on q/k heads (qwen3). ``initialize=False`` skips drawing random weights (loaded next)."""
    return mcore.TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_key_value_heads,
        kv_channels=model.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=model.rms_norm_eps,
        activation_func=F.silu,
        gated_linear_unit=True,
        add_bias_linear=False,
        add_qkv_bias=model.qkv_bias,
        qk_layernorm=model.qk_norm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=tensor_model_parallel_size,
        params_dtype=torch.float32,
        use_cpu_initialization=True,
        perform_initialization=initialize,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        sequence_parallel=False,
        cuda_graph_scope=[],  # the default "full" only triggers a deprecation warning
        # The loss is already divided by the global masked-token count, so Megatron's DDP must sum
        # gradients over DP ranks instead of averaging them (its only other use is MoE/MTP, unused here).
        calculate_per_token_loss=True,
    )


def _layer_spec(model: ModelConfig) -> ModuleSpec:
    from actors.trainer.cpu_layers import SdpaCoreAttention  # megatron-core is imported here, not with this module

    spec = mcore.get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=model.qk_norm)
    attention = spec.submodules.self_attention
    attention_submodules = dataclasses.replace(attention.submodules, core_attention=SdpaCoreAttention)
    self_attention = dataclasses.replace(attention, submodules=attention_submodules)
    return dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, self_attention=self_attention))


def build_gpt_model(
    model: ModelConfig, *, tensor_model_parallel_size: int, device: torch.device, initialize: bool = True
) -> GPTModel:
    """This rank's slice of the model; call after ``distributed.setup_parallel`` and ``torch.manual_seed``.

    ``initialize=False`` leaves the weights uninitialized (for loading a checkpoint into them right after).
    """
    config = transformer_config(model, tensor_model_parallel_size=tensor_model_parallel_size, initialize=initialize)
    from actors.trainer.cpu_layers import CpuRotaryEmbedding

    gpt = mcore.GPTModel(
        config=config,
        transformer_layer_spec=_layer_spec(model),
        vocab_size=model.vocab_size,
        max_sequence_length=model.max_position_embeddings,
        pre_process=True,
        post_process=True,
        share_embeddings_and_output_weights=model.tie_word_embeddings,
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=model.rope_theta,  # type: ignore[arg-type]
    )
    if device.type == "cpu":
        gpt.rotary_pos_emb = CpuRotaryEmbedding(
            kv_channels=model.head_dim,
            rotary_percent=1.0,
            rotary_base=model.rope_theta,  # type: ignore[arg-type]
            use_cpu_initialization=True,
        )
    # RoPE frequencies exactly as transformers computes them (Megatron's own llama3 scaling hard-codes 8192).
    gpt.rotary_pos_emb.inv_freq = rope_inv_freq(model)
    return gpt.to(device)


def position_ids(tokens: Tensor) -> Tensor:
    """0..s-1 for each row of a right-padded [b, s] batch."""
    return torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0).expand_as(tokens)


def token_logprobs(gpt: GPTModel, tokens: Tensor) -> Tensor:
    """log p(tokens[:, t] | tokens[:, :t]) for t >= 1, shape [b, s - 1]; differentiable, TP-aware.

    Megatron's vocab-parallel cross entropy gives -log p without gathering the logits across TP ranks.
    """
    inputs = tokens[:, :-1]
    losses = gpt(inputs, position_ids(inputs), None, labels=tokens[:, 1:])
    return -losses


def logprobs_and_entropy(
    gpt: GPTModel,
    tokens: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    tp_group: dist.ProcessGroup | None = None,
    tp_rank: int = 0,
    tp_size: int = 1,
) -> tuple[Tensor, Tensor | None]:
    """log p(tokens[:, t] | tokens[:, :t]) at ``temperature`` (the engines' sampling temperature), and with
    ``with_entropy`` the entropy of each position's distribution; [b, s - 1] each, differentiable, TP-aware.

    At temperature 1 without entropy this is :func:`token_logprobs`; otherwise the vocab-parallel log-softmax
    is computed here from the local logits (max, sum of exponentials and the target's logit reduced over TP).
    """
    if temperature == 1.0 and not with_entropy:
        return token_logprobs(gpt, tokens), None
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = gpt(inputs, position_ids(inputs), None).float() / temperature  # [b, s - 1, vocab / tp]

    def tp_sum(value: Tensor) -> Tensor:  # all-reduce forward, identity backward (every TP rank has the same loss)
        return value if tp_size == 1 else mcore.reduce_from_tensor_model_parallel_region(value, group=tp_group)

    peak = logits.detach().max(dim=-1, keepdim=True).values
    if tp_size > 1:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=tp_group)
    shifted = logits - peak
    exp = shifted.exp()
    sum_exp = tp_sum(exp.sum(dim=-1, keepdim=True))
    local_vocab = logits.shape[-1]
    local_targets = targets - tp_rank * local_vocab
    inside = (local_targets >= 0) & (local_targets < local_vocab)
    picked = shifted.gather(-1, local_targets.clamp(0, local_vocab - 1).unsqueeze(-1)).squeeze(-1) * inside
    log_z = sum_exp.log().squeeze(-1)
    logprobs = tp_sum(picked) - log_z
    if not with_entropy:
        return logprobs, None
    expected_logit = tp_sum((exp / sum_exp * shifted).sum(dim=-1))
    return logprobs, log_z - expected_logit
