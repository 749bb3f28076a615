"""GPU check (not part of CI): everything the CPU engine's conformance tests check, against real SGLang 0.5.23.

Run on a GPU host with sglang installed (``pip install -e '.[sglang]'``) and a small Hugging Face model on disk::

    MILES_SGLANG_MODEL=/models/Qwen2.5-0.5B-Instruct python scripts/gpu_sglang_check.py [--port 30000]

It starts ``python -m sglang.launch_server`` (with ``--enable-memory-saver``) and checks, in order: /generate
(input logprobs with logprob_start_len, top logprobs, n > 1, SSE streaming, logit_bias, penalties, the context
400), the prefix cache (cached_tokens, /flush_cache), /v1/models, /v1/completions, /v1/chat/completions,
/server_info, /metrics, the pause/continue/abort/ready bodies, release/resume memory, /update_weights_from_disk,
/update_weight_version, /get_weights_by_name, begin/end sessions, and the NCCL weight sync of
``actors.trainer.weights_push.push_over_group`` (our rank 0, SGLang's ranks). Then the same InferenceController
path as CI (real sglang-router in front). It prints one line per check and PASS, or the first failure; every
request has a deadline and the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.sglang_config import SGLangConfig, launch_server_argv

TIMEOUT_S = 120
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


class Server:
    def __init__(self, url: str) -> None:
        self.url = url

    def post(self, path: str, body: Any = None) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=TIMEOUT_S)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=TIMEOUT_S)

    def generate(self, **body: Any) -> Any:
        reply = self.post("/generate", body)
        assert reply.status_code == 200, reply.text
        return reply.json()


def check_generate(s: Server) -> None:
    ids = s.generate(text="The capital of France is", sampling_params=GREEDY)["output_ids"]
    prompt = s.generate(text="The capital of France is", sampling_params={**GREEDY, "max_new_tokens": 1})
    n_prompt = prompt["meta_info"]["prompt_tokens"]
    out = s.generate(
        text="The capital of France is", sampling_params=GREEDY, return_logprob=True, logprob_start_len=1,
        top_logprobs_num=3, return_text_in_logprobs=True,
    )  # fmt: skip
    meta = out["meta_info"]
    assert out["output_ids"] == ids
    assert len(meta["input_token_logprobs"]) == n_prompt - 1 and meta["input_token_logprobs"][0][0] is None
    assert all(len(top) == 3 for top in meta["output_top_logprobs"]) and meta["input_top_logprobs"][0] is None
    samples = s.generate(text=["a", "b"], sampling_params={"n": 2, "max_new_tokens": 4, "temperature": 1.0})
    assert isinstance(samples, list) and len(samples) == 4
    forced = s.generate(text="x", sampling_params={**GREEDY, "logit_bias": {str(ids[0]): 100.0}})
    assert forced["output_ids"] == [ids[0]] * 8
    for penalty in ({"frequency_penalty": 1.5}, {"presence_penalty": 1.5}, {"repetition_penalty": 1.5}):
        assert s.generate(text="la la la la", sampling_params={**GREEDY, **penalty})["output_ids"]
    info = s.get("/model_info").json()
    context = s.get("/server_info").json()["context_length"]
    too_long = s.post("/generate", {"input_ids": [1] * 8, "sampling_params": {"max_new_tokens": context}})
    assert too_long.status_code == 400 and "maximum context length" in too_long.text, too_long.text
    assert info["weight_version"]


def check_stream(s: Server) -> None:
    body = {"text": "Count: 1, 2,", "sampling_params": GREEDY, "stream": True}
    with requests.post(s.url + "/generate", json=body, stream=True, timeout=TIMEOUT_S) as reply:
        lines = [line for line in reply.iter_lines() if line]
    assert lines[-1] == b"data: [DONE]", lines[-3:]
    last = json.loads(lines[-2].removeprefix(b"data: "))
    assert last["meta_info"]["finish_reason"]["type"] == "length" and len(last["output_ids"]) == 8


def check_prefix_cache(s: Server) -> None:
    assert s.post("/flush_cache").status_code == 200
    text = "A long shared prefix for the radix cache. " * 8
    s.generate(text=text, sampling_params=GREEDY)
    again = s.generate(text=text, sampling_params=GREEDY)
    assert again["meta_info"]["cached_tokens"] > 0, again["meta_info"]


def check_openai(s: Server) -> None:
    model = s.get("/v1/models").json()["data"][0]["id"]
    body = {"model": model, "prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 2}
    completion = s.post("/v1/completions", body).json()
    assert completion["object"] == "text_completion" and completion["usage"]["completion_tokens"] == 4, completion
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "logprobs": True}
    answer = s.post("/v1/chat/completions", chat).json()
    assert answer["choices"][0]["message"]["role"] == "assistant", answer


def check_state_endpoints(s: Server) -> None:
    assert isinstance(s.get("/server_info").json().get("max_total_num_tokens"), int)
    metrics = s.get("/metrics").text
    for series in ("sglang:token_usage", "sglang:cache_hit_rate", "sglang:time_to_first_token_seconds"):
        assert series in metrics, series
    assert s.post("/pause_generation", {"mode": "in_place"}).json()["message"] == "Generation paused successfully."
    assert s.get("/ready").status_code == 503
    assert s.post("/continue_generation", {}).json()["message"] == "Generation continued successfully."
    assert s.get("/ready").status_code == 200
    assert s.post("/abort_request", {"rid": "nothing"}).status_code == 200
    assert s.post("/release_memory_occupation", {}).status_code == 200
    assert s.post("/resume_memory_occupation", {}).status_code == 200
    assert s.generate(text="after resume", sampling_params=GREEDY)["output_ids"]


def check_weights(s: Server, model_path: str) -> None:
    before = s.generate(text="The capital of France is", sampling_params=GREEDY)["output_ids"]
    reply = s.post("/update_weights_from_disk", {"model_path": model_path, "weight_version": "disk-v1"}).json()
    assert reply["success"] is True and "num_paused_requests" in reply, reply
    assert s.get("/model_info").json()["weight_version"] == "disk-v1"
    assert s.generate(text="The capital of France is", sampling_params=GREEDY)["output_ids"] == before
    version = s.post("/update_weight_version", {"new_version": "v2", "abort_all_requests": False}).json()
    assert version["success"] is True and s.get("/model_info").json()["weight_version"] == "v2"
    names = ["model.norm.weight", "model.embed_tokens.weight"]
    weights = {n: s.post("/get_weights_by_name", {"name": n, "truncate_size": 4}).json() for n in names}
    assert all(isinstance(w, list) for w in weights.values()), weights
    assert s.post("/end_weight_update", {}).status_code == 400  # no session open
    assert s.post("/begin_weight_update", {"selector": "all"}).json()["success"] is True
    assert s.post("/end_weight_update", {}).json()["success"] is True


def check_nccl_push(s: Server, model_path: str) -> None:
    """Our trainer's rank 0 (WeightsGroup, nccl) pushes the model's own weights to SGLang's TP ranks."""
    import torch
    from safetensors.torch import load_file

    from actors.trainer.weights_push import push_over_group

    torch.cuda.set_device(torch.cuda.device_count() - 1)  # a GPU SGLang's rank is not on, when there is one
    pairs = [pair for file in sorted(Path(model_path).glob("*.safetensors")) for pair in load_file(str(file)).items()]
    before = s.generate(text="The capital of France is", sampling_params=GREEDY)["output_ids"]
    replies = push_over_group(
        [s.url], pairs, weight_version="nccl-v3", master_address="127.0.0.1", master_port=29571, backend="nccl",
        bucket_bytes=256 << 20, timeout_s=300,
    )  # fmt: skip
    assert all(r.get("success") for r in replies), replies
    assert s.get("/model_info").json()["weight_version"] == "nccl-v3"
    assert s.generate(text="The capital of France is", sampling_params=GREEDY)["output_ids"] == before


