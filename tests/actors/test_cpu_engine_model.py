"""The CPU engine's model and generation, in process: model math against a plain reference, sampling, weights
checks and the prefix cache."""

from __future__ import annotations

import re

import pytest
import torch

from actors import tokenizer
from actors.cpu_engine import WeightsError, build_model, build_model_from_named_tensors, expected_shapes
from actors.model_config import ModelConfig
from tests.actors.cpu_reference import GQA, greedy_batch, reference_greedy, reference_logits

TIED = ModelConfig(num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, seed=8)


@pytest.mark.parametrize("config", [GQA, TIED], ids=["gqa", "tied"])
def test_model_matches_reference(config: ModelConfig) -> None:
    model = build_model(config)
    ids = [tokenizer.BOS_ID, *b"hello, world"]
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    expected = reference_logits(model.state_dict(), config, ids)
    torch.testing.assert_close(logits.double(), expected, atol=2e-5, rtol=1e-4)
    assert expected_shapes(config) == {n: tuple(p.shape) for n, p in model.named_parameters()}


def test_cached_batched_greedy_matches_reference() -> None:
    model = build_model(GQA)
    prompts = [[tokenizer.BOS_ID, 5, 6, 7, 8, 9], [tokenizer.BOS_ID, 40], [tokenizer.BOS_ID, *b"abc"]]
    seqs = greedy_batch(model, prompts, 8)
    for prompt, seq in zip(prompts, seqs, strict=True):
        assert seq.output_ids == reference_greedy(model.state_dict(), GQA, prompt, 8)
        assert seq.finish_reason == {"type": "length", "length": 8}
        assert all(lp <= 0.0 for lp in seq.logprobs)


def test_greedy_and_seeded_sampling_are_deterministic() -> None:
    model = build_model(GQA)
    prompts = [[tokenizer.BOS_ID, 1, 2, 3]] * 2
    first = [s.output_ids for s in greedy_batch(model, prompts, 10)]
    assert first == [s.output_ids for s in greedy_batch(model, prompts, 10)]
    assert first[0] == first[1]
    assert [s.output_ids for s in greedy_batch(model, prompts, 10, temperature=1.0, top_k=1)] == first
    sampled = [s.output_ids for s in greedy_batch(model, prompts, 10, temperature=1.0, sampling_seed=3)]
    assert sampled == [s.output_ids for s in greedy_batch(model, prompts, 10, temperature=1.0, sampling_seed=3)]
    assert sampled != [s.output_ids for s in greedy_batch(model, prompts, 10, temperature=1.0, sampling_seed=4)]


def test_build_model_from_named_tensors_checks_names_and_shapes() -> None:
    source = build_model(GQA)
    named = list(source.state_dict().items())
    rebuilt = build_model_from_named_tensors(GQA, named)
    ids = torch.tensor([[tokenizer.BOS_ID, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(ids), source(ids), atol=0, rtol=0)
    with pytest.raises(WeightsError, match=r"missing 1 parameter.*model\.norm\.weight"):
        build_model_from_named_tensors(GQA, [(n, t) for n, t in named if n != "model.norm.weight"])
    with pytest.raises(WeightsError, match=re.escape("unknown parameter 'model.layers.9.mlp.up_proj.weight'")):
        build_model_from_named_tensors(GQA, [*named, ("model.layers.9.mlp.up_proj.weight", torch.zeros(1))])
    with pytest.raises(WeightsError, match=r"'lm_head.weight' has shape \[3\], the model expects \[260, 64\]"):
        build_model_from_named_tensors(GQA, [*named[:-1], ("lm_head.weight", torch.zeros(3))])


def test_prefix_cache_is_a_bounded_radix_tree_evicting_lru_leaves() -> None:
    """As SGLang's radix cache: shared runs stored once, longest-prefix matches, least recently used leaves go."""
    from actors.cpu_engine.prefix_cache import PrefixCache

    def kv(tokens: list[int]) -> list[torch.Tensor]:
        return [torch.tensor(tokens, dtype=torch.float32).reshape(1, -1, 1)]  # a layer whose keys are the ids

    cache = PrefixCache(max_tokens=10)
    cache.insert([1, 2, 3, 4], kv([1, 2, 3, 4]), kv([1, 2, 3, 4]))
    cache.insert([1, 2, 7, 8], kv([1, 2, 7, 8]), kv([1, 2, 7, 8]))
    assert cache.num_tokens == 6  # [1, 2] is shared
    hit = cache.match([1, 2, 7, 9], limit=10)
    assert hit is not None and hit.length == 3 and hit.keys[0].flatten().tolist() == [1.0, 2.0, 7.0]
    assert cache.match([1, 2, 3, 4, 5], limit=2).length == 2 and cache.match([9], limit=1) is None
    cache.match([1, 2, 3], limit=3)  # [3, 4] is now more recent than [7, 8]
    cache.insert([5, 6, 7, 8, 9, 10], kv([5, 6, 7, 8, 9, 10]), kv([5, 6, 7, 8, 9, 10]))
    assert cache.num_tokens == 10
    assert cache.match([1, 2, 7, 8], limit=4).length == 2 and cache.match([1, 2, 3, 4], limit=4).length == 4
    assert cache.flush() == 10 and cache.num_tokens == 0 and cache.match([1, 2], limit=2) is None


def test_a_finished_sequence_is_cached_before_its_request_is_answered() -> None:
    """SGLang's scheduler caches a finished request (``release_kv_cache``) before it streams the reply, so a
    ``/flush_cache`` sent after the reply finds that request's tokens to drop. The engine answers requests in
    ``before_step``: by then each finished sequence (and one aborted there, by the next answer) is cached."""
    import threading

    from actors.cpu_engine.generation import Sequence, run_batch
    from actors.cpu_engine.prefix_cache import PrefixCache
    from actors.cpu_engine.protocol import GenerationItem, SamplingParams

    model, cache = build_model(GQA), PrefixCache(max_tokens=1000)
    seqs = [
        Sequence(
            item=GenerationItem(
                rid=str(n),
                input_ids=[tokenizer.BOS_ID, 9, n],
                return_logprob=False,
                logprob_text=False,
                params=SamplingParams(max_new_tokens=n, ignore_eos=True, temperature=0.0),
            ),
            generator=torch.Generator().manual_seed(0),
            max_new_tokens=n,
        )
        for n in (2, 4, 6)
    ]
    seen: list[str] = []

    def before_step(live: list[Sequence]) -> None:
        for seq in seqs:
            if seq.done and seq.item.rid not in seen:  # the engine answers this request now
                seen.append(seq.item.rid)
                tokens = [*seq.item.input_ids, *seq.output_ids[:-1]]
                hit = cache.match(tokens, limit=len(tokens))
                assert hit is not None and hit.length == len(tokens), (seq.item.rid, hit and hit.length)
        if len(seqs[2].output_ids) == 3:
            seqs[2].abort_message = "aborted by the test"

    run_batch(model, seqs, model_lock=threading.Lock(), before_step=before_step, prefix_cache=cache)
    before_step([])  # the batch's end answers what is left
    assert seen == ["2", "4", "6"] and seqs[2].finish_reason["type"] == "abort"
