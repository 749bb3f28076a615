"""The trainer on Hugging Face checkpoints: TrainerConfig.model_path in, save_hf_checkpoint out.

References (peers' sources of truth): transformers' own models (``AutoModelForCausalLM.from_pretrained``, float32)
give the log-probabilities the trainer must match; transformers' ``modeling_rope_utils.ROPE_INIT_FUNCTIONS``
gives the RoPE frequencies; megatron-core's GPTModel (``megatron/core/models/gpt/gpt_model.py``) is what loads
the weights. Rank processes run tests/actors/hf_trainer_helpers.py (gloo on 127.0.0.1), killed by pid at the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hf_fixtures import KINDS, load_reference, make_checkpoint, reference_logprobs
from pydantic import ValidationError
from rank_processes import Ranks, free_port
from safetensors.torch import load_file

from actors.trainer import ParallelConfig, TrainerConfig

HELPER = Path(__file__).with_name("hf_trainer_helpers.py")
TOLERANCE = 1e-4
RANKS_DEADLINE_S = 240.0


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf_models")
    for kind in KINDS:
        make_checkpoint(kind, root / kind, seed=KINDS.index(kind))
    return root


@pytest.fixture
def ranks_of(tmp_path: Path) -> Iterator:
    started: list[Ranks] = []

    def start(*, tp: int, models: Path, kinds: tuple[str, ...]) -> Ranks:
        out = tmp_path / f"tp{tp}"
        out.mkdir()
        extra = ["--models", str(models), "--kinds", ",".join(kinds), "--ports",
                 ",".join(str(free_port()) for _ in kinds[1:])]  # fmt: skip
        ranks = Ranks(HELPER, "load_save", world_size=2, tp=tp, out=out, timeout_s=60.0, extra=extra)
        started.append(ranks)
        return ranks

    yield start
    for ranks in started:
        ranks.stop()


def safetensors_of(directory: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        tensors |= load_file(str(file))
    return tensors


def assert_close(got: list[list[float]], want: list[torch.Tensor], what: str) -> None:
    for row, (g, w) in enumerate(zip(got, want, strict=True)):
        diff = (torch.tensor(g) - w).abs().max().item()
        assert diff <= TOLERANCE, f"{what}, row {row}: max abs diff {diff} > {TOLERANCE}"


def check_saved_initial(source: Path, saved: Path) -> None:
    """Before any step the saved directory holds the input's very tensors, config and tokenizer files."""
    want, got = safetensors_of(source), safetensors_of(saved)
    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
    assert json.loads((saved / "config.json").read_text()) == json.loads((source / "config.json").read_text())
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (saved / name).read_bytes() == (source / name).read_bytes(), name
    index = json.loads((saved / "model.safetensors.index.json").read_text())  # 20 kB shards: several files
    assert len(set(index["weight_map"].values())) >= 2 and set(index["weight_map"]) == set(want)


def check_reads(reads: list[dict], tp: int) -> None:
    """Each rank read every matrix as a 1/tp slice (never whole at tp > 1); only 1-D norms whole."""
    assert reads, "no safetensors reads recorded"
    for read in reads:
        if len(read["full"]) == 1 and read["dim"] is None:
            continue  # a replicated norm weight
        dim = read["dim"]
        assert dim is not None, f"{read['name']} read whole"
        expected = list(read["full"])
        expected[dim] //= tp
        assert read["got"] == expected, read


