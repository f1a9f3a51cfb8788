"""`POST /tokenize`: the ids the server would use as the prompt for the same body."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from compactsim.mock_servers.model_server.limits import handle
from compactsim.mock_servers.model_server.routes.deps import get_state
from compactsim.mock_servers.model_server.schemas import TokenizeRequest
from compactsim.mock_servers.model_server.state import ServerState

router = APIRouter(tags=["tokenize"])


@router.post(
    "/tokenize",
    responses={413: {"description": "body or image too large"},
               422: {"description": "invalid body, or a request limit exceeded (max_prompt_tokens, ...)"}},
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": TokenizeRequest.model_json_schema()}}}},
)
async def tokenize(request: Request, state: Annotated[ServerState, Depends(get_state)]) -> Response:
    """`{"tokens": [...], "count": n, "max_model_len": m, "media_ids": [...], "policy_version": v}`."""
    return await handle(state, "tokenize", await request.body())


__all__ = ["router"]
