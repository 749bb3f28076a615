"""The Megatron trainer on CPU: real rank processes (gloo on 127.0.0.1), data- and tensor-parallel.

Rank processes run tests/actors/trainer_helpers.py; every wait has a deadline and every process started
here is killed by pid, even when a test fails.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from rank_processes import Ranks

from actors.model_config import ModelConfig
from actors.trainer import OptimizerConfig, ParallelConfig, TrainerConfig
from actors.weights_wire import decode_named_tensors

pytestmark = pytest.mark.processes

HELPER = Path(__file__).with_name("trainer_helpers.py")
RANKS_DEADLINE_S = 60.0


@pytest.fixture
def start_ranks(tmp_path: Path) -> Iterator:
    started: list[Ranks] = []

    def start(
        scenario: str, *, world_size: int = 2, tp: int = 1, timeout_s: float = 30.0, extra: Sequence[str] = ()
    ) -> Ranks:
        out = tmp_path / f"{scenario}-tp{tp}"
        out.mkdir()
        ranks = Ranks(HELPER, scenario, world_size=world_size, tp=tp, out=out, timeout_s=timeout_s, extra=list(extra))
        started.append(ranks)
        return ranks

    yield start
    for ranks in started:
        ranks.stop()


class FakeEngine:
    """``POST {url}/good/update_weights_from_tensor`` records the body; ``/bad/...`` answers HTTP 500.

    ``/good/begin_weight_update`` and ``/good/end_weight_update`` (the session SGLang 0.5.23's scheduler wants
    around a tensor update) answer success and are recorded in ``sessions``.
    """

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.sessions: list[str] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                ok = self.path.startswith("/good/")
                if self.path == "/good/update_weights_from_tensor":
                    engine.bodies.append(body)
                elif ok:
                    engine.sessions.append(self.path.removeprefix("/good/"))
                reply = json.dumps({"success": ok, "message": "ok" if ok else "broken engine"}).encode()
                self.send_response(200 if ok else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


@pytest.fixture
def fake_engine() -> Iterator[FakeEngine]:
    engine = FakeEngine()
    yield engine
    engine.close()


# ---------------------------------------------------------------- HF llama reference (plain torch)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_llama_logits(w: dict[str, torch.Tensor], cfg: ModelConfig, ids: torch.Tensor) -> torch.Tensor:
    """HF LlamaForCausalLM's math (rotate_half RoPE, repeat_kv GQA, SwiGLU, RMSNorm), logits [b, s, V]."""
    b, s = ids.shape
    nh, nkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    causal = torch.full((s, s), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        h = _rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, s, nh, d).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, s, nkv, d).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, s, nkv, d).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d) + causal
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, nh * d)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = _rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return _rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps) @ w["lm_head.weight"].T


def expected_hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    h, d, f = cfg.hidden_size, cfg.head_dim, cfg.ffn_hidden_size
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (cfg.num_attention_heads * d, h),
            p + "self_attn.k_proj.weight": (cfg.num_key_value_heads * d, h),
            p + "self_attn.v_proj.weight": (cfg.num_key_value_heads * d, h),
            p + "self_attn.o_proj.weight": (h, cfg.num_attention_heads * d),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (f, h),
            p + "mlp.up_proj.weight": (f, h),
            p + "mlp.down_proj.weight": (h, f),
        }
    return shapes | {"model.norm.weight": (h,), "lm_head.weight": (cfg.vocab_size, h)}


# ---------------------------------------------------------------- tests


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValidationError, match="tensor_model_parallel_size"):
        TrainerConfig(parallel=ParallelConfig(tensor_model_parallel_size=3))
    with pytest.raises(ValidationError, match=r"model\.vocab_size=261"):
        TrainerConfig(model=ModelConfig(vocab_size=261), parallel={"tensor_model_parallel_size": 2})
    with pytest.raises(ValueError, match="tensor_model_parallel_size=2 must divide world_size=3"):
        ParallelConfig(tensor_model_parallel_size=2).data_parallel_size(3)
    with pytest.raises(ValidationError, match="betas"):
        OptimizerConfig(betas=(0.9, 1.5))
    with pytest.raises(ValidationError, match="extra"):
        TrainerConfig(learning_rate=1.0)  # type: ignore[call-arg]
    config = TrainerConfig()
    with pytest.raises(ValidationError):
        config.seed = 3  # frozen
    assert ParallelConfig(tensor_model_parallel_size=2).data_parallel_size(4) == 2