@pytest.mark.processes
@pytest.mark.parametrize("tp", [1, 2])
def test_trainer_matches_transformers_and_saves_exactly(ranks_of, hf_models: Path, tp: int) -> None:
    ranks = ranks_of(tp=tp, models=hf_models, kinds=KINDS)
    ranks.wait([0, 1], time.monotonic() + RANKS_DEADLINE_S)
    results = [ranks.result(0), ranks.result(1)]
    for kind in KINDS:
        first, second = results[0][kind], results[1][kind]
        reference = reference_logprobs(hf_models / kind, first["rows"])
        assert min(r.std().item() for r in reference) > 0.5, "log-probs too uniform to tell mappings apart"
        assert_close(first["initial"], reference, f"{kind} tp={tp} rank 0 before training")
        assert_close(second["initial"], reference, f"{kind} tp={tp} rank 1 before training")
        check_reads(first["reads"], tp)
        check_reads(second["reads"], tp)
        check_saved_initial(hf_models / kind, Path(first["saved_initial"]))
        # after a step: the saved directory loads in transformers and computes what the trainer computes
        trained_dir = Path(first["saved_trained"])
        assert_close(first["trained"], reference_logprobs(trained_dir, first["rows"]), f"{kind} trained")
        moved = max((torch.tensor(a) - torch.tensor(b)).abs().max().item()
                    for a, b in zip(first["trained"], first["initial"], strict=True))  # fmt: skip
        assert moved > 1e-3, f"{kind}: the train step did not change the log-probs"
        assert type(load_reference(trained_dir)).__name__ == type(load_reference(hf_models / kind)).__name__


def edited_config(source: Path, target: Path, **changes: object) -> Path:
    target.mkdir()
    config = json.loads((source / "config.json").read_text()) | changes
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "gemma"}, r"model_type='gemma' is not supported"),
        ({"architectures": ["LlamaForSequenceClassification"]}, r"architectures=\['LlamaForSequenceClassification'\]"),
        ({"hidden_act": "gelu"}, r"hidden_act='gelu' is not supported"),
        ({"attention_bias": True}, r"attention_bias=True is not supported"),
        ({"mlp_bias": True}, r"mlp_bias=True is not supported"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}}, r"rope_type='yarn'"),
        ({"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, r"rope_type='dynamic'"),
        ({"quantization_config": {"quant_method": "gptq"}}, r"quantization_config=.* is not supported"),
    ],
)
def test_unsupported_configs_fail_naming_the_field(
    hf_models: Path, tmp_path: Path, changes: dict, message: str
) -> None:
    directory = edited_config(hf_models / "llama", tmp_path / "edited", **changes)
    with pytest.raises(ValidationError, match=message) as info:
        TrainerConfig(model_path=str(directory))
    assert str(directory / "config.json") in str(info.value)


def test_model_path_fills_the_model_config(hf_models: Path, tmp_path: Path) -> None:
    qwen2 = TrainerConfig(model_path=str(hf_models / "qwen2")).model
    assert (qwen2.architecture, qwen2.qkv_bias, qwen2.qk_norm, qwen2.tie_word_embeddings) == (
        "qwen2",
        True,
        False,
        True,
    )
    assert (qwen2.num_attention_heads, qwen2.num_key_value_heads, qwen2.rope_theta) == (8, 4, 1e6)
    qwen3 = TrainerConfig(model_path=str(hf_models / "qwen3")).model
    assert qwen3.qk_norm and not qwen3.qkv_bias and qwen3.head_dim == 8
    llama = TrainerConfig(model_path=str(hf_models / "llama"))
    assert llama.model.head_dim == 8 and llama.model.hidden_size == 32  # heads * head_dim != hidden_size
    assert llama.model.rope_scaling is not None and llama.model.rope_scaling.rope_type == "llama3"
    # the actor runtime sends a config as model_dump() and validates it again on the rank
    assert TrainerConfig.model_validate(llama.model_dump()) == llama
    with pytest.raises(ValidationError, match=r"model\.vocab_size=260 differs from .*config\.json \(320\)"):
        TrainerConfig(model_path=str(hf_models / "llama"), model={"hidden_size": 64, "num_attention_heads": 8})
    with pytest.raises(ValidationError, match=r"model\.num_key_value_heads=4 must be divisible by .*=8"):
        TrainerConfig(model_path=str(hf_models / "llama"), parallel=ParallelConfig(tensor_model_parallel_size=8))
    windowed = edited_config(hf_models / "mistral", tmp_path / "windowed", sliding_window=16)
    assert TrainerConfig(model_path=str(windowed)).model.max_position_embeddings == 16
    with pytest.raises(ValidationError, match=r"config\.json not found"):
        TrainerConfig(model_path=str(tmp_path / "nowhere"))
