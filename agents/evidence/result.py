"""Pick a flavour's emitter, and wrap its response the way Gym's `/run` returns it to a trainer."""

from __future__ import annotations

from typing import Any

from compactsim.agents.evidence.envelope import responses_create_params
from compactsim.agents.evidence.gym_full import emit_full
from compactsim.agents.evidence.gym_transport import emit_transport
from compactsim.agents.evidence.osworld import emit_osworld
from compactsim.agents.evidence.plain import emit_plain
from compactsim.agents.evidence.pr2870 import emit_pr2870
from compactsim.agents.rollout.record import RolloutRecord
from compactsim.agents.rollout.script import Flavour


def emit_response(record: RolloutRecord, flavour: Flavour, *, include_lineage: bool = True) -> dict[str, Any]:
    """The bare response object of `record` in `flavour`."""
    if flavour == "gym-0.7.0-transport":
        return emit_transport(record, include_lineage=include_lineage)
    if flavour == "gym-0.7.0-full":
        return emit_full(record, include_lineage=include_lineage)
    if flavour == "gym-pr2870":
        return emit_pr2870(record, include_lineage=include_lineage)
    if flavour == "osworld":
        return emit_osworld(record)
    if flavour == "none":
        return emit_plain(record)
    raise ValueError(f"flavour={flavour!r}: expected one of gym-0.7.0-transport, gym-0.7.0-full, gym-pr2870, "
                     "osworld, none")


def emit_result(
    record: RolloutRecord,
    flavour: Flavour | None = None,
    *,
    reward: float | None = None,
    mask_sample: bool = False,
    include_lineage: bool = True,
) -> dict[str, Any]:
    """Gym's `/run` result: ``{"responses_create_params", "response", "reward"[, "instance_config"]}``."""
    result: dict[str, Any] = {
        "responses_create_params": responses_create_params(record),
        "response": emit_response(record, flavour or record.spec.flavour, include_lineage=include_lineage),
        "reward": reward,
    }
    if mask_sample:
        result["instance_config"] = {"mask_sample": True}
    return result
