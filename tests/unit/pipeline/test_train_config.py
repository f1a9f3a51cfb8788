"""Trainer config: the frozen field-set guard, every unsupported option, the cross-field rules."""

from __future__ import annotations

import math

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.pipeline.train_config import (
    SUPPORTED_FIELDS,
    UNSUPPORTED_RULES,
    MaterializeConfig,
    TrainerConfig,
    config_field_paths,
    parse_trainer_config,
    validate_physical_trace_training_config,
)

#: Every config field, checked in. A new field turns this test red until it is classified in
#: harness/pipeline/train_config.py (SUPPORTED_FIELDS or UNSUPPORTED_RULES) and added here.
KNOWN_FIELDS = frozenset(
    {
        "grpo.adv_estimator",
        "grpo.advantage_clip_high",
        "grpo.advantage_clip_low",
        "grpo.async_grpo.enabled",
        "grpo.async_grpo.in_flight_weight_updates",
        "grpo.async_grpo.max_trajectory_age_steps",
        "grpo.async_grpo.recompute_kv_cache_after_weight_updates",
        "grpo.batch_multiplier",
        "grpo.deduplicate_multimodal_data",
        "grpo.invalid_tool_call_advantage",
        "grpo.malformed_thinking_advantage",
        "grpo.max_num_steps",
        "grpo.normalize_rewards",
        "grpo.num_generations_per_prompt",
        "grpo.num_prompts_per_step",
        "grpo.overlong_filtering",
        "grpo.reward_shaping_enabled",
        "grpo.seed",
        "grpo.seq_logprob_error_threshold",
        "grpo.use_dynamic_sampling",
        "grpo.use_leave_one_out_baseline",
        "loss_fn.disable_ppo_ratio",
        "loss_fn.force_on_policy_ratio",
        "loss_fn.kl_input_clamp_value",
        "loss_fn.kl_output_clamp_value",
        "loss_fn.ratio_clip_c",
        "loss_fn.ratio_clip_max",
        "loss_fn.ratio_clip_min",
        "loss_fn.reference_policy_kl_penalty",
        "loss_fn.reference_policy_kl_type",
        "loss_fn.token_level_loss",
        "loss_fn.truncated_importance_sampling_ratio",
        "loss_fn.truncated_importance_sampling_ratio_min",
        "loss_fn.truncated_importance_sampling_type",
        "loss_fn.use_importance_sampling_correction",
        "policy.dp_size",
        "policy.dynamic_batching_enabled",
        "policy.learning_rate",
        "policy.logprob_dtype",
        "policy.lr_warmup_steps",
        "policy.make_sequence_length_divisible_by",
        "policy.max_grad_norm",
        "policy.max_total_sequence_length",
        "policy.pad_token_id",
        "policy.precision",
        "policy.router_replay_enabled",
        "policy.sequence_packing_enabled",
        "policy.train_global_batch_size",
        "policy.train_micro_batch_size",
        "policy.weight_decay",
    }
)

#: One unsupported value per rule (a valid config otherwise).
UNSUPPORTED_VALUES = {
    "grpo.adv_estimator": "gdpo",
    "grpo.use_dynamic_sampling": True,
    "grpo.overlong_filtering": True,
    "grpo.reward_shaping_enabled": True,
    "grpo.seq_logprob_error_threshold": 2.0,
    "grpo.invalid_tool_call_advantage": -1.0,
    "grpo.malformed_thinking_advantage": -1.0,
    "grpo.deduplicate_multimodal_data": True,
    "grpo.batch_multiplier": 2.0,
    "grpo.async_grpo.in_flight_weight_updates": True,
    "loss_fn.truncated_importance_sampling_type": "seq-mask-tis",
    "policy.sequence_packing_enabled": True,
    "policy.dynamic_batching_enabled": True,
}


