"""What a scenario's W&B run holds: settings, metric names in NeMo-RL's namespaces, and its summary.

NeMo-RL logs trainer metrics with the prefix ``train/`` (``train/loss``, ``train/grad_norm``,
``train/token_mult_prob_error``, ``train/advantages/mean``, ...). compactsim's flat keys get that
prefix here; keys already in a namespace (``physical_trace_training/...``, the reference PR's
dashboard keys; ``train/...``; ``async/...``; ``timing/...``) are logged unchanged. Pure functions:
`compactsim.harness.runner` does the logging.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.report.records import ScenarioRecord

#: Namespaces kept as they are; every other key is a trainer metric and goes under `train/`.
KEPT_NAMESPACES: tuple[str, ...] = ("physical_trace_training/", "train/", "async/", "timing/", "validation/")
DEFAULT_PROJECT = "compactsim"
#: W&B's own limit on a tag's length.
MAX_TAG_CHARS = 64
#: W&B refuses project names longer than this or holding one of these characters (wandb_settings.validate_project),
#: only when the run starts: checked before any scenario runs instead.
MAX_PROJECT_CHARS = 128
PROJECT_FORBIDDEN = "/\\#?%:"


@dataclass(frozen=True, slots=True)
class WandbSettings:
    """Where and how scenario runs are logged (always offline: `wandb sync` uploads them later)."""

    project: str = DEFAULT_PROJECT
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    #: Directory that receives ``wandb/offline-run-*`` (the run's output directory).
    directory: str | None = None

    def __post_init__(self) -> None:
        if not self.project.strip():
            raise ConfigError("invalid_argument", "--wandb-project '': a project name must not be empty")
        bad = sorted(set(self.project) & set(PROJECT_FORBIDDEN))
        if bad or len(self.project) > MAX_PROJECT_CHARS:
            raise ConfigError("invalid_argument", f"--wandb-project {self.project[:140]!r}: W&B project names have at "
                                                  f"most {MAX_PROJECT_CHARS} characters and none of "
                                                  f"{' '.join(PROJECT_FORBIDDEN)}" + (f" (found {' '.join(bad)})" if bad else ""))
        for option, value in (("--wandb-entity", self.entity), ("--wandb-group", self.group)):
            if value is not None and not value.strip():  # `--wandb-group "$UNSET"`: say so, never log elsewhere
                raise ConfigError("invalid_argument", f"{option} {value!r}: must not be empty (leave the option out "
                                                      "for W&B's default)")
        for tag in self.tags:
            if not tag.strip() or len(tag) > MAX_TAG_CHARS:
                raise ConfigError("invalid_argument", f"--wandb-tag {tag!r}: a tag must have 1 to {MAX_TAG_CHARS} "
                                                      "characters")


def wandb_key(key: str) -> str:
    """The W&B name of a metric key: unchanged when namespaced as NeMo-RL or the PR logs it, else ``train/<key>``."""
    return key if key.startswith(KEPT_NAMESPACES) else "train/" + key


def wandb_step_metrics(metrics: Mapping[str, Any]) -> dict[str, float | int]:
    """One step's finite numeric metrics under their W&B names (booleans, strings and NaN/inf left out)."""
    out: dict[str, float | int] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        out[wandb_key(key)] = value
    return out


def wandb_summary(record: ScenarioRecord) -> dict[str, Any]:
    """The run summary: verdict, expected and observed outcome, finding counts (total and per check), sizes."""
    per_check = Counter(f.check for f in record.findings)
    return {
        "verdict": record.verdict,
        "passed": record.passed,
        "expected": record.expected,
        "observed": record.observed,
        "findings": len(record.findings),
        **{f"findings/{check}": n for check, n in sorted(per_check.items())},
        "steps": record.steps,
        "rows": record.rows,
        "tokens": record.tokens,
        "seed": record.seed,
        "reproduce": record.reproduce,
    }


def wandb_run_name(record: ScenarioRecord) -> str:
    """``<scenario>-seed<N>``."""
    return f"{record.name}-seed{record.seed}"


def wandb_tags(settings: WandbSettings, record: ScenarioRecord) -> list[str]:
    """The user's tags, then the scenario's catalogue tags, each once (W&B's length limit applied)."""
    tags: list[str] = []
    for tag in (*settings.tags, *record.tags):
        if tag not in tags and 0 < len(tag) <= MAX_TAG_CHARS:
            tags.append(tag)
    return tags


def wandb_steps(record: ScenarioRecord) -> Sequence[dict[str, float | int]]:
    """Every step's metrics under their W&B names, in step order (step k is logged at W&B step k)."""
    return [wandb_step_metrics(m) for m in record.step_metrics]


__all__ = [
    "DEFAULT_PROJECT",
    "KEPT_NAMESPACES",
    "MAX_TAG_CHARS",
    "WandbSettings",
    "wandb_key",
    "wandb_run_name",
    "wandb_step_metrics",
    "wandb_steps",
    "wandb_summary",
    "wandb_tags",
]
