"""Health, model list, weight loading and the request log."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError
from starlette.responses import Response

from compactsim.mock_servers.model_server.engine import RequestRejected
from compactsim.mock_servers.model_server.routes.deps import get_state
from compactsim.mock_servers.model_server.schemas import SeedWeightsRequest
from compactsim.mock_servers.model_server.state import ServerState, json_response

router = APIRouter(tags=["admin"])


@router.get("/health")
async def health(state: Annotated[ServerState, Depends(get_state)]) -> Response:
    """``request_log_file`` (null without ``request_log_path``) says whether the file mirror holds every entry:
    the server keeps serving when appends fail, so this is where that failure shows."""
    return json_response({"status": "ok", "mode": state.settings.mode, "policy_version": state.engine.policy_version,
                          "request_log_file": state.log.file_status()})


@router.get("/v1/models")
async def models(state: Annotated[ServerState, Depends(get_state)]) -> Response:
    s = state.settings
    return json_response({"object": "list", "data": [{
        "id": s.model_name, "object": "model", "created": 0, "owned_by": "compactsim",
        "max_model_len": s.limits.max_prompt_tokens, "policy_version": state.engine.policy_version,
    }]})


@router.get("/weights")
async def weights_info(state: Annotated[ServerState, Depends(get_state)]) -> Response:
    return json_response({"policy_version": state.engine.policy_version, "weights_digest": state.engine.weights_digest})


@router.post(
    "/weights",
    responses={413: {"description": "weights too large"}, 422: {"description": "payload is not TinyPolicy weights"}},
)
async def load_weights(request: Request, state: Annotated[ServerState, Depends(get_state)]) -> Response:
    """Body: `TinyPolicy.to_bytes()` (application/octet-stream) or JSON `{"seed": N}`; bumps `policy_version`."""
    raw = await request.body()
    try:
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()  # case-insensitive
        if media_type == "application/json":
            try:
                seed = SeedWeightsRequest.model_validate_json(raw).seed
            except ValidationError as exc:
                errs = [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]} for e in exc.errors(include_url=False, include_input=False)]
                return json_response({"detail": errs}, 422)
            version = await anyio.to_thread.run_sync(state.engine.load_seed, seed)
        else:
            version = await anyio.to_thread.run_sync(state.engine.load_weights, raw)
    except RequestRejected as exc:
        return json_response({"detail": exc.detail}, exc.status_code)
    return json_response({"policy_version": version, "weights_digest": state.engine.weights_digest})


@router.get("/request_log")
async def request_log(state: Annotated[ServerState, Depends(get_state)]) -> Response:
    """The entries in memory; an entry that could not be appended to the file carries its ``file_error``."""
    return json_response({"entries": [asdict(e) for e in state.log.entries()], "file": state.log.file_status()})


__all__ = ["router"]
