"""Goldens end to end: export → the reference pipeline's rows dump → verify; each corruption → exactly its finding.

One export of a few small catalogue scenarios (module-scoped) serves every test; a second export
of the same selection proves the bytes are identical.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.core.seeds import rng
from compactsim.harness.golden import (
    backend_dump,
    export_goldens,
    format_dump,
    parse_metrics_dump,
    parse_rows_dump,
    read_golden,
    validator,
    verify_dump,
)
from compactsim.harness.golden.rows_dump import RowsDumpError
from compactsim.harness.runner import resolve_scenarios

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SELECTION = [
    "several-boundaries-in-one-rollout",  # 7 rows per rollout, sentinels, one image per row
    "multi-group-padding",  # two groups, padding rows
    "mask-sample-rollouts",  # sample_mask 0 rows
    "scripted-three-steps",  # several steps and groups (capped to 2 steps)
    "mutation-ghost-media",  # must be refused: unknown_media_asset
    "batch-duplicate-rollout-id",  # must be refused: a result submitted twice
]
SEED = 5
STEPS = 2
ROW = "s0-g0-r0/trace-1"
SCENARIO = "several-boundaries-in-one-rollout"


def _export(out: Path, parallel: int = 1):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return export_goldens(resolve_scenarios(SELECTION), out, seed=SEED, max_steps=STEPS, selection=SELECTION,
                          parallel=parallel)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("goldens") / "g"
    return _export(out)


@pytest.fixture(scope="module")
def reference(exported) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """compactsim's own pipeline reading the golden payloads: its rows dump and batch metrics."""
    dump = backend_dump(read_golden(exported.directory))
    return [dict(r) for r in dump.rows], [dict(m) for m in dump.metrics]


def verify(exported, rows: list[dict[str, Any]], metrics: list[dict[str, Any]] | None = None):
    dump = parse_rows_dump(format_dump(rows), source="rows.jsonl")
    m = None if metrics is None else parse_metrics_dump(format_dump(metrics), source="metrics.jsonl")
    return verify_dump(read_golden(exported.directory), dump, m)


def golden_row(exported, scenario: str, trace_id: str, step: int = 0) -> dict[str, Any]:
    path = exported.directory / "scenarios" / scenario / "rows" / f"step-{step:04d}.jsonl"
    return next(json.loads(x) for x in path.read_text().splitlines() if f'"{trace_id}"' in x)


def test_export_manifest_lists_scenarios_verdicts_and_provenance(exported):
    m = exported.manifest.to_json()
    assert (m["format"], m["format_version"], m["seed"], m["max_steps"]) == ("compactsim-golden", 1, SEED, STEPS)
    assert m["gym"] == {"producer": "compactsim-emitter", "contract_flavours": ["gym-0.7.0-transport"]}
    assert m["selection"] == SELECTION
    assert [(s["name"], s["verdict"], s["steps"], s["error"] and s["error"]["code"]) for s in m["scenarios"]] == [
        ("several-boundaries-in-one-rollout", "success", 1, None),
        ("multi-group-padding", "success", 1, None),
        ("mask-sample-rollouts", "success", 1, None),
        ("scripted-three-steps", "success", 2, None),
        ("mutation-ghost-media", "error", 1, "unknown_media_asset"),
        ("batch-duplicate-rollout-id", "error", 1, "duplicate_logical_rollout_id"),
    ]
    assert all(s.reference_passed for s in exported.scenarios)


