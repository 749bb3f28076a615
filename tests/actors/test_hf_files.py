"""actors.hf on locally built checkpoints: lazy slices, checkpoint checks, RoPE, tokenizer, writing.

Peers' sources of truth called directly: transformers' ``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` and
``models/llama/modeling_llama.py`` ``LlamaRotaryEmbedding.compute_default_rope_parameters`` (RoPE),
``AutoTokenizer`` (tokenizer and chat template), ``safetensors.torch.load_file`` (whole tensors).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hf_fixtures import make_checkpoint
from safetensors.torch import load_file, save_file

from actors.hf import CheckpointError, CheckpointReader, HfTokenizer, TokenizerError, read_model_config, rope_inv_freq
from actors.hf.writer import write_checkpoint
from actors.model_config import ModelConfig, RopeScaling
from actors.trainer.hf_import import check_checkpoint


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("qwen2", tmp_path_factory.mktemp("hf") / "qwen2")


def whole(directory: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in directory.glob("*.safetensors"):
        tensors |= load_file(str(file))
    return tensors


def test_reader_reads_slices_of_sharded_checkpoints(qwen2_dir: Path) -> None:
    full = whole(qwen2_dir)
    assert len(list(qwen2_dir.glob("*.safetensors"))) >= 2 and (qwen2_dir / "model.safetensors.index.json").is_file()
    with CheckpointReader(qwen2_dir) as reader:
        assert set(reader.names()) == set(full)
        name = "model.layers.1.self_attn.o_proj.weight"
        assert reader.shape(name) == tuple(full[name].shape) and reader.dtype(name) == torch.float32
        assert torch.equal(reader.read_part(name, dim=1, part=1, parts=2), full[name][:, 16:])
        assert torch.equal(reader.read_part(name, dim=0, part=0, parts=4), full[name][:8])
        assert torch.equal(
            reader.read("model.layers.0.self_attn.q_proj.bias"), full["model.layers.0.self_attn.q_proj.bias"]
        )
        with pytest.raises(CheckpointError, match=r"o_proj.weight: size 32 does not split into 3"):
            reader.read_part(name, dim=0, part=0, parts=3)
        with pytest.raises(CheckpointError, match=r"tensor nothing\.weight is not in the checkpoint"):
            reader.read("nothing.weight")


def test_checkpoint_check_names_the_tensor(qwen2_dir: Path, tmp_path: Path) -> None:
    model = read_model_config(qwen2_dir)
    with CheckpointReader(qwen2_dir) as reader:
        check_checkpoint(reader, model)  # the fixture itself is complete
    tensors = whole(qwen2_dir)

    def broken(name: str, tensors: dict[str, torch.Tensor]) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        save_file(tensors, str(directory / "model.safetensors"))
        return directory

    missing = broken("missing", {k: v for k, v in tensors.items() if k != "model.layers.1.self_attn.k_proj.bias"})
    reshaped = broken("reshaped", tensors | {"model.norm.weight": torch.ones(31)})
    extra = broken("extra", tensors | {"model.layers.0.mlp.experts.0.weight": torch.ones(2)})
    cases = [(missing, r"missing .*layers\.1\.self_attn\.k_proj\.bias"),
             (reshaped, r"model\.norm\.weight has shape \[31\], expected \[32\]"),
             (extra, r"no place for: \['model\.layers\.0\.mlp\.experts\.0\.weight'\]")]  # fmt: skip
    for directory, message in cases:
        with CheckpointReader(directory) as reader, pytest.raises(CheckpointError, match=message):
            check_checkpoint(reader, model)
    index = json.loads((qwen2_dir / "model.safetensors.index.json").read_text())
    lost_shard = tmp_path / "lost_shard"
    lost_shard.mkdir()
    (lost_shard / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"names shard 'model-\d+-of-\d+\.safetensors', which is not a file"):
        CheckpointReader(lost_shard)
    with pytest.raises(CheckpointError, match=r"neither model\.safetensors\.index\.json nor model\.safetensors"):
        CheckpointReader(tmp_path)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "default", "rope_theta": 500000.0},
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ],
)
def test_rope_frequencies_match_transformers(rope: dict) -> None:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    hf = LlamaConfig(hidden_size=256, num_attention_heads=2, head_dim=128, rope_parameters=dict(rope))
    scaling = (
        None if rope["rope_type"] == "default" else RopeScaling(**{k: v for k, v in rope.items() if k != "rope_theta"})
    )
    ours = rope_inv_freq(
        ModelConfig(
            hidden_size=256,
            num_attention_heads=2,
            num_key_value_heads=2,
            rope_theta=rope["rope_theta"],
            rope_scaling=scaling,
        )
    )
    if rope["rope_type"] == "default":
        theirs, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(hf, device=torch.device("cpu"))
    else:
        theirs, _ = ROPE_INIT_FUNCTIONS[rope["rope_type"]](hf, torch.device("cpu"))
    assert torch.equal(ours, theirs)


def test_tokenizer_loads_locally_with_its_chat_template(qwen2_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(qwen2_dir), local_files_only=True)
    tokenizer = HfTokenizer(qwen2_dir)
    text = "Hello world! Two plus two is four."
    assert tokenizer.encode(text) == reference.encode(text) and len(tokenizer.encode(text)) < len(text)
    assert tokenizer.decode(tokenizer.encode(text)) == text
    messages = [{"role": "user", "content": "What is two plus two?"}]
    assert tokenizer.render_chat(messages) == "<|user|>What is two plus two?<|end|><|assistant|>"
    want = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.apply_chat_template(messages) == reference.encode(want, add_special_tokens=False)
    assert tokenizer.eos_token_ids == [reference.convert_tokens_to_ids("<|end|>")]
    assert tokenizer.vocab_size <= read_model_config(qwen2_dir).vocab_size
    with pytest.raises(TokenizerError, match="no tokenizer loadable"):
        HfTokenizer(tmp_path)


def test_writer_refuses_a_non_empty_target(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(FileExistsError, match="exists and is not an empty directory"):
        write_checkpoint(tmp_path / "taken", [("w", torch.ones(2))], {})
    written = write_checkpoint(tmp_path / "fresh", [("a", torch.ones(4)), ("b", torch.zeros(4))], {"k": 1},
                               max_shard_bytes=16)  # fmt: skip
    index = json.loads((written / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    assert not list(tmp_path.glob(".*partial")), "staging directory left behind"
