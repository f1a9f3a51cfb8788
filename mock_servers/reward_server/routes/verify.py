"""`POST /verify`: the scenario's known reward (and `mask_sample` flag) for one rollout."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.responses import Response

from compactsim.mock_servers.limits import JsonLimits, LimitExceeded, load_json, run_off_loop
from compactsim.mock_servers.reward_server.rewards import (
    IdentityError,
    choose_reward,
    final_answer,
    mask_sample,
    rollout_identity,
)
from compactsim.mock_servers.reward_server.routes.deps import get_settings
from compactsim.mock_servers.reward_server.schemas import InstanceConfig, VerifyRequest, VerifyResponse
from compactsim.mock_servers.reward_server.settings import RewardSettings

router = APIRouter(tags=["rewards"])


def answer(settings: RewardSettings, raw: bytes) -> Response:
    """Decode under the JSON caps, validate, choose the reward (runs on a worker thread)."""
    try:
        obj = load_json(raw, JsonLimits(max_depth=settings.max_json_depth, max_int_digits=settings.max_int_digits))
    except LimitExceeded as exc:
        return JSONResponse(exc.body(), status_code=exc.status)
    try:
        body = VerifyRequest.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        return JSONResponse({"detail": [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]} for e in errors]},
                            status_code=422)
    output = body.response.get("output")
    if output is not None and not isinstance(output, list):  # a Gym response's output is a list of items
        return JSONResponse({"detail": [{"type": "list_type", "loc": ["body", "response", "output"],
                                         "msg": f"Input should be a valid list, found {type(output).__name__}"}]},
                            status_code=422)
    try:
        rid, index = rollout_identity(body.response, rollout_id=body.rollout_id, rollout_index=body.rollout_index)
    except IdentityError as exc:
        return JSONResponse({"detail": [{"type": "value_error", "loc": ["body", *exc.loc], "msg": exc.msg}]},
                            status_code=422)
    reward = choose_reward(settings, rollout_id=rid, rollout_index=index, answer=final_answer(body.response))
    result = VerifyResponse(
        reward=reward,
        rollout_id=rid,
        rollout_index=index,
        rule="by_rollout_id" if rid in settings.by_rollout_id else settings.rule.kind,
        instance_config=InstanceConfig(mask_sample=mask_sample(settings, rollout_id=rid, rollout_index=index)),
    )
    return JSONResponse(result.model_dump(mode="json"))


@router.post(
    "/verify",
    response_model=VerifyResponse,
    responses={413: {"description": "request body over the size limit"},
               422: {"description": "invalid body, or a JSON limit exceeded (the detail names the field and the limit)"}},
    openapi_extra={"requestBody": {"required": True,
                                   "content": {"application/json": {"schema": VerifyRequest.model_json_schema()}}}},
)
async def verify(request: Request, settings: Annotated[RewardSettings, Depends(get_settings)]) -> Response:
    """Reward by rollout index, pattern, final-answer predicate or fixed value."""
    raw = await request.body()

    async def work() -> Response:
        return answer(settings, raw)

    return await run_off_loop(work)


__all__ = ["answer", "router"]