def test_export_layout_has_payloads_per_group_and_rows_per_training_step(exported):
    listed = {f.path for f in exported.manifest.files}
    three = "scenarios/scripted-three-steps"
    assert sorted(p for p in listed if p.startswith(three)) == [
        f"{three}/expectation.json",
        f"{three}/payloads/step-0000/group-0.jsonl", f"{three}/payloads/step-0000/group-1.jsonl",
        f"{three}/payloads/step-0001/group-0.jsonl", f"{three}/payloads/step-0001/group-1.jsonl",
        f"{three}/rows/step-0000.jsonl", f"{three}/rows/step-0001.jsonl",
        f"{three}/scenario.json",
    ]
    dup = "scenarios/batch-duplicate-rollout-id"
    assert sorted(p for p in listed if p.startswith(dup)) == [
        f"{dup}/expectation.json", f"{dup}/payloads/step-0000/group-0.jsonl", f"{dup}/scenario.json"]
    golden = read_golden(exported.directory)
    assert [len(g) for g in golden.get("scripted-three-steps").payload_groups(1)] == [2, 2]
    assert [len(g) for g in golden.get("batch-duplicate-rollout-id").payload_groups(0)] == [3]  # one result twice
    doc = golden.get("multi-group-padding").document["steps"][0]
    assert doc["rows"] == {"file": "rows/step-0000.jsonl", "real": 18, "padding": 2}


def test_export_expectation_holds_plans_and_expected_errors(exported):
    golden = read_golden(exported.directory, ["several-boundaries-in-one-rollout", "mutation-ghost-media"])
    plan = golden.get(SCENARIO).expectation.steps[0].rollouts[0]
    assert (plan.rollout_id, plan.path, len(plan.traces)) == ("s0-g0-r0", "physical", 7)
    assert [t.start_reason for t in plan.traces] == ["rollout_start"] + ["declared_boundary"] * 6
    refused = golden.get("mutation-ghost-media").expectation
    assert refused.error is not None and (refused.error.code, refused.error.rollout_id, refused.error.turn_id) == (
        "unknown_media_asset", "s0-g0-r1", 4)
    assert refused.steps[0].rows == ()


def test_golden_files_validate_against_the_schemas_the_manifest_names(exported):
    for f in exported.manifest.files:
        text = (exported.directory / f.path).read_text(encoding="utf-8")
        docs = [json.loads(x) for x in text.splitlines()] if f.path.endswith(".jsonl") else [json.loads(text)]
        for doc in docs:
            errors = list(validator(f.schema).iter_errors(doc))
            assert errors == [], f"{f.path}: {errors[0].message}"
    manifest = json.loads((exported.directory / "manifest.json").read_text())
    assert list(validator("manifest").iter_errors(manifest)) == []


@pytest.mark.slow
def test_export_is_byte_identical_across_two_runs_in_process_and_on_workers(exported, tmp_path: Path):
    again = _export(tmp_path / "g2", parallel=2)
    first = (exported.directory / "manifest.json").read_bytes()
    assert (again.directory / "manifest.json").read_bytes() == first
    for f in exported.manifest.files:
        assert (again.directory / f.path).read_bytes() == (exported.directory / f.path).read_bytes(), f.path


def test_reference_pipeline_dump_verifies_clean(exported, reference):
    rows, metrics = reference
    assert all(validator("rows-dump").is_valid(r) for r in rows)
    assert all(validator("metrics-dump").is_valid(m) for m in metrics)
    report = verify(exported, rows, metrics)
    assert report.findings == ()
    assert [(v.name, v.report.observed, v.report.rows_audited, dict(v.not_checked)) for v in report.scenarios] == [
        ("several-boundaries-in-one-rollout", "success", 14, {}),
        ("multi-group-padding", "success", 18, {}),
        ("mask-sample-rollouts", "success", 9, {}),
        ("scripted-three-steps", "success", 16, {}),
        ("mutation-ghost-media", "error:unknown_media_asset", 0, {}),
        ("batch-duplicate-rollout-id", "error:duplicate_logical_rollout_id", 0, {}),
    ]


