"""Suite records built from the audit fixture (one corrupted token), for report tests."""

from __future__ import annotations

import base64
import io
from dataclasses import replace

from compactsim.harness.audit import audit_run, observed_from_artifact
from compactsim.harness.report import ScenarioRecord, SuiteRecord, rollout_views
from tests.unit.audit.audit_builders import artifact, edit, expectation, run_of

GYM = {"producer": "compactsim-emitter", "contract_flavour": "gym-0.7.0-transport", "revision": None, "verdict": None,
       "flavours": ["gym-0.7.0-transport"]}
VERSIONS = {"compactsim": "0.1.0", "python": "3.11.7", "torch": "2.13.0"}


def png_data_url(width: int = 8, height: int = 6) -> str:
    """A small PNG that decodes (a colour gradient), as a data URL like the runner's thumbnails."""
    from PIL import Image

    img = Image.new("RGB", (width, height))
    img.putdata([(40 * x % 256, 50 * y % 256, 128) for y in range(height) for x in range(width)])
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def record(*, broken: bool = True, steps: int = 2, mode: str | None = None, name: str = "audit-fixture") -> ScenarioRecord:
    """One scenario's record: the fixture's step repeated `steps` times, failing when `broken`."""
    a = edit(artifact(), "row_input_ids", (0, 5), 99) if broken else artifact()
    report = audit_run(expectation(1), run_of(a))
    step = observed_from_artifact(a)
    return ScenarioRecord(
        name=name, purpose="Two rollouts, one compacted.", tags=("fixture",), flavour="gym-0.7.0-transport",
        seed=7, expected=report.expected, observed=report.observed, passed=report.passed, steps=steps, rows=3,
        tokens=36, findings=report.findings, reproduce=report.reproduce.replace("audit-fixture", name),
        step_metrics=tuple(dict(step.metrics) for _ in range(steps)), artifacts=f"scenarios/{name}",
        traces=rollout_views(step, report.findings), media_urls={"m1": png_data_url()}, seconds=1.25,
        stage_seconds={"train": 1.0}, mode=mode,
    )


def suite(*, broken: bool = True) -> SuiteRecord:
    """A one-scenario suite (the fixture over two steps)."""
    return SuiteRecord(seed=7, backend="compactsim.harness.pipeline:ReferenceBackend", device="cpu", selection=("audit-fixture",),
                       versions=VERSIONS, gym=GYM, scenarios=(record(broken=broken),))


def mixed_suite() -> SuiteRecord:
    """A passing one-step policy scenario first, then a failing two-step scripted one."""
    ok = record(broken=False, steps=1, mode="policy", name="passing-one-step")
    bad = record(broken=True, steps=2, mode="scripted", name="failing-two-steps")
    return replace(suite(), selection=(ok.name, bad.name), scenarios=(ok, bad))
