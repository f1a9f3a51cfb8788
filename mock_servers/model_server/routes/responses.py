"""`POST /v1/responses`: Gym-model-server-style Responses endpoint with token fields on the last item."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from compactsim.mock_servers.model_server.routes.chat import _ERRORS
from compactsim.mock_servers.model_server.limits import handle
from compactsim.mock_servers.model_server.routes.deps import get_state
from compactsim.mock_servers.model_server.schemas import ResponsesRequest
from compactsim.mock_servers.model_server.state import ServerState

router = APIRouter(tags=["generation"])


@router.post(
    "/v1/responses",
    responses=_ERRORS,
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": ResponsesRequest.model_json_schema()}}}},
)
async def responses(request: Request, state: Annotated[ServerState, Depends(get_state)]) -> Response:
    """One model call; output items `[reasoning?, message?, function_call*]`."""
    return await handle(state, "responses", await request.body())


__all__ = ["router"]