def check_controller(model_path: str) -> None:
    """The CI path (InferenceController + real sglang-router) with real SGLang behind it."""
    from runtime import spawn

    template = SGLangConfig(model_path=model_path, port=30000, mem_fraction_static=0.3, random_seed=0)
    controller = spawn(
        "actors.inference.controller:InferenceController",
        kwargs={"server_id": "gpu-check", "num_engines": 1, "engine": "sglang", "sglang": template,
                "initial_weights": True, "engine_start_timeout_s": 600, "log_dir": tempfile.mkdtemp()},
    )  # fmt: skip
    try:
        controller.start().result(timeout=900)
        router = Server(controller.router_url().result(timeout=10))
        first = router.generate(text="The capital of France is", sampling_params=GREEDY)
        controller.update_weights_from_disk(model_path, "disk-v4").result(timeout=600)
        [cell] = controller.cells().result(timeout=10)
        assert Server(cell["url"]).get("/model_info").json()["weight_version"] == "disk-v4", cell
        assert (
            router.generate(text="The capital of France is", sampling_params=GREEDY)["output_ids"]
            == first["output_ids"]
        )
        update = controller.start_update_weights().result(timeout=60)
        controller.end_update_weights(update["token"], "v5", model_path).result(timeout=60)
        assert Server(cell["url"]).get("/model_info").json()["weight_version"] == "v5"
    finally:
        controller.shutdown().result(timeout=120)
        controller.kill()


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sglang.launch_server exited with code {proc.returncode}")
        try:
            if requests.get(url + "/health_generate", timeout=10).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(2)
    raise TimeoutError(f"SGLang at {url} not ready within {timeout_s}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.environ.get("MILES_SGLANG_MODEL"), help="HF model directory")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--start-timeout", type=float, default=900.0)
    parser.add_argument("--skip-controller", action="store_true", help="do not run the InferenceController check")
    args = parser.parse_args(argv)
    if not args.model:
        parser.error("give --model or set MILES_SGLANG_MODEL to a small Hugging Face model directory")
    config = SGLangConfig(
        model_path=args.model, port=args.port, mem_fraction_static=0.5, random_seed=0, enable_memory_saver=True,
        context_length=2048,
    )  # fmt: skip
    server = Server(f"http://127.0.0.1:{args.port}")
    proc = subprocess.Popen(launch_server_argv(config), start_new_session=True)
    checks: list[tuple[str, Callable[[], None]]] = [
        ("generate", lambda: check_generate(server)),
        ("stream", lambda: check_stream(server)),
        ("prefix cache", lambda: check_prefix_cache(server)),
        ("openai", lambda: check_openai(server)),
        ("state endpoints", lambda: check_state_endpoints(server)),
        ("weights", lambda: check_weights(server, args.model)),
        ("nccl push", lambda: check_nccl_push(server, args.model)),
    ]
    try:
        wait_ready(server.url, proc, args.start_timeout)
        for name, check in checks:
            check()
            print(f"ok   {name}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    if not args.skip_controller:
        check_controller(args.model)
        print("ok   controller", flush=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
