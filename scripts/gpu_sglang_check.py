"""GPU check (not part of CI): real SGLang behind the real sglang-router through the same InferenceController.

Run on a GPU host with sglang installed (``pip install -e '.[sglang]'``) and a small Hugging Face model on disk:

    MILES_SGLANG_MODEL=/models/Qwen2.5-0.5B-Instruct python scripts/gpu_sglang_check.py

It starts one engine, generates greedily through the router, reloads the weights from disk (version
"disk-v1"), checks the output is unchanged, runs a lock → end_update_weights cycle (version "v2"), and prints
PASS or the first failure. Every step has a deadline; everything started is stopped at the end.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.sglang_config import SGLangConfig
from runtime import spawn


def greedy(router_url: str) -> dict:
    body = {"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 12}}
    reply = requests.post(f"{router_url}/generate", json=body, timeout=120)
    reply.raise_for_status()
    return reply.json()


def engine_version(url: str) -> str:
    return str(requests.get(f"{url}/get_model_info", timeout=30).json().get("weight_version"))


def main() -> int:
    model_path = os.environ.get("MILES_SGLANG_MODEL")
    if not model_path:
        print("set MILES_SGLANG_MODEL to a small Hugging Face model directory", file=sys.stderr)
        return 2
    template = SGLangConfig(model_path=model_path, port=30000, mem_fraction_static=0.3, random_seed=0)
    controller = spawn(
        "actors.inference.controller:InferenceController",
        kwargs={"server_id": "gpu-check", "num_engines": 1, "engine": "sglang", "sglang": template,
                "initial_weights": True, "engine_start_timeout_s": 600, "log_dir": tempfile.mkdtemp()},
    )  # fmt: skip
    try:
        controller.start().result(timeout=900)
        router = controller.router_url().result(timeout=10)
        first = greedy(router)
        print("generated:", first["text"])
        assert first["meta_info"]["completion_tokens"] == 12, first["meta_info"]
        controller.update_weights_from_disk(model_path, "disk-v1").result(timeout=600)
        [cell] = controller.cells().result(timeout=10)
        assert engine_version(cell["url"]) == "disk-v1" and cell["state"] == "serving", cell
        assert greedy(router)["output_ids"] == first["output_ids"], "reloading the same weights changed the output"
        update = controller.start_update_weights().result(timeout=60)
        controller.end_update_weights(update["token"], "v2", model_path).result(timeout=60)
        assert engine_version(cell["url"]) == "v2", "version not set"
        print("PASS")
        return 0
    finally:
        controller.shutdown().result(timeout=120)
        controller.kill()


if __name__ == "__main__":
    sys.exit(main())
