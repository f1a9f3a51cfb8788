"""The oracle's account of a whole run's training: one `StepTruth` per trained step, state carried across.

The optimizer state (AdamW moments, update counts) and the learning-rate schedule are the
oracle's own, started from the scenario's config and advanced by its own gradients only. Two
things are read from the trainer, conventions that torch, FSDP and Megatron legitimately differ
on (`compactsim.harness.oracle.optimizer`): which parameters that no row reached its update left
out, and whether its param groups spare biases and norms weight decay. The weights each step
starts from are the ones the harness measured before that step. So a trainer whose update drifts
is caught at the step where it drifts, and the next step is still judged from where the trainer
really was. The reference policy of the KL term is the harness's weights before step 0 (the
checkpoint both sides started from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from compactsim.harness.core.expectations import ScenarioExpectation
from compactsim.harness.core.training_state import MeasuredStep
from compactsim.harness.oracle.optimizer import AdamState
from compactsim.harness.core.expectations import ExpectedTrainingStep as StepTruth
from compactsim.harness.oracle.step import decode_pixels, expected_step
from compactsim.harness.oracle.step_settings import StepSettings
from compactsim.harness.oracle.truth import media_table


def _pixels(logs: Sequence[Mapping[str, Any]], wanted: set[str], cache: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for log in logs:
        missing = wanted - cache.keys()
        if not missing:
            break
        media = media_table(log)  # only the media table: no need to decode the calls
        for media_id in missing & media.keys():
            cache[media_id] = decode_pixels(media[media_id])
    return {m: cache[m] for m in wanted if m in cache}


def _decays(measured: MeasuredStep) -> dict[str, float] | None:
    """Each parameter's weight decay in the param groups of the optimizer that took the update, or None when unread."""
    rule = measured.after.update_rule
    return None if rule is None else {name: decay for name, (_, decay) in rule.items()}


def expect_training(
    settings: StepSettings,
    expectation: ScenarioExpectation,
    logs_by_step: Sequence[Sequence[Mapping[str, Any]]],
    measured: Sequence[MeasuredStep],
) -> tuple[StepTruth, ...]:
    """Truths of the steps the harness measured whose batch the oracle expects to train (in step order)."""
    if not measured:
        return ()
    reference = measured[0].before.weights if settings.loss.reference_policy_kl_penalty != 0 else None
    state = AdamState()
    cache: dict[str, torch.Tensor] = {}
    out: list[StepTruth] = []
    for k, (exp_step, m) in enumerate(zip(expectation.steps, measured)):
        if exp_step.error is not None:
            break
        wanted = {media_id for row in exp_step.rows for media_id in row.media_ids}
        pixels = _pixels(logs_by_step[k], wanted, cache)
        truth, state = expected_step(
            exp_step.step, exp_step.rows, pixels, m.before.weights, m.before.model_config, settings, state,
            reference_weights=reference, scheduler_increments=k, skipped=m.skipped_parameters,
            trainer_decays=_decays(m),
        )
        out.append(truth)
    return tuple(out)


__all__ = ["expect_training"]
