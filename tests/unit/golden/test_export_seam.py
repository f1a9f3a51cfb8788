"""The export's seam: a `ScenarioRun` carries each step's results, logs and metrics as the runner's files hold them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.runner import RunOptions, resolve_scenarios, run_scenario, suite_record, write_outputs

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    ("name", "rollout_ids", "trained_steps"),
    [
        # two trained steps of two groups of two
        ("scripted-three-steps", [["s0-g0-r0", "s0-g0-r1", "s0-g1-r0", "s0-g1-r1"],
                                  ["s1-g0-r0", "s1-g0-r1", "s1-g1-r0", "s1-g1-r1"]], [0, 1]),
        # refused at step 0: its results were collected and received, nothing was trained
        ("mutation-ghost-media", [["s0-g0-r0", "s0-g0-r1"]], []),
    ],
)
def test_scenario_run_step_data_equals_the_files_write_outputs_writes(tmp_path: Path, name: str,
                                                                      rollout_ids: list[list[str]],
                                                                      trained_steps: list[int]):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    options = RunOptions(seed=3, max_steps=2)
    run = run_scenario(resolve_scenarios([name])[0], options)
    write_outputs(tmp_path, [run], suite_record([run], options, [name]), total_seconds=1.0)
    base = tmp_path / "scenarios" / name

    step_files = [f"step-{k:04d}.jsonl" for k in range(len(rollout_ids))]
    assert sorted(p.name for p in (base / "results").iterdir()) == step_files
    assert sorted(p.name for p in (base / "rollouts").iterdir()) == step_files
    assert [[r["rollout_id"] for r in step] for step in run.rollouts_by_step] == rollout_ids
    assert [len(step) for step in run.results_by_step] == [len(ids) for ids in rollout_ids]
    assert [m["step"] for m in run.metrics_by_step] == trained_steps
    for k in range(len(rollout_ids)):
        assert list(run.results_by_step[k]) == _lines(base / "results" / f"step-{k:04d}.jsonl")
        assert list(run.rollouts_by_step[k]) == _lines(base / "rollouts" / f"step-{k:04d}.jsonl")
    assert list(run.metrics_by_step) == _lines(base / "metrics.jsonl")
    assert run.scenario.to_data() == json.loads((base / "scenario.json").read_text(encoding="utf-8"))
    assert (run.scenario.name, run.scenario.seed, run.scenario.steps) == (name, 3, len(rollout_ids))
    summary = (tmp_path / "summary.json").read_text(encoding="utf-8")
    assert [key for key in ("results_by_step", "rollouts_by_step", "metrics_by_step", '"ground_truth"')
            if key in summary] == []


@pytest.mark.slow
def test_export_runs_skip_only_the_training_oracle_and_its_train_checks():
    """`audit_training=False` (what the export runs) drops the oracle's training step and nothing else:
    a trainer that never applies its update is a `train.update` finding in a full run only, while a
    row-level bug is found either way; the option never reaches `run.json`."""
    pytest.importorskip("torch")
    from tests.quality import broadcast_first_advantage, never_updates

    def checks(module: object, audit_training: bool) -> set[str]:
        scenario = resolve_scenarios([module.SCENARIO])[0]  # type: ignore[attr-defined]
        options = RunOptions(backend=f"{module.__name__}:Backend", max_steps=2, audit_training=audit_training)
        run = run_scenario(scenario, options)
        assert b"audit_training" not in run.files["run.json"]
        return {f.check for f in run.audit.findings}

    assert never_updates.EXPECTED_CHECK in checks(never_updates, True)
    assert {c for c in checks(never_updates, False) if c.startswith("train.")} == set()
    assert broadcast_first_advantage.EXPECTED_CHECK in checks(broadcast_first_advantage, False)
