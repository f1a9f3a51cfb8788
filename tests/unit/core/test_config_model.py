"""A boolean in a configuration file is never read as the number 1 or 0 (`NoBooleanNumbers`).

Pydantic's lax mode accepts `true` for an `int` or `float` field; YAML's `yes`/`on` are booleans too,
so a typo or a mis-indented key would configure a run silently. Every configuration model read from a
file refuses it at the field, and still accepts a boolean where the field is one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.core.config_model import NoBooleanNumbers
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.mock_servers.model_server import ServerSettings
from compactsim.mock_servers.reward_server.settings import RewardSettings


class _Model(NoBooleanNumbers):
    count: int = 0
    rate: float | None = None
    flag: bool = False
    either: int | bool = 0
    sizes: tuple[int, ...] = ()
    table: dict[str, float] = {}
    by_index: dict[int, float] = {}
    name: str = ""


@pytest.mark.parametrize("field,value,where", [
    ("count", True, "count"), ("rate", False, "rate"), ("sizes", [1, True], "sizes"), ("table", {"a": False}, "table"),
    ("by_index", {True: 1.0}, "by_index"),  # `rewards.by_index: {true: 1.0}` was the reward of rollout 1
])
def test_a_boolean_for_a_number_is_refused_at_its_field(field: str, value: object, where: str):
    with pytest.raises(ValidationError) as info:
        _Model.model_validate({field: value})
    (error,) = info.value.errors()
    assert error["loc"] == (where,)
    assert "a boolean where a number is expected" in error["msg"]


def test_booleans_where_booleans_belong_and_numbers_stay_accepted():
    model = _Model.model_validate({"count": 3, "rate": 0.5, "flag": True, "either": True, "sizes": [1, 2],
                                   "table": {"a": 1}})
    assert (model.count, model.rate, model.flag, model.either, model.sizes, model.table) == (3, 0.5, True, True,
                                                                                              (1, 2), {"a": 1.0})


@pytest.mark.parametrize("data,loc", [
    ({"grpo": {"seed": True}}, ("grpo", "seed")),
    ({"policy": {"dp_size": True}}, ("policy", "dp_size")),
    ({"policy": {"learning_rate": False}}, ("policy", "learning_rate")),
    ({"grpo": {"async_grpo": {"max_trajectory_age_steps": True}}}, ("grpo", "async_grpo", "max_trajectory_age_steps")),
])
def test_trainer_config(data: dict, loc: tuple[str, ...]):
    with pytest.raises(ValidationError) as info:
        TrainerConfig.model_validate(data)
    assert info.value.errors()[0]["loc"] == loc


def test_server_and_reward_settings():
    with pytest.raises(ValidationError):
        ServerSettings.model_validate({"limits": {"max_new_tokens": True}})
    with pytest.raises(ValidationError) as info:
        RewardSettings.model_validate({"rule": {"kind": "pattern", "pattern": [1.0, True]}})
    assert "a boolean where a number is expected" in str(info.value)


def test_a_scenario_file_with_a_boolean_reward_exits_2_naming_the_field(tmp_path: Path):
    """`pattern: [1.0, true]` was a reward of 1.0 for every second rollout."""
    path = tmp_path / "s.yaml"
    path.write_text("scenarios:\n  - name: bool-reward\n    purpose: p\n    rewards:\n      pattern: [1.0, true]\n")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "s.yaml:5:16: field $.scenarios[0].rewards.pattern" in result.output, result.output
    assert "item 1: true: a boolean where a number is expected" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["learning_rate", "weight_decay"])
def test_optimizer_rates_that_overflow_float64_are_refused(field: str):
    """A learning rate of 1e308 overflowed AdamW's update to inf where the oracle's order of operations stayed at
    ~1e308: a finding against a correct trainer (fuzzing round 4). 1e6 is accepted, far above any real rate."""
    from compactsim.harness.pipeline.train_config import MAX_OPTIMIZER_RATE

    assert TrainerConfig.model_validate({"policy": {field: MAX_OPTIMIZER_RATE}})
    with pytest.raises(ValidationError) as info:
        TrainerConfig.model_validate({"policy": {field: 1e308}})
    assert info.value.errors()[0]["loc"] == ("policy", field)


def test_a_boolean_trainer_setting_is_reported_at_its_key(tmp_path: Path):
    """It was reported at the scenario entry (`$.scenarios[0]`), as a rule across fields would be (fuzzing round 5)."""
    path = tmp_path / "s.yaml"
    path.write_text("scenarios:\n  - name: lr-bool\n    purpose: p\n    trainer:\n      policy:\n        learning_rate: yes\n")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "s.yaml:6:24: field $.scenarios[0].trainer.policy.learning_rate: true: a boolean where a number is expected" \
        in " ".join(result.output.split())
