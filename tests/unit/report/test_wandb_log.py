"""W&B runs: configurable project/entity/group/tags, NeMo-RL metric namespaces, verdict and finding counts."""

from __future__ import annotations

import re

import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.report.wandb_log import WandbSettings, wandb_key, wandb_step_metrics, wandb_summary, wandb_tags
from tests.unit.report.report_builders import record


def test_flat_trainer_keys_go_under_train_and_namespaced_keys_stay():
    assert [wandb_key(k) for k in ("loss", "grad_norm", "token_mult_prob_error", "advantages/mean", "lr",
                                   "physical_trace_training/num_physical_rows", "train/scheduler_increments",
                                   "async/trajectory_age_max", "timing/step_s")] == [
        "train/loss", "train/grad_norm", "train/token_mult_prob_error", "train/advantages/mean", "train/lr",
        "physical_trace_training/num_physical_rows", "train/scheduler_increments", "async/trajectory_age_max",
        "timing/step_s"]


def test_step_metrics_keep_finite_numbers_only():
    metrics = {"loss": 0.5, "total_num_tokens": 36, "grad_norm": float("nan"), "lr": float("inf"), "flag": True,
               "note": "x", "physical_trace_training/padding_rows": 1}
    assert wandb_step_metrics(metrics) == {"train/loss": 0.5, "train/total_num_tokens": 36,
                                           "physical_trace_training/padding_rows": 1}


def test_summary_holds_verdict_and_finding_counts():
    rec = record(broken=True, steps=2)
    assert wandb_summary(rec) == {"verdict": "FAIL", "passed": False, "expected": "success", "observed": "success",
                                  "findings": 1, "findings/row.tokens": 1, "steps": 2, "rows": 3, "tokens": 36,
                                  "seed": 7, "reproduce": "compactsim run audit-fixture --seed 7"}
    ok = wandb_summary(record(broken=False, steps=1))
    assert (ok["verdict"], ok["passed"], ok["findings"]) == ("pass", True, 0)
    assert not [k for k in ok if k.startswith("findings/")]


def test_settings_refuse_empty_project_and_bad_tags():
    with pytest.raises(ConfigError, match="a project name must not be empty"):
        WandbSettings(project=" ")
    with pytest.raises(ConfigError, match="--wandb-tag '': a tag must have 1 to 64 characters"):
        WandbSettings(tags=("",))
    with pytest.raises(ConfigError, match="a tag must have 1 to 64 characters"):
        WandbSettings(tags=("x" * 65,))
    assert wandb_tags(WandbSettings(tags=("ci", "fixture")), record()) == ["ci", "fixture"]


@pytest.mark.parametrize(("project", "says"), [("../../x", "(found /)"), ("a:b#c", "(found # :)"),
                                               ("p" * 129, "at most 128 characters")])
def test_settings_refuse_a_project_name_wandb_would_refuse_after_the_run(project: str, says: str):
    with pytest.raises(ConfigError, match=re.escape(says)):
        WandbSettings(project=project)
    assert WandbSettings(project="p" * 128).project == "p" * 128


class _FakeRun:
    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.logged: list[tuple[int, dict[str, Any]]] = []
        self.summary: dict[str, Any] = {}
        self.exit_code: int | None = None

    def log(self, values: dict[str, Any], step: int) -> None:
        self.logged.append((step, values))

    def finish(self, exit_code: int = 0) -> None:
        self.exit_code = exit_code


def test_runner_logs_one_offline_run_per_scenario_with_the_settings(monkeypatch, tmp_path: Path):
    from compactsim.harness.runner import RunOptions, ScenarioRun, _wandb

    runs: list[_FakeRun] = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: runs.append(_FakeRun(kwargs)) or runs[-1]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    settings = WandbSettings(project="trainer-ci", entity="team", group="nightly", tags=("ci",),
                             directory=str(tmp_path / "wandb"))
    rec = replace(record(broken=True, steps=2, mode="scripted"),
                  step_metrics=({"loss": 0.5, "physical_trace_training/num_physical_rows": 3},
                                {"loss": 0.25, "physical_trace_training/num_physical_rows": 3}))
    _wandb(settings, RunOptions(seed=7), ScenarioRun(record=rec, files={}))
    (run,) = runs
    assert {k: run.kwargs[k] for k in ("project", "entity", "group", "tags", "name", "mode", "job_type", "dir")} == {
        "project": "trainer-ci", "entity": "team", "group": "nightly", "tags": ["ci", "fixture"],
        "name": "audit-fixture-seed7", "mode": "offline", "job_type": "scenario", "dir": str(tmp_path / "wandb")}
    assert run.kwargs["config"] == {"options": {"seed": 7, "backend": "compactsim.harness.pipeline:ReferenceBackend",
                                                "device": "cpu", "max_steps": None}, "mode": "scripted"}
    assert run.logged == [(0, {"train/loss": 0.5, "physical_trace_training/num_physical_rows": 3}),
                          (1, {"train/loss": 0.25, "physical_trace_training/num_physical_rows": 3})]
    assert (run.summary["verdict"], run.summary["findings"], run.summary["findings/row.tokens"]) == ("FAIL", 1, 1)
    assert run.exit_code == 1
    assert (tmp_path / "wandb").is_dir()


@pytest.mark.parametrize("option", ["--wandb-project", "--wandb-entity", "--wandb-group"])
def test_an_empty_wandb_option_exits_2_instead_of_turning_wandb_off(option: str, tmp_path):
    """`--wandb-group "$UNSET_VAR"` used to run without W&B and without a word (CLI probe); each option implies --wandb."""
    from typer.testing import CliRunner

    from compactsim.harness.cli import app

    result = CliRunner().invoke(app, ["run", "no-compaction", "--out", str(tmp_path / "out"), option, ""])
    assert result.exit_code == 2, result.output
    assert f"{option} '': " in result.stderr and "must not be empty" in result.stderr
    assert not (tmp_path / "out").exists()
