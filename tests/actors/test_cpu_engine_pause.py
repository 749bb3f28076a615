"""A pause that lands on the decode step where one sequence of a batch finishes.

SGLang 0.5.23's ``pause_generation(mode="abort")`` (``tokenizer_manager.pause_generation``) aborts every request
and waits until none holds the model-update lock; its scheduler then reports idle and ``/flush_cache`` succeeds.
The CPU engine held a paused batch between decode steps until every sequence in it was aborted, counting one that
had just finished (its length reached, never aborted) as still running: the pause then waited for its whole
``pause_wait_timeout_s`` and every flush was refused (seen as a 30 s "flush refused" in the async rollout tests).
The batch here is paused (in place) during its prefill, so the first decode step finishes a one-token request
and holds the other; then an abort pause must return at once and the flush succeed.
"""

from __future__ import annotations

import asyncio
import time

from actors.cpu_engine import build_model
from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.io_struct import SamplingParams
from actors.cpu_engine.protocol import GenerationItem
from actors.cpu_engine.settings import EngineSettings
from runtime import within
from tests.actors.cpu_reference import GQA


def item(rid: str, max_new_tokens: int) -> GenerationItem:
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True, temperature=0.0)
    return GenerationItem(rid=rid, input_ids=[1, 2, 3], params=params, return_logprob=False, logprob_text=False)


async def abort_pause_with_a_finished_sequence_in_the_held_batch() -> tuple[dict, dict, float]:
    settings = EngineSettings(model_path="random", context_length=256, pause_wait_timeout_s=60.0, batch_window_s=0.05)
    async with CPUEngine(build_model(GQA), settings) as engine:
        loop = asyncio.get_running_loop()
        paused: list[asyncio.Future] = []

        def pause_in_prefill(*_: object) -> None:  # compute thread: pause before the first decode step
            if not paused:
                paused.append(asyncio.run_coroutine_threadsafe(engine.pause("in_place"), loop))
                deadline = time.monotonic() + 10
                while not engine.paused and time.monotonic() < deadline:
                    time.sleep(0.001)

        hook = engine.model.register_forward_hook(pause_in_prefill)
        try:  # two requests in one batch: "short" finishes on the first step, where the paused batch is held
            short = asyncio.ensure_future(engine.generate([item("short", 1)]))
            long = asyncio.ensure_future(engine.generate([item("long", 200)]))
            (short_answer,) = await within(short, 10)  # answered: it finished before the hold
            assert engine.paused and not long.done()
            started = time.monotonic()
            await within(engine.pause("abort"), 10)  # with the bug: 60 s, the pause wait timeout
            waited = time.monotonic() - started
            assert await engine.flush_cache(0.0) == (True, "")  # idle once the abort pause returned
            (long_answer,) = await within(long, 10)
            engine.resume()
            return short_answer["meta_info"], long_answer["meta_info"], waited
        finally:
            hook.remove()


def test_abort_pause_while_a_finished_sequence_is_in_the_held_batch_returns_and_flushes() -> None:
    short, long, waited = asyncio.run(abort_pause_with_a_finished_sequence_in_the_held_batch())
    assert short["finish_reason"]["type"] == "length" and short["completion_tokens"] == 1
    assert long["finish_reason"]["type"] == "abort" and long["completion_tokens"] < 200
    assert waited < 10
