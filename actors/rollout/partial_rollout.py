"""One sample of the async rollout: requests through the router until it finishes, across weight updates."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from actors.rollout.busy_clock import BusyClock
from actors.rollout.router_client import TransientGenerateError, post_generate
from actors.rollout.samples import SampleRecord
from runtime import retry_until_deadline_async


# A transient failure (a killed engine or router: no answer, 5xx) is sent again until the deadline, on whichever
# engine the router picks; router_url is asked before every try, so whatever serves generation may be replaced in
# between. A completion aborted by a weight update is, with partial_rollout, resumed: its tokens keep the version
# that made them and prompt + tokens is sent for the rest (miles' --partial-rollout); without it the sample starts
# over, so every token is from one version.
async def generate_sample(
    session: aiohttp.ClientSession,
    router_url: Callable[[], Awaitable[str]],
    prompt_ids: list[int],
    params: dict[str, Any],
    *,
    partial_rollout: bool,
    request_timeout_s: float,
    deadline_s: float,
    clock: BusyClock,
    what: str,
) -> SampleRecord:
    """Generate one sample; raises (DeadlineExceeded, GenerateRefused) only when it cannot be finished."""
    record = SampleRecord()
    budget = int(params.get("max_new_tokens", 16))
    deadline = time.monotonic() + deadline_s
    while True:
        sent_before = record.requests
        body = {
            "input_ids": prompt_ids + record.output_ids,
            "sampling_params": {**params, "max_new_tokens": budget - len(record.output_ids)},
            "return_logprob": True,
        }

        async def attempt(
            body: dict[str, Any] = body, record: SampleRecord = record, sent_before: int = sent_before
        ) -> dict[str, Any]:
            url = await router_url()
            record.resent += record.requests > sent_before
            record.requests += 1
            clock.enter()
            try:
                left = max(0.1, deadline - time.monotonic())
                return await post_generate(session, url, body, timeout_s=min(request_timeout_s, left), what=what)
            finally:
                clock.leave()

        reply = await retry_until_deadline_async(
            attempt, deadline_s=max(0.0, deadline - time.monotonic()), what=what,
            retry_on=(TransientGenerateError, aiohttp.ClientError), max_delay_s=1.0,
        )  # fmt: skip
        aborted = (reply.get("meta_info", {}).get("finish_reason") or {}).get("type") == "abort"
        if not aborted:
            record.extend(reply)
            return record
        if partial_rollout:
            record.extend(reply)
            record.resumed += 1
            if len(record.output_ids) >= budget:
                record.finish_reason = "length"
                return record
        else:  # start over: the aborted tokens are dropped
            record = SampleRecord(requests=record.requests, resent=record.resent, resumed=record.resumed + 1)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: aborted again and again until its deadline ({deadline_s}s)")