def test_pack_batch_aligns_mask_and_advantages() -> None:
    from actors.trainer.batch import dp_shard_bounds, pack_batch

    tokens, mask = [[1, 2, 3, 4], [5, 6]], [[0, 0, 1, 1], [1, 1]]
    packed = pack_batch(tokens, mask, [2.0, -1.0], vocab_size=10, max_length=8)
    assert packed.tokens.tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert packed.mask.tolist() == [[0, 1, 1], [1, 0, 0]]  # targets tokens[:, 1:]; padding masked out
    assert packed.advantages.tolist() == [[2, 2, 2], [-1, 0, 0]]
    per_token = pack_batch([[1, 2, 3]], None, [[9.0, 0.5, 0.25]], vocab_size=10, max_length=8)
    assert per_token.advantages.tolist() == [[0.5, 0.25]] and per_token.masked_tokens == 2
    assert packed.rows(1, 2).tokens.tolist() == [[5, 6]]  # cut after the last masked target
    with pytest.raises(ValueError, match=r"tokens\[1\] has ids outside"):
        pack_batch([[1, 2], [3, 10]], None, [1.0, 1.0], vocab_size=10, max_length=8)
    with pytest.raises(ValueError, match=r"loss_mask\[0\] has 2 values"):
        pack_batch([[1, 2, 3]], [[1, 1]], [1.0], vocab_size=10, max_length=8)
    assert [dp_shard_bounds(5, dp_rank=r, dp_size=2) for r in range(2)] == [(0, 3), (3, 5)]


def _check_train_results(results: list[dict]) -> None:
    for rank, result in enumerate(results):
        losses = result["losses"]
        assert losses[-1] < losses[0] - 0.2, f"rank {rank}: loss did not fall: {losses}"
        assert all(b < a for a, b in itertools.pairwise(losses)), losses
        # checkpoint round trip: weights restored exactly, and redoing step 3 reproduces weights and AdamW
        assert result["loaded_step"] == 2 and result["step_after_redo"] == 3
        assert result["digest_after_load"] == result["digests"][1]
        assert result["digest_after_redo"] == result["digests"][2]
        assert result["optimizer_after_redo"] == result["optimizer_after_step3"]
        assert result["health"]["step"] == 3 and result["health"]["running"] is False
        assert result["health_seen_running"], "health() never saw the step running"
    # every rank holds the same full model after every step
    assert results[0]["gathered_digests"] == results[1]["gathered_digests"]


def _check_push(results: list[dict], engine: FakeEngine, out: Path) -> None:
    assert results[0]["push_replies"] == [{"success": True, "message": "ok"}]
    assert results[1]["push_replies"] == []  # only rank 0 posts
    assert [r["bad_push"] for r in results] == ["WeightPushError"] * 2  # every rank hears of the failure
    assert all(r["health"]["failed"] is None for r in results)  # and the trainer stays usable
    assert len(engine.bodies) == 1, "the good engine must get exactly one request"
    assert engine.sessions == ["begin_weight_update", "end_weight_update"]
    body = engine.bodies[0]
    assert body["flush_cache"] is True and body["weight_version"] == "v3"
    pushed = decode_named_tensors(body["serialized_named_tensors"][0])
    exported = torch.load(out / "export.pt", weights_only=True)["weights"]
    assert [n for n, _ in pushed] == [n for n, _ in exported]
    for (name, got), (_, want) in zip(pushed, exported, strict=True):
        assert torch.equal(got, want), name


