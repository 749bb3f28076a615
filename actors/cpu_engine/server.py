"""The SGLang HTTP API over a :class:`CPUEngine`, with aiohttp: the routes of SGLang 0.5.23's
``srt/entrypoints/http_server.py`` that RL training uses, with the same bodies and statuses.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from actors.cpu_engine import openai_api, reports
from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.io_struct import (
    AbortReq,
    BeginWeightUpdateReqInput,
    ContinueGenerationReqInput,
    DestroyWeightsUpdateGroupReqInput,
    EndWeightUpdateReqInput,
    GetWeightsByNameReqInput,
    InitWeightsUpdateGroupReqInput,
    MemoryOccupationReqInput,
    PauseGenerationReqInput,
    UpdateWeightFromDiskReqInput,
    UpdateWeightsFromDistributedReqInput,
    UpdateWeightsFromTensorReqInput,
    UpdateWeightVersionReqInput,
)
from actors.cpu_engine.protocol import RequestError, expand_generate_request, parse
from actors.cpu_engine.routes import ADDRESS, ENGINE, json_body

logger = logging.getLogger(__name__)

DISK_LOAD_FORMATS = (None, "auto", "pt", "safetensors")
TENSOR_LOAD_FORMATS = (None,)
MAX_BODY_BYTES = 1 << 31  # weight updates are large
MAX_FLUSH_TIMEOUT_S = 3600.0  # /flush_cache?timeout= (SGLang: any value >= 0; bounded here so nothing hangs)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, message: str) -> web.Response:
    """Every refusal: SGLang's ``ErrorResponse`` fields, the ``error`` object its ``/generate`` answers and
    ``success``/``message`` as its update endpoints answer, in one body, so any SGLang client reads it."""
    body = {
        "object": "error",
        "message": message,
        "type": HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else str(status),
        "param": None,
        "code": status,
        "error": {"message": message, "code": status},
        "success": False,
    }
    return web.json_response(body, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestError as exc:
        logger.info("%s %s refused (%d): %s", request.method, request.path, exc.status, exc.message)
        return error_response(exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, f"{exc.reason}: {request.method} {request.path}")
    except Exception as exc:
        logger.exception("%s %s failed", request.method, request.path)
        return error_response(500, f"internal error in {request.path}: {exc!r}")


def _ok(message: str, **fields: Any) -> web.Response:
    """SGLang's ``{"success": true, "message": ...}`` answer of the weight endpoints."""
    return web.json_response({"success": True, "message": message, **fields})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def ready(request: web.Request) -> web.Response:
    return web.Response(status=200 if request.app[ENGINE].ready else 503)


async def health_generate(request: web.Request) -> web.Response:
    await request.app[ENGINE].health_generate()
    return web.Response(status=200)


async def generate(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE]
    batch = expand_generate_request(
        await json_body(request),
        vocab_size=engine.model.config.vocab_size,
        context_length=engine.settings.context_length,
        tokenizer=engine.tokenizer,
    )
    if batch.stream:
        return await _stream(request, engine, batch.items, batch.batched)
    results = await engine.generate(batch.items)
    return web.json_response(results if batch.batched else results[0])