def test_the_losss_counts_over_the_rows_are_held_to_the_goldens_too(exported, reference):
    """`global_valid_toks` counting the masked rollout's tokens (or padding) passed `verify` while only batch metrics were
    golden; the counts need no policy, so the goldens hold them (golden spec §14)."""
    rows, metrics = reference
    bad = copy.deepcopy(metrics)
    line = next(m for m in bad if m["scenario"] == "mask-sample-rollouts")
    right = line["metrics"]["global_valid_toks"]
    line["metrics"]["global_valid_toks"] = right + 229  # the flagged rollout's trained tokens counted
    report = verify(exported, rows, bad)
    assert [(f.scenario, f.check, f.expected, f.actual) for f in report.findings] == [
        ("mask-sample-rollouts", "metric.exact", right, right + 229)]
    assert line["metrics"]["global_valid_seqs"] == line["metrics"]["num_valid_samples"] == 6.0  # 9 rows, 3 masked


def _corrupt(rows: list[dict[str, Any]], how: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`rows` with one corruption in row ROW of SCENARIO, and that row as it was."""
    out = copy.deepcopy(rows)
    target = next(r for r in out if r["scenario"] == SCENARIO and r["physical_trace_id"] == ROW)
    before = copy.deepcopy(target)
    if how == "token":
        target["input_ids"][5] += 1
    elif how == "mask":
        target["token_mask"][2] = 1 - target["token_mask"][2]
    elif how == "advantage":
        target["advantages"][target["token_mask"].index(1)] += 0.5
    elif how == "sentinel":  # the boundary keeps vLLM's placeholder instead of the -1 sentinel
        p = target["routed_experts_sentinel_positions"][0]
        target["routed_experts"][p] = [list(range(len(layer))) for layer in target["routed_experts"][p]]
    elif how == "declared-sentinel":  # no routes in the dump: the declaration is what is checked
        del target["routed_experts"]
        target["routed_experts_sentinel_positions"] = target["routed_experts_sentinel_positions"][1:]
    elif how == "media":
        target["media_ids"][0] = "media-forged"
    elif how == "route":
        target["routed_experts"][5][1][0] += 1  # another expert in layer 1 at position 5
    return out, before


@pytest.mark.parametrize("how", ["token", "mask", "advantage", "sentinel", "declared-sentinel", "media", "route"])
def test_each_corruption_gives_exactly_its_finding(exported, reference, how):
    rows, metrics = reference
    corrupted, before = _corrupt(rows, how)
    want = golden_row(exported, SCENARIO, ROW)
    first_trained = before["token_mask"].index(1)
    sentinel = before["routed_experts_sentinel_positions"][0]
    expected = {
        "token": ("row.tokens", 5, want["input_ids"][5], want["input_ids"][5] + 1),
        "mask": ("row.mask", 2, 0, 1),
        "advantage": ("row.advantage", first_trained, want["rollout_advantage"], want["rollout_advantage"] + 0.5),
        "sentinel": ("row.sentinel", sentinel, -1, [list(range(len(layer))) for layer in want["routed_experts"][sentinel]]),
        "declared-sentinel": ("row.sentinel", sentinel, -1, None),
        "media": ("row.media", 0, want["media_ids"], ["media-forged", *want["media_ids"][1:]]),
        "route": ("row.route", 5, want["routed_experts"][5],
                  [want["routed_experts"][5][0], [want["routed_experts"][5][1][0] + 1, *want["routed_experts"][5][1][1:]]]),
    }[how]
    report = verify(exported, corrupted, metrics)
    assert [(f.scenario, f.step, f.check, f.row, f.position, f.expected, f.actual) for f in report.findings] == [
        (SCENARIO, 0, expected[0], ROW, expected[1], expected[2], expected[3])]
    (bad,) = [v for v in report.scenarios if not v.passed]
    assert bad.rollout(report.findings[0]) == "s0-g0-r0"


@pytest.mark.parametrize(("module", "check"), [
    ("placeholder_not_repaired", "row.route"),  # sentinels right: only the routes show it
    ("drop_boundary_sentinel", "row.sentinel"),  # declares no sentinel and replays the placeholder there
])
def test_a_broken_trainer_s_routes_are_caught_through_the_golden_files(exported, module: str, check: str):
    dump = backend_dump(read_golden(exported.directory), backend=f"tests.quality.{module}:Backend")
    report = verify(exported, [dict(r) for r in dump.rows], [dict(m) for m in dump.metrics])
    assert report.findings and {f.check for f in report.findings} == {check}
    assert all(f.position is not None for f in report.findings)


def test_row_order_never_changes_the_verdict(exported, reference):
    rows, metrics = reference
    shuffled = [rows[k] for k in rng(SEED, "test.golden.reorder").permutation(len(rows))]
    assert shuffled != rows
    assert verify(exported, shuffled, metrics).findings == ()
    corrupted, _ = _corrupt(rows, "token")
    reordered = [corrupted[k] for k in rng(SEED, "test.golden.reorder").permutation(len(rows))]
    assert [f.to_json() for f in verify(exported, reordered, metrics).findings] == [
        f.to_json() for f in verify(exported, corrupted, metrics).findings]


def test_reference_dump_refuses_the_adversarial_steps_with_their_codes(reference):
    rows, _ = reference
    errors = {r["scenario"]: r["error"]["code"] for r in rows if "error" in r}
    assert errors == {"mutation-ghost-media": "unknown_media_asset",
                      "batch-duplicate-rollout-id": "duplicate_logical_rollout_id"}


def test_malformed_dump_names_line_and_field(exported, reference):
    rows, _ = reference
    text = format_dump(rows).splitlines()
    broken = json.loads(text[2])
    broken["generation_logprobs"] = broken["generation_logprobs"][:-1]
    text[2] = json.dumps(broken)
    with pytest.raises(RowsDumpError) as info:
        parse_rows_dump("\n".join(text) + "\n", source="rows.jsonl")
    assert (info.value.line, info.value.field) == (3, "generation_logprobs")


def test_findings_say_what_to_fix_in_the_dump(exported, reference):
    """A stranger's three commonest dump mistakes get findings that name the fix, not only the symptom."""
    rows, metrics = reference
    # 1. a scenario the dump never mentions: said as such, not as "0 optimizer steps trained"
    without = [r for r in rows if r["scenario"] != "mask-sample-rollouts"]
    (f,) = verify(exported, without, metrics).findings
    assert (f.check, f.expected, f.actual) == ("steps.count", 1, 0)
    assert f.message.startswith("the dump has no line for scenario 'mask-sample-rollouts' (no row, no error line)")
    # 2. a wrong parent_index: the finding names the index the canonical order gives the row's rollout
    swapped = copy.deepcopy(rows)
    target = next(r for r in swapped if r["scenario"] == "multi-group-padding" and r["parent_index"] == 0)
    target["parent_index"] = 1
    owner = [f for f in verify(exported, swapped, metrics).findings if f.check == "row.owner"]
    assert len(owner) == 1 and owner[0].message.endswith("(logical index 0 of the batch's canonical order)")
    # 3. a refusal naming the wrong rollout where the goldens compare no turn: no "expected ... turn None"
    moved = copy.deepcopy(rows)
    err = next(r for r in moved if r["scenario"] == "batch-duplicate-rollout-id")
    err["error"]["rollout_id"] = "s0-g0-r1"
    (loc,) = verify(exported, moved, metrics).findings
    assert loc.check == "verdict.error_location"
    assert loc.message.endswith("expected rollout 's0-g0-r0' (the other location is not compared)")
    assert "None" not in loc.message.split("; expected")[1]
    # 4. a scenario that must be refused, missing from the dump: said as such, not as "the run succeeded"
    (gone,) = verify(exported, [r for r in rows if r["scenario"] != "batch-duplicate-rollout-id"], metrics).findings
    assert (gone.check, gone.actual) == ("verdict.expected_error", "success")
    assert gone.message == ("the dump has no line for scenario 'batch-duplicate-rollout-id' (no row, no error line); the "
                            "goldens expect it refused with duplicate_logical_rollout_id (rollout 's0-g0-r0', turn None)")
