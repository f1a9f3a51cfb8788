"""Request and response models of `POST /verify` (Gym's verify request, our lean verify response)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class VerifyRequest(BaseModel):
    """Gym's verify request: the run params, the agent's response, and optional rollout identity."""

    model_config = ConfigDict(extra="allow")

    responses_create_params: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any]
    rollout_id: StrictStr | None = None
    rollout_index: StrictInt | None = Field(default=None, ge=0)  # strict: true, "2" and 2.0 are no index


class InstanceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mask_sample: bool = False


class VerifyResponse(BaseModel):
    """The reward, the identity it was chosen for, and the `mask_sample` flag."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    rollout_id: str | None
    rollout_index: int | None
    rule: str
    instance_config: InstanceConfig


__all__ = ["InstanceConfig", "VerifyRequest", "VerifyResponse"]
