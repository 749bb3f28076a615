"""The SGLang HTTP API over a :class:`CPUEngine`, with aiohttp.

Every refusal is a JSON body ``{"error": {"message": ..., "code": status}, "success": false,
"message": ...}``: the ``error`` object is what SGLang's ``/generate`` answers, ``success``/``message``
what its update endpoints answer, so either kind of client reads it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from actors.cpu_engine.engine import CPUEngine
from actors.cpu_engine.protocol import (
    AbortRequest,
    DestroyWeightsUpdateGroupRequest,
    InitWeightsUpdateGroupRequest,
    MemoryOccupationRequest,
    PauseGenerationRequest,
    RequestError,
    UpdateWeightsFromDiskRequest,
    UpdateWeightsFromDistributedRequest,
    UpdateWeightsFromTensorRequest,
    expand_generate_request,
    parse,
)

logger = logging.getLogger(__name__)

ENGINE = web.AppKey("engine", CPUEngine)
ADDRESS = web.AppKey("address", tuple)
DISK_LOAD_FORMATS = (None, "auto", "pt", "safetensors")
MAX_BODY_BYTES = 1 << 31  # weight updates are large

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "code": status}, "success": False, "message": message}
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


async def _body(request: web.Request) -> Any:
    """The JSON body, ``{}`` when there is none; a 400 naming the problem when it is not JSON."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"body is not valid JSON: {exc}") from exc


def _ok(**fields: Any) -> web.Response:
    return web.json_response({"success": True, **fields})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def health_generate(request: web.Request) -> web.Response:
    await request.app[ENGINE].health_generate()
    return web.Response(status=200)


async def generate(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    items, batched = expand_generate_request(
        await _body(request),
        vocab_size=engine.model.config.vocab_size,
        context_length=engine.settings.context_length,
    )
    results = await engine.generate(items)
    return web.json_response(results if batched else results[0])


async def model_info(request: web.Request) -> web.Response:
    return web.json_response(request.app[ENGINE].model_info())


async def server_info(request: web.Request) -> web.Response:
    host, port = request.app[ADDRESS]
    return web.json_response(request.app[ENGINE].server_info(host, port))


async def weight_version(request: web.Request) -> web.Response:
    return web.json_response({"weight_version": request.app[ENGINE].weight_version})


async def flush_cache(request: web.Request) -> web.Response:
    # There is no prefix cache to flush; answered like SGLang so callers need no special case.
    return web.Response(text="Cache flushed.\n")


async def pause_generation(request: web.Request) -> web.Response:
    body: PauseGenerationRequest = parse(PauseGenerationRequest, await _body(request))
    aborted = request.app[ENGINE].pause(body.mode)
    return _ok(message=f"generation paused (mode={body.mode})", num_aborted=aborted)


async def continue_generation(request: web.Request) -> web.Response:
    request.app[ENGINE].resume()
    return _ok(message="generation continued")


async def update_weights_from_tensor(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body: UpdateWeightsFromTensorRequest = parse(UpdateWeightsFromTensorRequest, await _body(request))
    count = await engine.update_weights_from_serialized(
        body.serialized_named_tensors,
        weight_version=body.weight_version,
        abort_all_requests=body.abort_all_requests,
    )
    return _ok(message=f"loaded {count} tensors", num_tensors=count, weight_version=engine.weight_version)


async def update_weights_from_disk(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body: UpdateWeightsFromDiskRequest = parse(UpdateWeightsFromDiskRequest, await _body(request))
    if body.load_format not in DISK_LOAD_FORMATS:
        raise RequestError(f"load_format: {body.load_format!r} is not one of {list(DISK_LOAD_FORMATS)}")
    count = await engine.update_weights_from_disk(
        body.model_path, weight_version=body.weight_version, abort_all_requests=body.abort_all_requests
    )
    return _ok(
        message=f"loaded {count} tensors from {body.model_path}",
        num_tensors=count,
        weight_version=engine.weight_version,
    )


async def init_weights_update_group(request: web.Request) -> web.Response:
    body: InitWeightsUpdateGroupRequest = parse(InitWeightsUpdateGroupRequest, await _body(request))
    await request.app[ENGINE].init_weights_update_group(**body.model_dump())
    return _ok(message=f"joined weight-update group {body.group_name!r} as rank {body.rank_offset}")


async def update_weights_from_distributed(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body: UpdateWeightsFromDistributedRequest = parse(UpdateWeightsFromDistributedRequest, await _body(request))
    count = await engine.update_weights_from_distributed(
        names=body.names,
        dtypes=body.dtypes,
        shapes=body.shapes,
        group_name=body.group_name,
        weight_version=body.weight_version,
        abort_all_requests=body.abort_all_requests,
    )
    return _ok(message=f"loaded {count} tensors", num_tensors=count, weight_version=engine.weight_version)


async def destroy_weights_update_group(request: web.Request) -> web.Response:
    body: DestroyWeightsUpdateGroupRequest = parse(DestroyWeightsUpdateGroupRequest, await _body(request))
    request.app[ENGINE].destroy_weights_update_group(body.group_name)
    return _ok(message=f"destroyed weight-update group {body.group_name!r}")


async def release_memory_occupation(request: web.Request) -> web.Response:
    body: MemoryOccupationRequest = parse(MemoryOccupationRequest, await _body(request))
    return _ok(released=request.app[ENGINE].release_memory(body.tags))


async def resume_memory_occupation(request: web.Request) -> web.Response:
    body: MemoryOccupationRequest = parse(MemoryOccupationRequest, await _body(request))
    return _ok(released=request.app[ENGINE].resume_memory(body.tags))


async def abort_request(request: web.Request) -> web.Response:
    body: AbortRequest = parse(AbortRequest, await _body(request))
    if not body.rid and not body.abort_all:
        raise RequestError("rid: give the request id to abort, or abort_all=true")
    count = request.app[ENGINE].abort(body.rid, abort_all=body.abort_all)
    return _ok(num_aborted=count)


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
    app.add_routes(
        [
            get("/health", health),
            get("/health_generate", health_generate),
            post("/generate", generate),
            get("/get_model_info", model_info),
            get("/model_info", model_info),
            get("/get_server_info", server_info),
            get("/server_info", server_info),
            get("/get_weight_version", weight_version),
            get("/flush_cache", flush_cache),
            post("/flush_cache", flush_cache),
            post("/pause_generation", pause_generation),
            post("/continue_generation", continue_generation),
            post("/update_weights_from_tensor", update_weights_from_tensor),
            post("/update_weights_from_disk", update_weights_from_disk),
            post("/init_weights_update_group", init_weights_update_group),
            post("/update_weights_from_distributed", update_weights_from_distributed),
            post("/destroy_weights_update_group", destroy_weights_update_group),
            post("/release_memory_occupation", release_memory_occupation),
            post("/resume_memory_occupation", resume_memory_occupation),
            post("/abort_request", abort_request),
            get("/metrics", metrics),
        ]
    )
    return app
