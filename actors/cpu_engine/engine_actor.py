"""A CPU engine hosted in an actor: SGLang's HTTP API on its own port, plus weights pulled over collective refs,
so an engine can join a trainer's collective group (``runtime.collective.create_group([trainer, *engines], ...)``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import torch
from aiohttp import web

from actors.cpu_engine.cli import build_engine, parse_args
from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.model import build_model
from actors.cpu_engine.server import create_app
from actors.cpu_engine.settings import EngineSettings
from actors.model_config import ModelConfig
from actors.processes import advertised_host
from runtime import TensorRef, method

START_TIMEOUT_S = 30.0
WILDCARDS = ("0.0.0.0", "::", "")
T = TypeVar("T")


class CPUEngineActor:
    """One CPU engine serving SGLang's HTTP API on ``host:port`` (port 0: a free one; see :meth:`url`)."""

    def __init__(
        self,
        *,
        model: ModelConfig | None = None,
        argv: list[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        served_model_name: str = "cpu-engine",
        weight_version: str = "default",
        seed: int = 0,
    ) -> None:
        """``model``: the built-in model, random weights from its seed; or ``argv``: the flags of
        ``python -m actors.cpu_engine`` (:mod:`actors.cpu_engine.cli`; ``--host``/``--port`` there, port 0: a free
        one), which serve exactly what that process would (a Hugging Face directory too)."""
        if (model is None) == (argv is None):
            raise ValueError("CPUEngineActor: give model= (the built-in model) or argv= (the engine's flags), one")
        if argv is not None:
            try:
                args = parse_args([str(a) for a in argv])
                torch.set_num_threads(args.threads)
                self.engine = build_engine(args)
            except SystemExit as exc:  # argparse (a status; it printed why) and build_engine report bad flags so
                why = "bad flags (argparse printed why above)" if isinstance(exc.code, int) else exc.code
                raise ValueError(f"CPUEngineActor argv {argv}: {why}; see python -m actors.cpu_engine --help") from None
            host, port = args.host, args.port
        else:
            assert model is not None
            settings = EngineSettings(
                model_path="built-in", served_model_name=served_model_name, weight_version=weight_version,
                random_seed=seed, context_length=model.max_position_embeddings,
            )  # fmt: skip
            self.engine = CPUEngine(build_model(model), settings)
        # The HTTP server runs on an event loop thread of its own inside the actor process, so ``/generate``,
        # ``/update_weight_version`` and the rest answer exactly as from ``python -m actors.cpu_engine``.
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="cpu-engine-http", daemon=True).start()
        self._runner = web.AppRunner(create_app(self.engine, host=host, port=port))
        self._url = self._run(self._start(host, port), START_TIMEOUT_S)

    async def _start(self, host: str, port: int) -> str:
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        reach = advertised_host() if host in WILDCARDS else host  # every interface: say the one others reach
        return f"http://{reach}:{bound[1]}"

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    @method(control_plane=True)
    def url(self) -> str:
        """The engine's HTTP address (SGLang's API)."""
        return self._url

    def pull_weights(self, refs: list[TensorRef], flush_cache: bool = True, timeout_s: float = 120.0) -> int:
        """Receive ``refs`` (HF-named tensors from the trainer) into the live parameters, under the model-update
        lock; frees each ref once received. The bytes go from the trainer's tensors into this engine's parameters
        over the collective group, not through HTTP or the actor transport (:mod:`actors.cpu_engine.ref_weights`).
        The weight version is not changed here: set it explicitly (``/update_weight_version``) once every bucket
        is in. Returns how many tensors were loaded."""
        weights = self.engine.weights
        update = weights.update_weights_from_refs(refs, weight_version=None, flush=flush_cache, timeout_s=timeout_s)
        return self._run(update, timeout_s + 10)

    def close(self) -> None:
        """Stop serving HTTP (the engine closes with its app)."""
        self._run(self._runner.cleanup(), START_TIMEOUT_S)
