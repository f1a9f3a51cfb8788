"""A suite record built from the audit fixture (one corrupted token), for report tests."""

from __future__ import annotations

from harness.audit import audit_run, observed_from_artifact
from harness.report import ScenarioRecord, SuiteRecord, rollout_views
from tests.unit.audit.audit_builders import artifact, edit, expectation, run_of

GYM = {"producer": "compactsim-emitter", "contract_flavour": "gym-0.7.0-transport", "revision": None, "verdict": None,
       "flavours": ["gym-0.7.0-transport"]}
VERSIONS = {"compactsim": "0.1.0", "python": "3.11.7", "torch": "2.13.0"}


def suite(*, broken: bool = True) -> SuiteRecord:
    a = edit(artifact(), "row_input_ids", (0, 5), 99) if broken else artifact()
    report = audit_run(expectation(1), run_of(a))
    step = observed_from_artifact(a)
    record = ScenarioRecord(
        name="audit-fixture", purpose="Two rollouts, one compacted.", tags=("fixture",), flavour="gym-0.7.0-transport",
        seed=7, expected=report.expected, observed=report.observed, passed=report.passed, steps=1, rows=3, tokens=36,
        findings=report.findings, reproduce=report.reproduce, step_metrics=(dict(step.metrics), dict(step.metrics)),
        artifacts="scenarios/audit-fixture", traces=rollout_views(step, report.findings),
        media_urls={"m1": "data:image/png;base64,iVBORw0KGgo="}, seconds=1.25, stage_seconds={"train": 1.0},
    )
    return SuiteRecord(seed=7, backend="harness.pipeline:ReferenceBackend", device="cpu", selection=("audit-fixture",),
                       versions=VERSIONS, gym=GYM, scenarios=(record,))
