"""`POST /verify`: the scenario's known reward (and `mask_sample` flag) for one rollout."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from mock_servers.reward_server.rewards import choose_reward, final_answer, mask_sample, rollout_identity
from mock_servers.reward_server.routes.deps import get_settings
from mock_servers.reward_server.schemas import InstanceConfig, VerifyRequest, VerifyResponse
from mock_servers.reward_server.settings import RewardSettings

router = APIRouter(tags=["rewards"])


@router.post(
    "/verify",
    response_model=VerifyResponse,
    responses={413: {"description": "request body over the size limit"}, 422: {"description": "invalid body"}},
)
def verify(body: VerifyRequest, settings: Annotated[RewardSettings, Depends(get_settings)]) -> VerifyResponse:
    """Reward by rollout index, pattern, final-answer predicate or fixed value."""
    rid, index = rollout_identity(body.response, rollout_id=body.rollout_id, rollout_index=body.rollout_index)
    reward = choose_reward(settings, rollout_id=rid, rollout_index=index, answer=final_answer(body.response))
    return VerifyResponse(
        reward=reward,
        rollout_id=rid,
        rollout_index=index,
        rule="by_rollout_id" if rid in settings.by_rollout_id else settings.rule.kind,
        instance_config=InstanceConfig(mask_sample=mask_sample(settings, rollout_id=rid, rollout_index=index)),
    )


__all__ = ["router"]
