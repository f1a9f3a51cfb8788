"""The reference dump refuses what compactsim's trainer refuses before training, so it verifies clean.

`routes-not-recorded` (router replay on, no routes) and `sequence-too-long` are refused inside the
trainer's step, not by planning or materializing; `backend_dump` trains nothing and runs the
backend's `check_batch` for them.
"""

from __future__ import annotations

import pytest

from compactsim.harness.golden import backend_dump, export_goldens, format_dump, parse_rows_dump, read_golden, verify_dump
from compactsim.harness.pipeline import ReferenceBackend
from compactsim.harness.runner import resolve_scenarios

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SELECTION = ["routes-not-recorded", "sequence-too-long"]


class TrainTimeChecksOmitted(ReferenceBackend):
    """The reference pipeline without its optional `check_batch`: what any Backend offers."""

    check_batch = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("goldens") / "g"
    export_goldens(resolve_scenarios(SELECTION), out, seed=0, max_steps=1, selection=SELECTION)
    return read_golden(out)


def test_the_reference_dump_writes_the_train_time_refusals_and_verifies_clean(golden):
    dump = backend_dump(golden)
    errors = {r["scenario"]: (r["error"]["code"], r["error"]["rollout_id"]) for r in dump.rows}
    assert errors == {"routes-not-recorded": ("missing_routed_experts", None),
                      "sequence-too-long": ("sequence_too_long", "s0-g0-r0")}
    report = verify_dump(golden, parse_rows_dump(format_dump(list(dump.rows))))
    assert report.passed, [f.message for f in report.findings]


def test_without_check_batch_those_steps_are_trained_and_verify_says_so(golden):
    dump = backend_dump(golden, backend=f"{__name__}:TrainTimeChecksOmitted")
    report = verify_dump(golden, parse_rows_dump(format_dump(list(dump.rows))))
    assert sorted(f.check for f in report.findings) == ["verdict.expected_error", "verdict.expected_error"]
