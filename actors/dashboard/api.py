"""The dashboard's JSON API: ``answer(store, path, query)`` -> (HTTP status, JSON body). No exceptions escape."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from actors.dashboard.run_store import RunStore

Answer = tuple[int, dict[str, Any]]
MAX_QUERY = 512
PREVIEW_CHARS = 160
_NUMBER = re.compile(r"[0-9]{1,9}")
_ROUTE = re.compile(r"/api/steps/([^/]{1,40})(?:/samples/([^/]{1,40}))?/?")


class BadRequest(ValueError):
    """A request input out of bounds: a 400 with this message."""


# Routes: /api/run (name, steps, the collector's counts, malformed lines); /api/steps (a summary per step);
# /api/steps/{step}?sort=index|reward&order=asc|desc (summary, metrics, samples; a step with metrics and no samples
# answers 200 with "samples": [] and a note); /api/steps/{step}/samples/{index}?occurrence=K (one sample). Every
# number is a bounded non-negative integer and every query parameter known: anything else is a 400 naming it.
def answer(store: RunStore, path: str, query: str) -> Answer:
    """Route ``path`` (already known to start with ``/api/``) with its raw ``query`` string."""
    try:
        params = _params(query)
        store.refresh()
        if path in ("/api/run", "/api/run/"):
            return _only(params, ()), _run(store)
        if path in ("/api/steps", "/api/steps/"):
            _only(params, ())
            return 200, {"steps": store.steps()}
        match = _ROUTE.fullmatch(path)
        if match is None:
            return 404, {"error": f"no API route {path[:80]!r}; routes: /api/run, /api/steps, /api/steps/N, "
                                  "/api/steps/N/samples/I"}  # fmt: skip
        step = _number("step", match.group(1))
        if match.group(2) is None:
            return _step(store, step, params)
        _only(params, ("occurrence",))
        occurrence = _number("occurrence", params.get("occurrence", "0"))
        return _sample(store, step, _number("sample index", match.group(2)), occurrence)
    except BadRequest as exc:
        return 400, {"error": str(exc)}


def _params(query: str) -> dict[str, str]:
    if len(query) > MAX_QUERY:
        raise BadRequest(f"query string longer than {MAX_QUERY} characters")
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=8)
    except ValueError as exc:
        raise BadRequest(f"malformed query string: {exc}") from None
    if any(len(values) > 1 for values in parsed.values()):
        raise BadRequest("each query parameter may be given once")
    return {key: values[0] for key, values in parsed.items()}


def _only(params: dict[str, str], known: tuple[str, ...]) -> int:
    unknown = sorted(set(params) - set(known))
    if unknown:
        allowed = ", ".join(known) or "none"
        raise BadRequest(f"unknown query parameter {unknown[0][:40]!r} (allowed here: {allowed})")
    return 200


def _number(what: str, text: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise BadRequest(f"{what} must be an integer from 0 to 999999999, got {text[:40]!r}")
    return int(text)


def _choice(params: dict[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = params.get(name, choices[0])
    if value not in choices:
        raise BadRequest(f"{name} must be one of {', '.join(choices)}, got {value[:40]!r}")
    return value


def _run(store: RunStore) -> dict[str, Any]:
    return {
        "run_dir": store.run_dir.name,
        "steps": store.step_numbers(),
        "collector": store.collector_status(),
        "problems": store.problems(),
    }


def _missing_step(store: RunStore, step: int) -> Answer:
    steps = store.step_numbers()
    known = f"steps recorded: {steps[0]}..{steps[-1]}" if steps else "no step is recorded yet"
    return 404, {"error": f"step {step} is not in this run ({known})"}


def _step(store: RunStore, step: int, params: dict[str, str]) -> Answer:
    _only(params, ("sort", "order"))
    sort = _choice(params, "sort", ("index", "reward"))
    order = _choice(params, "order", ("asc", "desc"))
    summary = store.step(step)
    if summary is None:
        return _missing_step(store, step)
    rows = [_preview(record) for record in store.samples(step)]
    if sort == "reward":
        rows.sort(key=lambda r: (r["reward"] is None, r["reward"] if r["reward"] is not None else 0.0))
    else:
        rows.sort(key=lambda r: (r["sample_index"], r["occurrence"]))
    if order == "desc":
        rows.reverse()
    body: dict[str, Any] = {**summary, "sort": sort, "order": order, "sample_list": rows}
    if not rows:
        body["note"] = f"step {step} recorded no samples (its metrics are shown)"
    return 200, body


def _preview(record: dict[str, Any]) -> dict[str, Any]:
    response = record.get("response")
    text = response if isinstance(response, str) else ""
    reward = record.get("reward")
    ids = record.get("token_ids")
    mask = record.get("loss_mask")
    return {
        "sample_index": record["sample_index"],
        "occurrence": record.get("occurrence", 0),
        "prompt_index": record.get("prompt_index"),
        "reward": float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else None,
        "response": text[:PREVIEW_CHARS],
        "tokens": len(ids) if isinstance(ids, list) else 0,
        "response_tokens": sum(1 for m in mask if m) if isinstance(mask, list) else 0,
        "weight_version": record.get("weight_version"),
        "latency_s": record.get("latency_s"),
        "finish_reason": record.get("finish_reason"),
    }


def _sample(store: RunStore, step: int, index: int, occurrence: int) -> Answer:
    if store.step(step) is None:
        return _missing_step(store, step)
    record = store.sample(step, index, occurrence)
    if record is None:
        count = len(store.samples(step))
        return 404, {"error": f"step {step} has no sample {index} (occurrence {occurrence}); it has {count} samples"}
    return 200, {"sample": record}
