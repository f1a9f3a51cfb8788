"""What a suite run produced, per scenario, as plain data: the runner fills it, the report formats it.

`ScenarioRecord.to_json()` is the deterministic part (it goes into `summary.json`); wall-clock
seconds and stage shares are kept apart (`timings.json`) so two runs with the same seed write
byte-identical summaries on any executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compactsim.harness.audit import Finding, ObservedError
from compactsim.harness.audit.findings import json_value


@dataclass(frozen=True, slots=True)
class TokenSpan:
    """A run of consecutive row positions with the same classes (`prompt`, `sampled`, `boundary`, ...)."""

    start: int
    end: int
    classes: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class RowView:
    """One physical row of a logical rollout, as coloured token spans, with its image history."""

    row_index: int
    physical_trace_id: str | None
    trace_index: int
    length: int
    spans: tuple[TokenSpan, ...]
    media_ids: tuple[str, ...]
    pixel_digests: tuple[str, ...]
    #: Row positions whose replayed route is the all -1 sentinel.
    sentinel_positions: tuple[int, ...]
    #: Positions flagged by an audit finding for this row.
    flagged_positions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RolloutView:
    """A logical rollout of one step: its rows in trace order (padding rows: `rollout_id` None)."""

    step: int
    rollout_id: str | None
    reward: float | None
    advantage: float | None
    rows: tuple[RowView, ...]


@dataclass(frozen=True, slots=True)
class ScenarioRecord:
    """One scenario's outcome in a suite run."""

    name: str
    purpose: str
    tags: tuple[str, ...]
    flavour: str
    seed: int
    #: "success" or "error:<code>", what the scenario must produce and what the run produced.
    expected: str
    observed: str
    passed: bool
    steps: int
    rows: int
    tokens: int
    findings: tuple[Finding, ...]
    reproduce: str
    error: ObservedError | None = None
    #: Per-step metrics in step order (no timings).
    step_metrics: tuple[Mapping[str, float | int], ...] = ()
    #: Directory of this scenario's artifacts, relative to the run's output directory.
    artifacts: str | None = None
    #: Trace views of selected steps (the first one, and any with findings).
    traces: tuple[RolloutView, ...] = field(default=(), repr=False)
    #: media id → data URL, for thumbnails in the report (not in summary.json).
    media_urls: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Wall-clock seconds in total and per stage (not in summary.json).
    seconds: float = 0.0
    stage_seconds: Mapping[str, float] = field(default_factory=dict)
    #: The mock server's mode ("scripted" or "policy"); None when unknown. Decides which metrics the
    #: report draws (not in summary.json).
    mode: str | None = None

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "FAIL"

    @property
    def outcome(self) -> str:
        """One line for a failure's headline: expected, observed and the finding count.

        A scenario whose own ``expect`` disagrees with the oracle fails even when the run produced
        what the oracle expects; the line then leads with what the scenario declares, so that
        "expected X, observed X" never reads like a pass.
        """
        declared = next((f.actual for f in self.findings if f.check == "scenario.declared_verdict"), None)
        lead = f"the scenario declares {declared}, the oracle expects {self.expected}" if declared is not None \
            else f"expected {self.expected}"
        return f"{lead}, observed {self.observed}, {len(self.findings)} finding(s)"

    def to_json(self) -> dict[str, Any]:
        """The deterministic summary entry (stable keys, sorted by json.dumps)."""
        return {
            "name": self.name,
            "purpose": self.purpose,
            "tags": list(self.tags),
            "contract_flavour": self.flavour,
            "seed": self.seed,
            "expected": self.expected,
            "observed": self.observed,
            "verdict": self.verdict,
            "passed": self.passed,
            "steps": self.steps,
            "rows": self.rows,
            "tokens": self.tokens,
            "error": None if self.error is None else self.error.to_json(),
            "findings": [f.to_json() for f in self.findings],
            "reproduce": self.reproduce,
            "artifacts": self.artifacts,
            "metrics": [{k: json_value(v) for k, v in sorted(m.items())} for m in self.step_metrics],
        }


@dataclass(frozen=True, slots=True)
class SuiteRecord:
    """A whole `compactsim run`: its settings, versions and every scenario's record, in run order."""

    seed: int | None
    backend: str
    device: str
    selection: tuple[str, ...]
    versions: Mapping[str, Any]
    gym: Mapping[str, Any]
    scenarios: tuple[ScenarioRecord, ...]

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.scenarios)


__all__ = ["RolloutView", "RowView", "ScenarioRecord", "SuiteRecord", "TokenSpan"]