def _nested(path: str, value: object) -> dict:
    out: dict = {}
    node = out
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def _reject(values: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate_physical_trace_training_config(values)
    return info.value


def test_config_field_set_equals_the_checked_in_frozen_set():
    assert config_field_paths(TrainerConfig) == KNOWN_FIELDS


def test_every_field_is_classified_exactly_once():
    classified = SUPPORTED_FIELDS | set(UNSUPPORTED_RULES)
    assert classified == config_field_paths(TrainerConfig)
    assert not SUPPORTED_FIELDS & set(UNSUPPORTED_RULES)


def test_every_unsupported_rule_has_a_test_value():
    # token_level_loss=False is refused by LossConfig itself; the rule guards a future relaxation
    assert set(UNSUPPORTED_VALUES) | {"loss_fn.token_level_loss"} == set(UNSUPPORTED_RULES)


def test_default_config_is_accepted():
    assert validate_physical_trace_training_config(TrainerConfig()) == TrainerConfig()


@pytest.mark.parametrize("path", sorted(UNSUPPORTED_VALUES))
def test_each_unsupported_option_is_rejected_with_its_reason(path):
    values = _nested(path, UNSUPPORTED_VALUES[path])
    if path == "loss_fn.truncated_importance_sampling_type":
        values = _merge(values, {"loss_fn": {"use_importance_sampling_correction": True,
                                             "truncated_importance_sampling_ratio": 2.0,
                                             "truncated_importance_sampling_ratio_min": 0.5}})
    err = _reject(values)
    assert err.code == "unsupported_config"
    assert len(err.violations) == 1
    assert err.violations[0].startswith(f"{path}={UNSUPPORTED_VALUES[path]!r} is unsupported on the physical-trace path: ")
    assert err.violations[0].endswith(UNSUPPORTED_RULES[path][1])


def test_all_violations_are_reported_in_one_error():
    err = _reject(
        {
            "grpo": {"use_dynamic_sampling": True, "async_grpo": {"enabled": True}},
            "policy": {"sequence_packing_enabled": True, "train_global_batch_size": 3},
        }
    )
    assert err.code == "unsupported_config"
    assert len(err.violations) == 4
    text = str(err)
    assert text.startswith("unsupported_config: 4 setting(s) the physical-trace training path does not support")
    assert "grpo.use_dynamic_sampling=True" in text and "policy.sequence_packing_enabled=True" in text
    assert "policy.train_global_batch_size=3 must equal" in text
    assert "grpo.async_grpo.enabled=True requires loss_fn.use_importance_sampling_correction=True" in text


def test_global_batch_size_must_equal_prompts_times_generations():
    err = _reject({"grpo": {"num_prompts_per_step": 3, "num_generations_per_prompt": 4},
                   "policy": {"train_global_batch_size": 8}})
    assert err.violations == (
        "policy.train_global_batch_size=8 must equal grpo.num_prompts_per_step × grpo.num_generations_per_prompt "
        "= 3 × 4 = 12 so one logical batch is exactly one optimizer step",
    )


def test_async_requires_importance_sampling_correction():
    err = _reject({"grpo": {"async_grpo": {"enabled": True}}})
    assert err.violations == (
        "grpo.async_grpo.enabled=True requires loss_fn.use_importance_sampling_correction=True: groups of different "
        "policy versions in one batch are sound only with the importance-sampling correction",
    )
    ok = validate_physical_trace_training_config(
        {"grpo": {"async_grpo": {"enabled": True}}, "loss_fn": {"use_importance_sampling_correction": True}}
    )
    assert ok.grpo.async_grpo.enabled


def test_unknown_key_is_an_invalid_config_naming_it():
    with pytest.raises(ConfigError) as info:
        parse_trainer_config({"grpo": {"num_prompts": 2}})
    assert info.value.code == "invalid_config"
    assert "grpo.num_prompts=2: Extra inputs are not permitted" in str(info.value)


def test_loss_config_errors_are_flattened_with_their_path():
    with pytest.raises(ConfigError) as info:
        parse_trainer_config({"loss_fn": {"token_level_loss": False}})
    assert info.value.code == "unsupported_config"
    assert info.value.violations[0].startswith("loss_fn.token_level_loss=False: the per-sequence mean is not supported")


def test_derived_configs_carry_the_trainer_settings():
    cfg = parse_trainer_config(
        {
            "grpo": {"num_generations_per_prompt": 8, "use_leave_one_out_baseline": False,
                     "async_grpo": {"enabled": True}},
            "loss_fn": {"use_importance_sampling_correction": True},
            "policy": {"dp_size": 2, "train_micro_batch_size": 4, "make_sequence_length_divisible_by": 64,
                       "logprob_dtype": "float64", "pad_token_id": 3},
        }
    )
    assert cfg.materialize_config() == MaterializeConfig(
        dp_size=2, micro_batch_size=4, make_sequence_length_divisible_by=64, num_generations_per_prompt=8,
        pad_token_id=3, logprob_dtype="float64", async_mode=True, use_importance_sampling_correction=True,
    )
    adv = cfg.advantage_config()
    assert adv.num_generations_per_prompt == 8 and adv.use_leave_one_out_baseline is False


@pytest.mark.parametrize(("values", "violation"), [
    ({"grpo": {"advantage_clip_low": 1.0, "advantage_clip_high": -1.0}},
     "grpo.advantage_clip_low=1.0: above advantage_clip_high=-1.0, so the clip range is empty "
     "(every advantage would become -1.0)"),
    ({"policy": {"max_grad_norm": 0.0}}, "policy.max_grad_norm=0.0: Input should be greater than 0"),
    ({"policy": {"max_grad_norm": -1.0}}, "policy.max_grad_norm=-1.0: Input should be greater than 0"),
    ({"policy": {"learning_rate": math.nan}}, "policy.learning_rate=nan: Input should be a finite number"),
    ({"grpo": {"advantage_clip_high": math.inf}}, "grpo.advantage_clip_high=inf: Input should be a finite number"),
])
def test_settings_that_would_train_silently_wrong_are_invalid_naming_the_field(values, violation):
    """A NaN rate, an empty clip range or a non-positive clip norm would still train, silently wrong."""
    with pytest.raises(ConfigError) as info:
        parse_trainer_config(values)
    assert (info.value.code, info.value.violations) == ("invalid_config", (violation,))


def test_a_one_point_clip_range_and_no_gradient_clipping_are_valid():
    cfg = parse_trainer_config({"grpo": {"advantage_clip_low": -0.5, "advantage_clip_high": -0.5},
                                "policy": {"max_grad_norm": None}})
    assert (cfg.grpo.advantage_clip_low, cfg.policy.max_grad_norm) == (-0.5, None)
