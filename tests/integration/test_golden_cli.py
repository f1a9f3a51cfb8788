"""`compactsim export | verify | schema` smoke tests at the smallest budget, with exact outputs and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.golden.schema import load_schema

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

#: A policy-mode scenario (trained metrics, a token_mult_prob_error expectation) and a refused one.
SCENARIOS = ("policy-no-compaction", "legacy-token-merge-drift")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(golden dir, reference dump dir) written by `compactsim export ... --reference-dump`."""
    base = tmp_path_factory.mktemp("cli")
    result = invoke("export", *SCENARIOS, "--seed", "4", "--out", str(base / "g"), "--reference-dump", str(base / "ref"))
    assert result.exit_code == 0, result.output
    assert "wrote 7 files" in result.output and "for 2 scenario(s)" in result.output
    return base / "g", base / "ref"


def test_export_writes_goldens_and_a_reference_dump(exported):
    golden, ref = exported
    manifest = json.loads((golden / "manifest.json").read_text())
    assert [(s["name"], s["verdict"]) for s in manifest["scenarios"]] == [
        ("policy-no-compaction", "success"), ("legacy-token-merge-drift", "error")]
    assert manifest["gym"]["contract_flavours"] == ["gym-0.7.0-transport", "none"]
    rows = [json.loads(x) for x in (ref / "rows.jsonl").read_text().splitlines()]
    assert [r.get("error", {}).get("code") for r in rows if r["scenario"] == "legacy-token-merge-drift"] == [
        "undeclared_discontinuity"]
    metrics = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    assert [(m["scenario"], m["step"]) for m in metrics] == [("policy-no-compaction", 0)]
    assert abs(metrics[0]["metrics"]["token_mult_prob_error"] - 1.0) <= 1e-9


def test_verify_passes_the_reference_dump_with_trained_metrics(exported):
    golden, ref = exported
    result = invoke("verify", str(golden), str(ref / "rows.jsonl"), "--metrics", str(ref / "metrics.jsonl"))
    assert result.exit_code == 0, result.output
    assert "2/2 scenarios match the goldens · 0 finding(s) · 2 rows," in result.output


def test_verify_prints_each_finding_with_its_location_and_exits_1(exported, tmp_path: Path):
    golden, ref = exported
    rows = [json.loads(x) for x in (ref / "rows.jsonl").read_text().splitlines()]
    target = next(r for r in rows if r.get("physical_trace_id") == "s0-g0-r1/trace-0")
    target["advantages"][target["token_mask"].index(1)] = 9.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
    result = invoke("verify", str(golden), str(bad))
    assert result.exit_code == 1, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("[row.advantage]"))
    assert line.startswith("[row.advantage] scenario policy-no-compaction · step 0 · rollout s0-g0-r1 · "
                           "row s0-g0-r1/trace-0 · token ")
    assert "actual 9.0" in line and "expected -" in result.output
    assert f"reproduce: compactsim verify {golden} {bad} --scenario policy-no-compaction" in result.output
    assert "1/2 scenarios match the goldens · 1 finding(s)" in result.output


def test_verify_json_reports_findings_for_machines(exported, tmp_path: Path):
    golden, ref = exported
    rows = [json.loads(x) for x in (ref / "rows.jsonl").read_text().splitlines()]
    rows[0]["media_ids"] = ["media-forged"] + rows[0]["media_ids"][1:]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = invoke("verify", str(golden), str(bad), "--scenario", "policy-no-compaction", "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert (data["passed"], data["findings"], [s["scenario"] for s in data["scenarios"]]) == (
        False, 1, ["policy-no-compaction"])
    finding = data["scenarios"][0]["findings"][0]
    assert (finding["check"], finding["row"], finding["position"], finding["dump_lines"]) == (
        "row.media", rows[0]["physical_trace_id"], 0, [1])


