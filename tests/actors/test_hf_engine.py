"""The CPU engine serving Hugging Face model directories as SGLang does, checked against the peers' own code.

Sources of truth: transformers' models (``AutoModelForCausalLM.from_pretrained`` in float32 and its greedy
``generate``) and tokenizers (``AutoTokenizer``, ``apply_chat_template``) run here on checkpoints made locally
(tests/actors/hf_fixtures.py). SGLang 0.5.23 defines the server side: ``srt/entrypoints/http_server.py``
(``/model_info``, ``/v1/models``), ``srt/arg_groups/serving_hook.py`` (``served_model_name`` and
``tokenizer_path`` default to ``model_path``), ``srt/managers/tokenizer_manager.py`` (``_update_model_path_info``:
after ``/update_weights_from_disk`` the served name is the new path), ``srt/configs/model_config.py``
(``_get_hf_eos_token_id``), ``srt/entrypoints/openai/serving_chat.py`` (the chat template, tokenized). Engines
are real subprocesses on 127.0.0.1 (conftest fixtures), the trainer a real subprocess (hf_push_helper.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import torch
from conftest import REPO_ROOT, EngineLauncher, EngineProcess, free_port
from hf_fixtures import KINDS, load_reference, make_checkpoint, reference_logprobs
from inference_fixtures import kill_and_wait_gone

from actors.cpu_engine.cli import check_args, load_served_model, parse_args

pytestmark = pytest.mark.processes

TOLERANCE = 1e-4
NEW_TOKENS = 10
PROMPTS = ["What is two plus two?", "Hello world! Hello", "The quick brown fox"]
READY_S = 120.0
HTTP_S = 60.0


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf_models")
    for kind in KINDS:
        make_checkpoint(kind, root / kind, seed=10 + KINDS.index(kind))
    return root


def start_hf(spawn: EngineLauncher, directory: Path, *args: str) -> EngineProcess:
    engine = spawn("--model-path", str(directory), *args, wait=False)
    engine.wait_ready(READY_S)
    return engine


@pytest.fixture(scope="module")
def engine_of(spawn_module_engine: EngineLauncher, hf_models: Path) -> Iterator[Callable[[str], EngineProcess]]:
    """One engine per checkpoint kind, started on first use and shared by the module's read-only tests."""
    engines: dict[str, EngineProcess] = {}

    def get(kind: str) -> EngineProcess:
        if kind not in engines:
            engines[kind] = start_hf(spawn_module_engine, hf_models / kind)
        return engines[kind]

    yield get


def post(engine: EngineProcess, path: str, body: Any) -> requests.Response:
    return requests.post(engine.url + path, json=body, timeout=HTTP_S)


def get(engine: EngineProcess, path: str) -> requests.Response:
    return requests.get(engine.url + path, timeout=HTTP_S)


