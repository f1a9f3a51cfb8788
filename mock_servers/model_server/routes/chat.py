"""`POST /v1/chat/completions`: vLLM-compatible, with Gym's token-id, logprob, prefix and route extensions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from compactsim.mock_servers.model_server.limits import handle
from compactsim.mock_servers.model_server.routes.deps import get_state
from compactsim.mock_servers.model_server.schemas import ChatCompletionRequest
from compactsim.mock_servers.model_server.state import ServerState

router = APIRouter(tags=["generation"])

_ERRORS = {
    400: {"description": "required_prefix_token_ids is not a prefix of the rendered prompt"},
    413: {"description": "body or an image exceeds its size limit"},
    422: {"description": "invalid body (not JSON, bad field) or a request limit exceeded; the detail names the field and the limit"},
}


@router.post(
    "/v1/chat/completions",
    responses=_ERRORS,
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": ChatCompletionRequest.model_json_schema()}}}},
)
async def chat_completions(request: Request, state: Annotated[ServerState, Depends(get_state)]) -> Response:
    """One non-streaming chat completion; see `compactsim.mock_servers.model_server.serialize` for the body."""
    return await handle(state, "chat", await request.body())


__all__ = ["router"]