def test_verify_malformed_dump_exits_2_naming_line_and_field(exported, tmp_path: Path):
    golden, ref = exported
    lines = (ref / "rows.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    broken["input_ids"][3] = -4
    lines[1] = json.dumps(broken)
    bad = tmp_path / "rows.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = invoke("verify", str(golden), str(bad))
    assert result.exit_code == 2
    assert f"{bad}:2: field input_ids[3]:" in result.output
    as_json = invoke("verify", str(golden), str(bad), "--json")
    assert as_json.exit_code == 2
    assert {k: v for k, v in json.loads(as_json.output).items() if k != "message"} == {
        "error_code": "invalid_argument", "file": str(bad), "line": 2, "column": None, "field": "input_ids[3]"}


def test_verify_refuses_edited_goldens_and_non_golden_directories(exported, tmp_path: Path):
    golden, ref = exported
    result = invoke("verify", str(tmp_path), str(ref / "rows.jsonl"))
    assert result.exit_code == 2 and "not a golden directory" in result.output
    edited = tmp_path / "edited"
    edited.mkdir()
    for p in golden.rglob("*"):
        if p.is_file():
            dest = edited / p.relative_to(golden)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
    expectation = edited / "scenarios/policy-no-compaction/expectation.json"
    expectation.write_text(expectation.read_text().replace('"seed": 4', '"seed": 5', 1))
    result = invoke("verify", str(edited), str(ref / "rows.jsonl"))
    assert result.exit_code == 2
    assert "1 golden file(s) differ from manifest.json" in result.output


def test_verify_bad_dtype_is_a_usage_error(exported):
    golden, ref = exported
    result = invoke("verify", str(golden), str(ref / "rows.jsonl"), "--dtype", "float16")
    assert result.exit_code == 2 and "--dtype float16: expected one of float64, float32, bfloat16" in result.output


def test_export_unknown_scenario_is_a_usage_error(tmp_path: Path):
    result = invoke("export", "no-such-scenario", "--out", str(tmp_path / "g"))
    assert result.exit_code == 2 and "no scenario or tag 'no-such-scenario'" in result.output
    assert not (tmp_path / "g").exists()


def test_schema_prints_the_rows_dump_schema_exactly():
    result = invoke("schema", "rows-dump")
    assert result.exit_code == 0
    assert json.loads(result.output) == load_schema("rows-dump")


def test_schema_lists_names_and_refuses_unknown_ones():
    listed = invoke("schema")
    assert listed.exit_code == 0
    assert all(name in listed.output for name in ("rows-dump", "metrics-dump", "manifest", "expected-rows"))
    unknown = invoke("schema", "rows")
    assert unknown.exit_code == 2 and "unknown schema 'rows'" in unknown.output


def test_a_metrics_line_for_a_step_the_goldens_lack_is_a_finding(exported, tmp_path: Path):
    """It was ignored: 'match', exit 0, while a row at such a step is a steps.count finding (CLI probe)."""
    golden, ref = exported
    lines = (ref / "metrics.jsonl").read_text().splitlines()
    extra = {**json.loads(lines[0]), "step": 7, "metrics": {"lr": 123.0}}
    metrics = tmp_path / "m.jsonl"
    metrics.write_text("\n".join(lines) + "\n" + json.dumps(extra) + "\n")
    result = invoke("verify", str(golden), str(ref / "rows.jsonl"), "--metrics", str(metrics), "--json")
    assert result.exit_code == 1, result.output
    [scenario] = [s for s in json.loads(result.output)["scenarios"] if s["findings"]]
    assert [(f["check"], f["step"], f["message"]) for f in scenario["findings"]] == [
        ("steps.count", 7, f"the metrics dump has a line for step 7 ({metrics} line 2); the goldens have 1 step(s): 0")]


def test_a_scenario_named_twice_is_checked_once(exported):
    golden, ref = exported
    result = invoke("verify", str(golden), str(ref / "rows.jsonl"), "--scenario", "policy-no-compaction",
                    "--scenario", "policy-no-compaction")
    assert result.exit_code == 0, result.output
    assert "1/1 scenarios match the goldens · 0 finding(s) · 2 rows," in result.output