async def _stream(request: web.Request, engine: CPUEngine, items: list[Any], batched: bool) -> web.StreamResponse:
    """SGLang's SSE stream: one ``data: {...}`` event per snapshot (``index`` when batched), then ``[DONE]``."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        async for snapshot in engine.generate_stream(items):
            for index, result in snapshot:
                event = {**result, "index": index} if batched else result
                await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
    except RequestError as exc:  # headers are sent: report in the stream, as SGLang does
        error = {"message": exc.message, "type": "invalid_request_error", "code": exc.status, "retryable": False}
        error = {"error": error}
        await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def model_info(request: web.Request) -> web.Response:
    return web.json_response(reports.model_info(request.app[ENGINE]))


async def server_info(request: web.Request) -> web.Response:
    host, port = request.app[ADDRESS]
    return web.json_response(reports.server_info(request.app[ENGINE], host, port))


async def flush_cache(request: web.Request) -> web.Response:
    """``http_server.flush_cache``: 200 when flushed, 400 with the scheduler's message when requests run."""
    raw = request.query.get("timeout", "0")
    try:
        timeout_s = float(raw)
    except ValueError:
        timeout_s = -1.0
    if not 0.0 <= timeout_s <= MAX_FLUSH_TIMEOUT_S:
        raise RequestError(f"timeout: {raw!r} is not a number of seconds in [0, {MAX_FLUSH_TIMEOUT_S:g}]")
    success, message = await request.app[ENGINE].flush_cache(timeout_s)
    if not success:
        return web.Response(text=message or "Flush cache failed.\n", status=400)
    return web.Response(
        text="Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n"
    )


async def pause_generation(request: web.Request) -> web.Response:
    body: PauseGenerationReqInput = parse(PauseGenerationReqInput, await json_body(request))
    await request.app[ENGINE].pause(body.mode)
    return web.json_response({"message": "Generation paused successfully.", "status": "ok"})


async def continue_generation(request: web.Request) -> web.Response:
    parse(ContinueGenerationReqInput, await json_body(request))
    request.app[ENGINE].resume()
    return web.json_response({"message": "Generation continued successfully.", "status": "ok"})


async def begin_weight_update(request: web.Request) -> web.Response:
    body: BeginWeightUpdateReqInput = parse(BeginWeightUpdateReqInput, await json_body(request))
    request.app[ENGINE].weights.begin_weight_update(body.selector)
    return _ok("Success")


async def end_weight_update(request: web.Request) -> web.Response:
    parse(EndWeightUpdateReqInput, await json_body(request))
    request.app[ENGINE].weights.end_weight_update()
    return _ok("Success")


async def update_weight_version(request: web.Request) -> web.Response:
    body: UpdateWeightVersionReqInput = parse(UpdateWeightVersionReqInput, await json_body(request))
    request.app[ENGINE].weights.set_weight_version(body.new_version, abort_all_requests=body.abort_all_requests)
    return _ok(f"Weight version updated to {body.new_version}", new_version=body.new_version)


async def update_weights_from_tensor(request: web.Request) -> web.Response:
    body: UpdateWeightsFromTensorReqInput = parse(UpdateWeightsFromTensorReqInput, await json_body(request))
    if body.load_format not in TENSOR_LOAD_FORMATS:
        raise RequestError(
            f"load_format: the CPU engine takes actors.weights_wire payloads (null), not {body.load_format!r}"
        )
    await request.app[ENGINE].weights.update_weights_from_serialized(
        body.serialized_named_tensors,
        selector=body.selector,
        weight_version=body.weight_version,
        flush=body.flush_cache,
        abort_all=body.abort_all_requests,
    )
    return _ok("Success")


async def update_weights_from_disk(request: web.Request) -> web.Response:
    body: UpdateWeightFromDiskReqInput = parse(UpdateWeightFromDiskReqInput, await json_body(request))
    if body.load_format not in DISK_LOAD_FORMATS:
        raise RequestError(f"load_format: {body.load_format!r} is not one of {list(DISK_LOAD_FORMATS)}")
    await request.app[ENGINE].weights.update_weights_from_disk(
        body.model_path, weight_version=body.weight_version, flush=body.flush_cache, abort_all=body.abort_all_requests
    )
    return _ok("Succeeded to update model weights.", num_paused_requests=0)


async def init_weights_update_group(request: web.Request) -> web.Response:
    body: InitWeightsUpdateGroupReqInput = parse(InitWeightsUpdateGroupReqInput, await json_body(request))
    await request.app[ENGINE].weights.init_weights_update_group(**body.model_dump(exclude={"rid", "http_worker_ipc"}))
    return _ok("Succeeded to initialize custom process group.")


