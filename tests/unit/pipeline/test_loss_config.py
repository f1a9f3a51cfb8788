"""LossConfig validation and clipped_pg_loss argument errors: every fail-loud path, code and message."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.pipeline.loss import LossConfig, clipped_pg_loss, combine_metrics, valid_counts

torch.set_num_threads(1)

F64 = torch.float64


def _config_error(**values: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        LossConfig(**values)
    return info.value


def test_loss_config_defaults_are_nemo_defaults() -> None:
    cfg = LossConfig()
    assert cfg.model_dump() == {
        "ratio_clip_min": 0.2,
        "ratio_clip_max": 0.2,
        "ratio_clip_c": None,
        "reference_policy_kl_penalty": 0.01,
        "reference_policy_kl_type": "k3",
        "kl_input_clamp_value": 20.0,
        "kl_output_clamp_value": 10.0,
        "use_importance_sampling_correction": False,
        "truncated_importance_sampling_type": None,
        "truncated_importance_sampling_ratio": None,
        "truncated_importance_sampling_ratio_min": None,
        "token_level_loss": True,
        "force_on_policy_ratio": False,
        "disable_ppo_ratio": False,
    }


def test_loss_config_round_trips_through_model_validate_and_is_frozen() -> None:
    cfg = LossConfig(ratio_clip_c=3, reference_policy_kl_type="k1")
    assert LossConfig.model_validate(cfg.model_dump()) == cfg
    assert cfg.ratio_clip_c == 3.0
    with pytest.raises(Exception, match="frozen"):
        cfg.ratio_clip_c = 4.0  # type: ignore[misc]


def test_sequence_level_loss_is_unsupported() -> None:
    err = _config_error(token_level_loss=False)
    assert err.code == "unsupported_config"
    assert err.violations == (
        "token_level_loss=False: the per-sequence mean is not supported on the physical-trace path "
        "(a compacted rollout spans several rows, so a per-row mean would weight it by its row count); "
        "set token_level_loss=True",
    )


@pytest.mark.parametrize(
    ("values", "violation"),
    [
        ({"ratio_clip_c": 1.0}, "ratio_clip_c=1.0: dual clip needs ratio_clip_c > 1 (usually 3), or None"),
        ({"ratio_clip_c": 0.5}, "ratio_clip_c=0.5: dual clip needs ratio_clip_c > 1 (usually 3), or None"),
        ({"ratio_clip_min": -0.1}, "ratio_clip_min=-0.1: expected >= 0"),
        ({"ratio_clip_max": -0.2}, "ratio_clip_max=-0.2: expected >= 0"),
        ({"reference_policy_kl_penalty": -0.01}, "reference_policy_kl_penalty=-0.01: expected >= 0"),
        ({"kl_input_clamp_value": 0.0}, "kl_input_clamp_value=0.0: expected > 0, or None for no clamp"),
        ({"kl_output_clamp_value": -1.0}, "kl_output_clamp_value=-1.0: expected > 0, or None for no clamp"),
        (
            {"force_on_policy_ratio": True, "disable_ppo_ratio": True},
            "force_on_policy_ratio=True and disable_ppo_ratio=True: they pick different ratios "
            "(exp(lp - sg(lp)) versus lp); set at most one",
        ),
        (
            {"truncated_importance_sampling_type": "tis", "truncated_importance_sampling_ratio": 2.0},
            "truncated_importance_sampling_type='tis' needs use_importance_sampling_correction=True",
        ),
        (
            {"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "tis"},
            "truncated_importance_sampling_ratio=None: 'tis' needs a positive upper bound",
        ),
        (
            {
                "use_importance_sampling_correction": True,
                "truncated_importance_sampling_type": "tis",
                "truncated_importance_sampling_ratio": 0.0,
            },
            "truncated_importance_sampling_ratio=0.0: 'tis' needs a positive upper bound",
        ),
        (
            {
                "use_importance_sampling_correction": True,
                "truncated_importance_sampling_type": "icepop",
                "truncated_importance_sampling_ratio": 2.0,
            },
            "truncated_importance_sampling_ratio_min=None: 'icepop' needs a lower bound",
        ),
        (
            {
                "use_importance_sampling_correction": True,
                "truncated_importance_sampling_type": "seq-mask-tis",
                "truncated_importance_sampling_ratio": 2.0,
            },
            "truncated_importance_sampling_ratio_min=None: 'seq-mask-tis' needs a lower bound",
        ),
        (
            {
                "use_importance_sampling_correction": True,
                "truncated_importance_sampling_type": "tis",
                "truncated_importance_sampling_ratio": 1.5,
                "truncated_importance_sampling_ratio_min": 2.0,
            },
            "truncated_importance_sampling_ratio_min=2.0 > truncated_importance_sampling_ratio=1.5: expected min <= max",
        ),
        (
            {"use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 2.0},
            "truncated_importance_sampling_ratio=2.0 but truncated_importance_sampling_type=None: "
            "set the type ('tis', 'icepop' or 'seq-mask-tis') or drop the bound",
        ),
        (
            {"truncated_importance_sampling_ratio_min": 0.5},
            "truncated_importance_sampling_ratio_min=0.5 but truncated_importance_sampling_type=None: "
            "set the type ('tis', 'icepop' or 'seq-mask-tis') or drop the bound",
        ),
    ],
)
def test_invalid_loss_config_combination_is_rejected(values: dict[str, Any], violation: str) -> None:
    err = _config_error(**values)
    assert err.code == "invalid_config"
    assert err.detail == "LossConfig has 1 problem(s)"
    assert err.violations == (violation,)
    assert str(err) == f"invalid_config: LossConfig has 1 problem(s)\n  - {violation}"


def test_loss_config_lists_every_violation_at_once() -> None:
    err = _config_error(ratio_clip_c=1.0, token_level_loss=False, ratio_clip_min=-1.0)
    assert err.code == "invalid_config"  # any invalid setting outranks "unsupported"
    assert err.detail == "LossConfig has 3 problem(s)"
    assert [v.split(":")[0] for v in err.violations] == ["ratio_clip_min=-1.0", "ratio_clip_c=1.0", "token_level_loss=False"]


@pytest.mark.parametrize(
    ("values", "violation"),
    [
        ({"ratio_clip": 0.2}, "ratio_clip=0.2: Extra inputs are not permitted"),
        ({"reference_policy_kl_type": "k4"}, "reference_policy_kl_type='k4': Input should be 'k1', 'k2' or 'k3'"),
        (
            {"truncated_importance_sampling_type": "clip"},
            "truncated_importance_sampling_type='clip': Input should be 'tis', 'icepop' or 'seq-mask-tis'",
        ),
        ({"use_importance_sampling_correction": "yes"}, "use_importance_sampling_correction='yes': Input should be a valid boolean"),
        ({"ratio_clip_max": float("inf")}, "ratio_clip_max=inf: Input should be a finite number"),
        ({"ratio_clip_c": "3"}, "ratio_clip_c='3': Input should be a valid number"),
    ],
)
def test_malformed_loss_config_field_is_rejected_with_its_name(values: dict[str, Any], violation: str) -> None:
    err = _config_error(**values)
    assert err.code == "invalid_config"
    assert err.detail == "LossConfig has 1 invalid field(s)"
    assert err.violations[0] == violation


def test_model_validate_raises_the_same_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        LossConfig.model_validate({"ratio_clip_c": 1.0})
    assert info.value.code == "invalid_config"
    assert info.value.violations == ("ratio_clip_c=1.0: dual clip needs ratio_clip_c > 1 (usually 3), or None",)
    with pytest.raises(ConfigError) as info:
        LossConfig.model_validate({"bogus": 1})
    assert info.value.violations == ("bogus=1: Extra inputs are not permitted",)


def test_loss_config_error_survives_pickling() -> None:
    err = _config_error(token_level_loss=False)
    again = pickle.loads(pickle.dumps(err))
    assert (again.code, again.detail, again.violations) == (err.code, err.detail, err.violations)


# --- clipped_pg_loss / valid_counts / combine_metrics arguments ---------------------------------------


def _args(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "curr_logprobs": torch.zeros(2, 4, dtype=F64),
        "token_mask": torch.ones(2, 4, dtype=F64),
        "sample_mask": torch.ones(2, dtype=F64),
        "advantages": torch.ones(2, 4, dtype=F64),
        "prev_logprobs": torch.zeros(2, 4, dtype=F64),
        "generation_logprobs": torch.zeros(2, 4, dtype=F64),
        "reference_logprobs": None,
        "global_valid_tokens": 6.0,
        "global_valid_seqs": 2.0,
    }
    args.update(overrides)
    return args


NO_KL = LossConfig(reference_policy_kl_penalty=0.0)


@pytest.mark.parametrize(
    ("cfg", "overrides", "message"),
    [
        (NO_KL, {"token_mask": torch.ones(8)}, "token_mask has shape (8,): expected (B, S)"),
        (NO_KL, {"sample_mask": torch.ones(2, 1)}, "sample_mask has shape (2, 1): expected (2,)"),
        (
            NO_KL,
            {"curr_logprobs": torch.zeros(2, 2)},
            "curr_logprobs has shape (2, 2): expected (2, 4) own-position or (2, 3) next-token, to match token_mask (2, 4)",
        ),
        (NO_KL, {"advantages": torch.ones(2, 3)}, "advantages has shape (2, 3): expected (2, 4)"),
        (NO_KL, {"prev_logprobs": torch.zeros(1, 4)}, "prev_logprobs has shape (1, 4): expected (2, 4)"),
        (NO_KL, {"generation_logprobs": torch.zeros(2, 5)}, "generation_logprobs has shape (2, 5): expected (2, 4)"),
        (
            LossConfig(),
            {"reference_logprobs": torch.zeros(2)},
            "reference_logprobs has shape (2,): expected (2, 4)",
        ),
        (NO_KL, {"prev_logprobs": None}, "prev_logprobs=None: only allowed with force_on_policy_ratio=True"),
        (
            LossConfig(),
            {},
            "reference_logprobs=None with reference_policy_kl_penalty=0.01: pass the reference policy's "
            "logprobs or set the penalty to 0",
        ),
        (
            NO_KL,
            {"global_valid_tokens": 3.0},
            "global_valid_tokens=3.0 is below this microbatch's own count 6.0: pass the count over the whole "
            "logical batch (every microbatch and dp rank), e.g. from valid_counts()",
        ),
        (
            NO_KL,
            {"global_valid_seqs": torch.tensor(1.0)},
            "global_valid_seqs=1.0 is below this microbatch's own count 2.0: pass the count over the whole "
            "logical batch (every microbatch and dp rank), e.g. from valid_counts()",
        ),
        (
            NO_KL,
            {"global_valid_tokens": float("nan")},
            "global_valid_tokens=nan is below this microbatch's own count 6.0: pass the count over the whole "
            "logical batch (every microbatch and dp rank), e.g. from valid_counts()",
        ),
    ],
)
def test_invalid_loss_argument_is_rejected(cfg: LossConfig, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        clipped_pg_loss(cfg, **_args(**overrides))
    assert info.value.code == "invalid_argument"
    assert info.value.detail == message


def test_prev_logprobs_may_be_omitted_under_force_on_policy_ratio() -> None:
    cfg = LossConfig(reference_policy_kl_penalty=0.0, force_on_policy_ratio=True)
    out = clipped_pg_loss(cfg, **_args(prev_logprobs=None))
    assert out.loss.item() == -6.0 / (6.0 + 1e-8)


def test_valid_counts_rejects_mismatched_masks() -> None:
    with pytest.raises(ConfigError) as info:
        valid_counts(torch.ones(2, 4), torch.ones(3))
    assert (info.value.code, info.value.detail) == ("invalid_argument", "sample_mask has shape (3,): expected (2,)")
    with pytest.raises(ConfigError) as info:
        valid_counts(torch.ones(4), torch.ones(4))
    assert (info.value.code, info.value.detail) == ("invalid_argument", "token_mask has shape (4,): expected (B, S)")


def test_valid_counts_skips_column_zero_and_masked_samples() -> None:
    counts = valid_counts(torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]), torch.tensor([1.0, 0.0]))
    assert (counts.tokens, counts.seqs) == (2.0, 1.0)


def test_combine_metrics_rejects_empty_and_mismatched_inputs() -> None:
    with pytest.raises(ConfigError) as info:
        combine_metrics([])
    assert (info.value.code, info.value.detail) == (
        "invalid_argument",
        "per_microbatch=[]: expected at least one microbatch's metrics",
    )
    with pytest.raises(ConfigError) as info:
        combine_metrics([{"loss": 1.0}, {"loss": 1.0, "is_oob_ratio": 0.0}])
    assert info.value.code == "invalid_argument"
    assert info.value.detail == (
        "per_microbatch[1] has keys ['is_oob_ratio', 'loss'], per_microbatch[0] has ['loss']: "
        "all microbatches must come from the same LossConfig"
    )
