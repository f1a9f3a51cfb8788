"""Training in float32 (`compactsim run --precision float32`): correct float32 trainers pass, float64 still judges exactly.

`max-steps-cutoff` trains an expert that sees few tokens: some of its gradient entries are ~0, so
float32's rounding picks their sign and Adam's sign-like first step lands up to 2·lr from the
float64 oracle's. The reference backend in float32 must pass (the update bound leaves such entries
open, `training_checks._undetermined_step`), with a flat bound of 1e-3·lr everywhere else.

NeMo-RL computes GRPO advantages from float32 reward tensors (`tests/quality/correct_float32_advantages`):
within float32's tolerance, so it passes a scenario run in float32 and is a finding in float64.
"""

from __future__ import annotations

import pytest

from compactsim.harness.runner import RunOptions, run_scenario
from compactsim.scenarios.catalogue import default_catalogue

pytestmark = pytest.mark.slow

FLOAT32_ADVANTAGES = "tests.quality.correct_float32_advantages:Backend"


def test_a_float32_trainer_passes_where_near_zero_gradients_flip_adams_first_step() -> None:
    record = run_scenario(default_catalogue().get("max-steps-cutoff"), RunOptions(precision="float32")).record
    assert record.passed, [str(f) for f in record.findings]
    assert record.steps == 1 and record.rows > 0
    assert record.reproduce == "compactsim run max-steps-cutoff --seed 0 --precision float32"


def test_float32_advantages_pass_in_float32_and_are_a_finding_in_float64() -> None:
    scenario = default_catalogue().get("float32-graded-group")
    in32 = run_scenario(scenario, RunOptions(backend=FLOAT32_ADVANTAGES)).record
    assert in32.passed, [str(f) for f in in32.findings]
    in64 = run_scenario(scenario, RunOptions(backend=FLOAT32_ADVANTAGES, precision="float64")).record
    assert not in64.passed and "row.advantage" in {f.check for f in in64.findings}
    assert in64.reproduce == ("compactsim run float32-graded-group --seed 0 --precision float64 "
                              f"--backend {FLOAT32_ADVANTAGES}")