async def update_weights_from_distributed(request: web.Request) -> web.Response:
    body = parse(UpdateWeightsFromDistributedReqInput, await json_body(request))
    await request.app[ENGINE].weights.update_weights_from_distributed(
        names=body.names,
        dtypes=body.dtypes,
        shapes=body.shapes,
        group_name=body.group_name,
        load_format=body.load_format,
        selector=body.selector,
        weight_version=body.weight_version,
        flush=body.flush_cache,
        abort_all=body.abort_all_requests,
    )
    return _ok("Succeeded to update parameter online.")


async def destroy_weights_update_group(request: web.Request) -> web.Response:
    body = parse(DestroyWeightsUpdateGroupReqInput, await json_body(request))
    request.app[ENGINE].weights.destroy_weights_update_group(body.group_name)
    return _ok("Succeeded to destroy custom process group.")


async def get_weights_by_name(request: web.Request) -> web.Response:
    body: GetWeightsByNameReqInput = parse(GetWeightsByNameReqInput, await json_body(request))
    return web.json_response(request.app[ENGINE].weights.weights_by_name(body.name, body.truncate_size))


async def release_memory_occupation(request: web.Request) -> web.Response:
    body: MemoryOccupationReqInput = parse(MemoryOccupationReqInput, await json_body(request))
    request.app[ENGINE].release_memory(body.tags)
    return web.json_response(None)  # SGLang's handler returns nothing: FastAPI answers ``null``


async def resume_memory_occupation(request: web.Request) -> web.Response:
    body: MemoryOccupationReqInput = parse(MemoryOccupationReqInput, await json_body(request))
    request.app[ENGINE].resume_memory(body.tags)
    return web.json_response(None)


async def abort_request(request: web.Request) -> web.Response:
    body: AbortReq = parse(AbortReq, await json_body(request))
    if not body.rid and not body.abort_all:  # tokenizer_manager.abort_request ignores it (and so answers 200)
        logger.warning("ignored /abort_request with an empty rid and abort_all=false")
    else:
        request.app[ENGINE].abort(body.rid or "", abort_all=body.abort_all)
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.Response(body=engine.metrics.render(), headers={"Content-Type": engine.metrics.content_type})


def create_app(engine: CPUEngine, *, host: str, port: int) -> web.Application:
    """The aiohttp application serving ``engine``; it starts and closes the engine with the app."""
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)
    app[ENGINE] = engine
    app[ADDRESS] = (host, port)

    async def start(_: web.Application) -> None:
        await engine.start()

    async def close(_: web.Application) -> None:
        await engine.close()

    app.on_startup.append(start)
    app.on_shutdown.append(close)
    get, post = web.get, web.post
    both = [("/flush_cache", flush_cache), ("/get_weights_by_name", get_weights_by_name)]
    both += [("/release_memory_occupation", release_memory_occupation)]
    both += [("/resume_memory_occupation", resume_memory_occupation)]
    app.add_routes([route(path, handler) for path, handler in both for route in (get, post)])
    app.add_routes(
        [
            get("/health", health),
            get("/health_generate", health_generate),
            get("/ready", ready),
            post("/generate", generate),
            web.put("/generate", generate),
            get("/get_model_info", model_info),
            get("/model_info", model_info),
            get("/get_server_info", server_info),
            get("/server_info", server_info),
            post("/pause_generation", pause_generation),
            post("/continue_generation", continue_generation),
            post("/begin_weight_update", begin_weight_update),
            post("/end_weight_update", end_weight_update),
            post("/update_weight_version", update_weight_version),
            post("/update_weights_from_tensor", update_weights_from_tensor),
            post("/update_weights_from_disk", update_weights_from_disk),
            post("/init_weights_update_group", init_weights_update_group),
            post("/update_weights_from_distributed", update_weights_from_distributed),
            post("/destroy_weights_update_group", destroy_weights_update_group),
            post("/abort_request", abort_request),
            get("/metrics", metrics),
        ]
    )
    openai_api.add_routes(app)
    return app