def tokenizer_of(directory: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


def reference_greedy(model: Any, ids: list[int], new_tokens: int) -> tuple[list[int], list[float]]:
    """transformers' greedy ``generate``: the new token ids and their log-probabilities (raw logits)."""
    out = model.generate(
        torch.tensor([ids]), do_sample=False, max_new_tokens=new_tokens, return_dict_in_generate=True,
        output_logits=True, pad_token_id=0,
    )  # fmt: skip
    new = out.sequences[0, len(ids) :].tolist()
    steps = zip(out.logits, new, strict=True)
    logprobs = [torch.log_softmax(step[0].float(), -1)[token].item() for step, token in steps]
    return new, logprobs


def max_diff(got: list[float], want: list[float]) -> float:
    assert len(got) == len(want), (got, want)
    return max((abs(g - w) for g, w in zip(got, want, strict=True)), default=0.0)


def assert_matches_transformers(engine: EngineProcess, directory: Path, prompts: list[str] = PROMPTS) -> list[int]:
    """Greedy ids equal transformers' generate; output and input log-probs within TOLERANCE. Returns lengths."""
    reference, tokenizer = load_reference(directory), tokenizer_of(directory)
    rows = [tokenizer.encode(text) for text in prompts]
    input_reference = reference_logprobs(directory, rows)
    greedy = {"temperature": 0, "max_new_tokens": NEW_TOKENS}
    body = {"text": prompts, "sampling_params": greedy, "return_logprob": True, "logprob_start_len": 0}
    answers = post(engine, "/generate", body).json()  # one batch: left padding and batched decode
    lengths = []
    for text, ids, answer, want_input in zip(prompts, rows, answers, input_reference, strict=True):
        want_ids, want_logprobs = reference_greedy(reference, ids, NEW_TOKENS)
        meta = answer["meta_info"]
        assert meta["prompt_tokens"] == len(ids), f"{text!r}: the engine tokenized differently"
        assert answer["output_ids"] == want_ids, f"{directory.name} {text!r}"
        assert answer["text"] == tokenizer.decode(want_ids, skip_special_tokens=True)
        got = [entry[0] for entry in meta["output_token_logprobs"]]
        assert max_diff(got, want_logprobs) <= TOLERANCE, f"{directory.name} {text!r} output logprobs"
        got_input = [entry[0] for entry in meta["input_token_logprobs"][1:]]
        assert max_diff(got_input, want_input.tolist()) <= TOLERANCE, f"{directory.name} {text!r} input logprobs"
        single = post(engine, "/generate", {"text": text, "sampling_params": greedy}).json()
        assert single["output_ids"] == want_ids, "a request alone decodes as in a batch"
        lengths.append(len(want_ids))
    assert max(lengths) >= 4, f"every greedy answer ended at once ({lengths}): the test would show little"
    return lengths


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_output_equals_transformers_generate(engine_of: Callable[[str], EngineProcess], hf_models: Path,
                                                    kind: str) -> None:  # fmt: skip
    """llama (GQA, head_dim, llama3 RoPE), mistral, qwen2 (qkv bias, tied, shards), qwen3 (q/k norm)."""
    assert_matches_transformers(engine_of(kind), hf_models / kind)


def test_chat_completions_use_the_directory_chat_template(engine_of: Callable[[str], EngineProcess],
                                                          hf_models: Path) -> None:  # fmt: skip
    engine, directory = engine_of("qwen2"), hf_models / "qwen2"
    tokenizer = tokenizer_of(directory)
    messages = [{"role": "user", "content": "What is two plus two?"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|user|>What is two plus two?<|end|><|assistant|>"
    ids = tokenizer.encode(rendered, add_special_tokens=False)
    want_ids, _ = reference_greedy(load_reference(directory), ids, NEW_TOKENS)
    chat = {"model": str(directory), "messages": messages, "max_tokens": NEW_TOKENS, "temperature": 0}
    answer = post(engine, "/v1/chat/completions", chat).json()
    assert answer["usage"]["prompt_tokens"] == len(ids)
    assert answer["usage"]["completion_tokens"] == len(want_ids)
    assert answer["choices"][0]["message"]["content"] == tokenizer.decode(want_ids, skip_special_tokens=True)
    split = [{"type": "text", "text": "What is two "}, {"type": "text", "text": "plus two?"}]
    parts = [{"role": "user", "content": split}]
    same = post(engine, "/v1/chat/completions", {**chat, "messages": parts}).json()
    assert same["choices"][0]["message"]["content"] == answer["choices"][0]["message"]["content"]
    other = post(engine, "/v1/chat/completions", {**chat, "model": "cpu-engine"})  # serving_chat.py: not checked
    assert other.status_code == 200 and other.json()["model"] == "cpu-engine"


def test_model_info_and_models_report_the_served_name(
    engine_of: Callable[[str], EngineProcess], spawn_engine: EngineLauncher, hf_models: Path
) -> None:
    directory = hf_models / "qwen3"
    info = get(engine_of("qwen3"), "/get_model_info").json()
    assert (info["model_path"], info["served_model_name"], info["tokenizer_path"]) == (str(directory),) * 3
    assert (info["model_type"], info["architectures"]) == ("qwen3", ["Qwen3ForCausalLM"])
    card = get(engine_of("qwen3"), "/v1/models").json()["data"][0]
    assert (card["id"], card["root"], card["max_model_len"]) == (str(directory), str(directory), 64)
    named = start_hf(spawn_engine, directory, "--served-model-name", "tiny-qwen3", "--context-length", "32",
                     "--tp-size", "1", "--dtype", "float32")  # fmt: skip
    assert get(named, "/model_info").json()["served_model_name"] == "tiny-qwen3"
    card = get(named, "/v1/models").json()["data"][0]
    assert (card["id"], card["max_model_len"]) == ("tiny-qwen3", 32)
    assert get(named, "/server_info").json()["context_length"] == 32
    too_long = post(named, "/generate", {"text": "Hello " * 40, "sampling_params": {"max_new_tokens": 1}})
    assert too_long.status_code == 400 and "context length" in too_long.json()["message"]


def test_eos_from_config_ends_generation(engine_of: Callable[[str], EngineProcess], hf_models: Path) -> None:
    """SGLang stops at config.json / generation_config.json eos ids (here <|end|>), and trims it from the text."""
    engine = engine_of("mistral")
    eos = json.loads((hf_models / "mistral" / "config.json").read_text())["eos_token_id"]
    greedy = {"temperature": 0, "max_new_tokens": 3, "logit_bias": {str(eos): 100.0}}
    answer = post(engine, "/generate", {"text": "Hello", "sampling_params": greedy}).json()
    assert answer["output_ids"] == [eos] and answer["text"] == ""
    assert answer["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    ignored = post(engine, "/generate", {"text": "Hello", "sampling_params": {**greedy, "ignore_eos": True}}).json()
    assert ignored["output_ids"] == [eos] * 3


def edited(source: Path, target: Path, **changes: object) -> Path:
    """A copy of ``source`` (weights and tokenizer linked) whose config.json has ``changes``."""
    target.mkdir()
    for file in source.iterdir():
        if file.name != "config.json":
            (target / file.name).symlink_to(file)
    config = json.loads((source / "config.json").read_text()) | changes
    (target / "config.json").write_text(json.dumps(config))
    return target


def start_failing(spawn: EngineLauncher, *args: str) -> str:
    engine = spawn(*args, wait=False)
    assert engine.proc.wait(timeout=READY_S) != 0
    return engine.log_tail(5)


def test_flags_the_engine_cannot_honour_are_refused(
    spawn_engine: EngineLauncher, hf_models: Path, tmp_path: Path
) -> None:
    llama = str(hf_models / "llama")

    def refused(*argv: str) -> str:  # the engine's own checks, in this process (actors/cpu_engine/cli.py)
        with pytest.raises((SystemExit, ValueError)) as refusal:
            args = parse_args(["--port", "1", *argv])
            check_args(args)
            load_served_model(args)
        return str(refusal.value)

    one_rank = "--tp-size 2: the CPU engine runs one tensor-parallel rank"
    assert one_rank in refused("--model-path", llama, "--tp-size", "2")
    assert "--model-config: " in refused("--model-path", llama, "--model-config", "{}")
    gemma = edited(hf_models / "llama", tmp_path / "gemma", model_type="gemma")
    assert "model_type='gemma' is not supported" in refused("--model-path", str(gemma))
    yarn = edited(hf_models / "llama", tmp_path / "yarn", rope_parameters={"rope_type": "yarn", "factor": 2.0})
    assert "rope_type='yarn' is not supported" in refused("--model-path", str(yarn))
    # and the engine process: it exits at start, non-zero, saying why
    assert "rope_type='yarn' is not supported" in start_failing(spawn_engine, "--model-path", str(yarn))


def test_update_weights_from_disk_takes_an_hf_directory(
    spawn_engine: EngineLauncher, hf_models: Path, tmp_path: Path
) -> None:
    """SGLang's /update_weights_from_disk with ``model_path`` of a checkpoint directory of the same architecture."""
    engine = start_hf(spawn_engine, hf_models / "qwen2")
    other = make_checkpoint("qwen2", tmp_path / "qwen2-other", seed=77)
    reply = post(engine, "/update_weights_from_disk", {"model_path": str(other), "weight_version": "disk-1"})
    assert reply.json()["success"] is True, reply.text
    assert_matches_transformers(engine, other)
    info = get(engine, "/model_info").json()
    assert (info["model_path"], info["served_model_name"], info["weight_version"]) == (str(other), str(other), "disk-1")
    assert get(engine, "/v1/models").json()["data"][0]["id"] == str(other)
    refused = post(engine, "/update_weights_from_disk", {"model_path": str(hf_models / "qwen3")})
    assert refused.status_code == 400 and "architecture='qwen3' differs" in refused.json()["message"]
    assert get(engine, "/model_info").json()["model_path"] == str(other)
    assert_matches_transformers(engine, other, PROMPTS[:1])  # nothing of the refused directory was loaded


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_trainer_push_then_engine_equals_transformers_on_the_saved_checkpoint(
    spawn_engine: EngineLauncher, hf_models: Path, tmp_path: Path, kind: str
) -> None:
    """One train step from model_path; push over HTTP (tensor) and over gloo (distributed) to engines started on
    the same model_path; both then compute what transformers computes on the trainer's save_hf_checkpoint."""
    directory = hf_models / kind
    by_tensor, by_group = start_hf(spawn_engine, directory), start_hf(spawn_engine, directory)
    greedy = {"text": PROMPTS[0], "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS},
              "return_logprob": True, "logprob_start_len": 0}  # fmt: skip
    before = post(by_tensor, "/generate", greedy).json()["meta_info"]["input_token_logprobs"]
    argv = [sys.executable, str(Path(__file__).with_name("hf_push_helper.py")), "--model-path", str(directory),
            "--port", str(free_port()), "--group-port", str(free_port()), "--tensor-url", by_tensor.url,
            "--group-url", by_group.url, "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["by_tensor"][0]["success"] is True and result["by_group"][0]["success"] is True
    saved = Path(result["saved"])
    for engine in (by_tensor, by_group):
        assert get(engine, "/model_info").json()["weight_version"] == "v-trained"
        assert_matches_transformers(engine, saved)
    after = post(by_tensor, "/generate", greedy).json()["meta_info"]["input_token_logprobs"]
    moved = max(abs(a[0] - b[0]) for a, b in zip(after[1:], before[1:], strict=True))
    assert moved > 1e-3, "the pushed weights are the initial ones: the train step changed nothing"


def test_rollout_encodes_text_prompts_with_the_directory_tokenizer(
    engine_of: Callable[[str], EngineProcess], hf_models: Path
) -> None:
    """RolloutExecutor(model_path=...) tokenizes text as the engine does (SGLang's ``text``: special tokens added)."""
    from actors.rollout import RolloutExecutor, make_prompts
    from actors.tokenizer import tokenizer_for
    from runtime import spawn

    directory = hf_models / "qwen2"
    tokenizer, reference = tokenizer_of(directory), tokenizer_for(str(directory))
    prompts = make_prompts(2, target_len=3, seed=5, tokenizer=reference)
    for prompt in prompts:
        target = prompt["text"].removeprefix("copy ").removesuffix(" =")
        assert prompt["label"] == tokenizer.encode(target, add_special_tokens=False)
    executor = spawn(RolloutExecutor, kwargs={
        "router_url": engine_of("qwen2").url, "reward_fn": "inference_fixtures:parity_reward",
        "model_path": str(directory), "seed": 1,
        "sampling_params": {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True},
    })  # fmt: skip
    try:
        result = executor.generate(prompts, 2).result(HTTP_S)
        [shard] = [ref.get(timeout=HTTP_S) for ref in result["shards"]]
        for row, tokens in enumerate(shard["tokens"]):
            ids = tokenizer.encode(prompts[shard["prompt_index"][row]]["text"])
            want, _ = reference_greedy(load_reference(directory), ids, 4)
            assert tokens == ids + want
    finally:
        kill_and_wait_gone(executor)


def test_engine_launcher_serves_an_hf_model_path(hf_models: Path, tmp_path: Path) -> None:
    """The inference controller's engines: SGLangConfig(model_path=HF dir) renders ``--model-path`` for the CPU
    engine too, with the template's dtype and served name; the built-in ModelConfig is not passed."""
    import asyncio

    from actors.inference.engine_launcher import EngineSpec, LocalEngineLauncher
    from actors.model_config import ModelConfig
    from actors.sglang_config import SGLangConfig, cpu_engine_argv

    directory = str(hf_models / "llama")
    template = SGLangConfig(model_path=directory, port=30000, served_model_name="served", dtype="float32")
    argv = cpu_engine_argv(template)
    assert argv[argv.index("--model-path") + 1] == directory and "--model-config" not in argv
    assert argv[argv.index("--dtype") + 1] == "float32"
    with pytest.raises(ValueError, match=r"model_config: .* is a Hugging Face directory"):
        cpu_engine_argv(template, model_config=ModelConfig())
    with pytest.raises(ValueError, match="tp_size=2"):
        cpu_engine_argv(template.model_copy(update={"tp_size": 2}))

    async def launch() -> dict[str, Any]:
        launcher = LocalEngineLauncher(log_dir=tmp_path)
        try:
            spec = EngineSpec(cell_id="hf-0", index=0, sglang=template, model=ModelConfig())
            engine = await launcher.launch(spec, timeout_s=READY_S)
            return await asyncio.to_thread(lambda: requests.get(engine.url + "/model_info", timeout=HTTP_S).json())
        finally:
            await launcher.close()

    info = asyncio.run(launch())
    assert (info["model_path"], info["served_model_name"], info["model_type"]) == (directory, "served", "llama")
