"""Session servers for tests: a checkpoint whose chat template re-tokenizes differently, and server processes.

``make_trim_checkpoint`` writes a tiny llama (hf_fixtures) with a longer context and a chat template that strips
each message's whitespace (``| trim``): rendering a conversation again would not give the tokens the engine
produced (the BPE tokenizer also merges decoded text differently), which is what a session must never do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests
import torch
from hf_fixtures import build_tokenizer, hf_config, randomize

from actors.processes import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]

TRIM_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] | trim }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_trim_checkpoint(directory: Path, *, seed: int = 5) -> Path:
    """A random tiny llama with 512 positions and the local BPE tokenizer with :data:`TRIM_TEMPLATE`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = hf_config("llama")
    config.max_position_embeddings = 512
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    model.save_pretrained(str(directory))
    build_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    tokenizer.chat_template = TRIM_TEMPLATE
    tokenizer.save_pretrained(str(directory))
    return directory


class SessionServerProcess:
    """``python -m actors.sessions`` on a free loopback port (own process group); stopped by pid."""

    def __init__(self, router_url: str, log_path: Path, *args: str) -> None:
        self.port = free_port()
        argv = [sys.executable, "-m", "actors.sessions", "--port", str(self.port), "--router-url", router_url, *args]
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"session server exited:\n{self.log_path.read_text()[-2000:]}"
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"session server {self.url} not ready:\n{self.log_path.read_text()[-2000:]}")

    def health(self) -> dict:
        return requests.get(self.url + "/health", timeout=5).json()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@contextlib.contextmanager
def session_servers(router_url: str, tmp_path: Path, count: int, *args: str) -> Iterator[list[SessionServerProcess]]:
    """``count`` started session servers; all stopped (and checked gone) afterwards, even on failure."""
    servers: list[SessionServerProcess] = []
    try:
        for index in range(count):
            servers.append(SessionServerProcess(router_url, tmp_path / f"sessions-{index}.log", *args))
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()
        assert all(server.proc.poll() is not None for server in servers)