def _check_hf_directory(out: Path, saved: dict) -> None:
    """save_hf_checkpoint of the built-in model: transformers loads it and computes the trainer's logits."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    on_disk = load_file(str(out / "hf" / "model.safetensors"))
    assert set(on_disk) == {name for name, _ in saved["weights"]}
    assert all(torch.equal(on_disk[name], tensor) for name, tensor in saved["weights"])
    model = AutoModelForCausalLM.from_pretrained(str(out / "hf"), local_files_only=True, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(saved["probe"])).logits
    torch.testing.assert_close(saved["logits"], logits, rtol=1e-4, atol=1e-5)


def _check_export(out: Path) -> None:
    saved = torch.load(out / "export.pt", weights_only=True)
    _check_hf_directory(out, saved)
    cfg = ModelConfig.model_validate(saved["model"])
    weights = dict(saved["weights"])
    expected = expected_hf_shapes(cfg)
    assert [name for name, _ in saved["weights"]] == list(expected), "HF names or order differ"
    assert {name: tuple(t.shape) for name, t in weights.items()} == expected
    probe = torch.tensor(saved["probe"])
    reference = hf_llama_logits(weights, cfg, probe)
    torch.testing.assert_close(saved["logits"], reference, rtol=1e-4, atol=1e-5)
    ref_logprobs = reference[:, :-1].log_softmax(-1).gather(-1, probe[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(torch.stack(saved["logprobs"]), ref_logprobs, rtol=1e-4, atol=1e-5)


def test_data_parallel_training(start_ranks, fake_engine: FakeEngine) -> None:
    ranks = start_ranks("train", world_size=2, tp=1, extra=["--engine-url", fake_engine.url])
    ranks.wait([0, 1], time.monotonic() + RANKS_DEADLINE_S)
    results = [ranks.result(0), ranks.result(1)]
    _check_train_results(results)
    assert results[0]["digests"] == results[1]["digests"], "DP replicas diverged"
    assert results[0]["tokens"][0] == 2 * 2 * 9  # two DP ranks, two sequences each, 9 masked targets
    _check_export(ranks.out)
    _check_push(results, fake_engine, ranks.out)


def test_tensor_parallel_training(start_ranks, fake_engine: FakeEngine) -> None:
    extra = ["--engine-url", fake_engine.url, "--micro-batch", "1"]  # also exercises gradient accumulation
    ranks = start_ranks("train", world_size=2, tp=2, extra=extra)
    ranks.wait([0, 1], time.monotonic() + RANKS_DEADLINE_S)
    results = [ranks.result(0), ranks.result(1)]
    _check_train_results(results)
    assert results[0]["digests"][0] != results[1]["digests"][0], "TP ranks should hold different shards"
    assert results[0]["tokens"][0] == 2 * 9
    _check_export(ranks.out)
    _check_push(results, fake_engine, ranks.out)


@pytest.mark.parametrize("peer", ["killed", "hung"])
def test_lost_peer_fails_the_step_within_the_timeout(start_ranks, peer: str) -> None:
    timeout_s = 3.0
    ranks = start_ranks("peer_lost", world_size=2, tp=1, timeout_s=timeout_s)
    ready = ranks.out / "ready1"
    deadline = time.monotonic() + RANKS_DEADLINE_S
    while not ready.exists():
        assert time.monotonic() < deadline, f"rank 1 never got ready\n{ranks.logs()}"
        assert ranks.procs[1].poll() is None, f"rank 1 exited early\n{ranks.logs()}"
        time.sleep(0.05)
    if peer == "killed":
        time.sleep(0.3)  # let rank 0 enter the step and block in its first collective
        os.kill(ranks.procs[1].pid, signal.SIGKILL)
    ranks.wait([0], time.monotonic() + timeout_s + 15.0)
    result = ranks.result(0)
    assert result["error"] is not None and result["error"].startswith("TrainerFailed"), result
    assert result["elapsed_s"] < timeout_s + 5.0, result
    assert result["health"]["failed"] and result["health"]["running"] is False
    assert result["after_failure"] == "TrainerFailed"  # a broken trainer refuses further calls
