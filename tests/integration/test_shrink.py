"""Shrinking a failing generated scenario to the fewest model calls that still fail."""

from __future__ import annotations

import pytest
from hypothesis import Phase, find, settings

from compactsim.harness.runner import RunOptions, run_scenario
from compactsim.harness.shrink import num_calls, reduce_scenario, shrink, shrunk_entry
from compactsim.scenarios.catalogue import dump_scenario, parse_scenarios
from compactsim.scenarios.model import Scenario
from compactsim.scenarios.strategies import scenarios

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # ~6 s of runs

BROKEN = RunOptions(backend="tests.quality.broadcast_first_advantage:Backend")


@pytest.fixture(scope="module")
def generated() -> Scenario:
    """A generated scenario of 2 groups × 2 rollouts × ≥ 3 calls, rewards 1/0 by index (so advantages differ).

    The first derandomized example with ≥ 8 calls, as generated: Hypothesis's own shrinking of it (~10 s)
    is left out, since shrinking it is what `compactsim.harness.shrink` is tested for here.
    """
    found = find(scenarios(min_groups=2, max_groups=2, min_group_size=2, max_group_size=2, min_turns=3, max_turns=4),
                 lambda s: num_calls(s) >= 8, settings=settings(database=None, derandomize=True, phases=[Phase.generate]))
    return Scenario.model_validate({**found.to_data(), "rewards": {"pattern": [1.0, 0.0]}, "mask_sample": []})


@pytest.fixture(scope="module")
def shrunk(generated: Scenario):
    """The broken backend's failure on `generated`, shrunk once for the tests below (a pure function of both)."""
    return shrink(generated, BROKEN, max_examples=40)


def test_generated_scenario_shrinks_to_the_fewest_failing_calls(generated: Scenario, shrunk):
    assert num_calls(generated) >= 8
    result = shrunk
    assert result.calls_before == num_calls(generated)
    assert result.calls_after == 2
    assert "row.advantage" in result.checks
    m = result.minimal
    assert (m.steps, m.groups, m.group_size, m.script.num_turns) == (1, 1, 2, 1)
    # nothing smaller fails: a group of one rollout has advantage 0, which the broadcast cannot get wrong
    smaller = reduce_scenario(generated, (1, 1, 1, 1))
    assert smaller is not None and num_calls(smaller) == 1
    assert run_scenario(smaller, BROKEN).record.passed


def test_shrunk_entry_is_a_valid_named_catalogue_entry(generated: Scenario, shrunk):
    entry = shrunk_entry(shrunk)
    assert entry.name == f"{generated.name}-shrunk"
    assert entry.purpose.startswith(f"Shrunk from {generated.name} (seed {generated.seed}): 2 of ")
    reloaded = parse_scenarios(__import__("yaml").safe_load(dump_scenario(entry)), source="shrunk.yaml")
    assert reloaded[0] == entry
    assert not run_scenario(reloaded[0], BROKEN).record.passed


def test_reduce_scenario_cuts_explicit_turns_keeping_the_final_answer(generated: Scenario):
    cut = reduce_scenario(generated, (1, 1, 2, 2))
    assert cut is not None
    assert cut.script.num_turns == 2
    assert cut.script.turns[-1] == generated.script.turns[-1]


@pytest.mark.parametrize(("args", "says"), [
    (["--backend", "nonexistent_backend_module:X"], "does not load: ModuleNotFoundError"),
    (["--name", "Bad Name!"], "--name 'Bad Name!': use lowercase letters, digits and dashes"),
])
def test_shrink_refuses_bad_options_before_searching(tmp_path, args, says):
    """An unloadable backend is not "passes the audit", and a bad --name fails before minutes of search."""
    from typer.testing import CliRunner

    from compactsim.harness.cli import app

    result = CliRunner().invoke(app, ["shrink", "single-call-rollout", "--out", str(tmp_path / "s"), *args])
    assert result.exit_code == 2
    assert says in result.output
    assert "Traceback" not in result.output
