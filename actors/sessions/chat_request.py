"""An agent's OpenAI chat request turned into SGLang ``/generate`` sampling parameters, checked.

The names follow SGLang 0.5.23's ``ChatCompletionRequest.to_sampling_params``, so an agent sees SGLang's behaviour.
"""

from __future__ import annotations

from typing import Any

_FLOATS = {"temperature": 1.0, "top_p": 1.0, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
           "repetition_penalty": 1.0}  # fmt: skip
_INTS = {"top_k": -1, "min_tokens": 0}


def sampling_params(body: dict[str, Any]) -> dict[str, Any]:
    """``/generate``'s ``sampling_params`` for the chat request ``body``; ValueError names a bad field.

    ``max_tokens`` / ``max_completion_tokens`` -> ``max_new_tokens``, ``seed`` -> ``sampling_seed``, OpenAI's
    defaults for what is absent."""
    # A session records one leaf per request: n must be 1 and nothing streams.
    if body.get("stream"):
        raise ValueError("stream: a session records whole turns; send stream=false")
    if body.get("n", 1) != 1:
        raise ValueError(f"n must be 1 (each request is one turn of one leaf), got {body.get('n')!r}")
    params: dict[str, Any] = {}
    for name, default in _FLOATS.items():
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{name} must be a number, got {value!r}")
        params[name] = default if value is None else float(value)
    for name, default in _INTS.items():
        params["min_new_tokens" if name == "min_tokens" else name] = _int(body, name, default)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        params["max_new_tokens"] = _int({"max_tokens": max_tokens}, "max_tokens", 0)
        if params["max_new_tokens"] < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens!r}")
    if body.get("seed") is not None:
        params["sampling_seed"] = _int(body, "seed", 0)
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 16:
            raise ValueError("stop must be a string or a list of at most 16 strings")
        params["stop"] = stop
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None:
        if not isinstance(stop_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
            raise ValueError("stop_token_ids must be a list of integers")
        params["stop_token_ids"] = stop_ids
    if body.get("ignore_eos") is not None:
        params["ignore_eos"] = bool(body["ignore_eos"])
    return params


def _int(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value
