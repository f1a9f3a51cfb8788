"""`compactsim verify` on real goldens: trainer-order parent indices, --strict, JUnit XML and Markdown."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("goldens")
    result = runner.invoke(app, ["export", "no-compaction", "--out", str(root / "g"), "--reference-dump",
                                 str(root / "ref"), "--json"])
    assert result.exit_code == 0, result.output
    return root / "g", root / "ref" / "rows.jsonl"


def _rewrite(src: Path, dst: Path, edit) -> Path:
    lines = [json.loads(ln) for ln in src.read_text().splitlines() if ln.strip()]
    dst.write_text("".join(json.dumps(edit(ln)) + "\n" for ln in lines))
    return dst


def test_reference_dump_passes_and_writes_ci_reports(exported, tmp_path: Path):
    golden, rows = exported
    result = runner.invoke(app, ["verify", str(golden), str(rows), "--strict", "--junit-xml", str(tmp_path / "v.xml"),
                                 "--markdown", str(tmp_path / "v.md")])
    assert result.exit_code == 0, result.output
    suite = ET.parse(tmp_path / "v.xml").getroot()[0]
    assert [(tc.get("classname"), tc.get("name"), tc.find("failure")) for tc in suite] == [
        ("compactsim.verify", "no-compaction", None)]
    assert (tmp_path / "v.md").read_text().startswith("### ✅ compactsim verify: 1/1 passed")


def test_swapped_parent_indices_exit_1_with_row_owner_findings(exported, tmp_path: Path):
    golden, rows = exported

    def swap(ln: dict) -> dict:
        if ln.get("step") == 0 and ln.get("parent_index") in (0, 1):
            ln["parent_index"] = 1 - ln["parent_index"]
        return ln

    bad = _rewrite(rows, tmp_path / "rows.jsonl", swap)
    result = runner.invoke(app, ["verify", str(golden), str(bad), "--junit-xml", str(tmp_path / "v.xml")])
    assert result.exit_code == 1
    owners = [ln for ln in result.stdout.splitlines() if ln.startswith("[row.owner]")]
    assert [ln.split(": parent_indices")[0] for ln in owners] == [
        "[row.owner] scenario no-compaction · step 0 · rollout s0-g0-r0 · row s0-g0-r0/trace-0",
        "[row.owner] scenario no-compaction · step 0 · rollout s0-g0-r1 · row s0-g0-r1/trace-0",
    ]
    failure = ET.parse(tmp_path / "v.xml").getroot()[0][0].find("failure")
    assert failure is not None and failure.get("message").endswith("finding(s) against the goldens")
    assert failure.text.count("[row.owner]") == 2


def test_omitted_optional_field_is_a_note_and_under_strict_a_finding(exported, tmp_path: Path):
    golden, rows = exported
    bare = _rewrite(rows, tmp_path / "rows.jsonl", lambda ln: {k: v for k, v in ln.items() if k != "trace_index"})
    result = runner.invoke(app, ["verify", str(golden), str(bare)])
    assert result.exit_code == 0, result.output
    assert "note: no-compaction: not checked (absent from the dump): trace_index (" in " ".join(result.stderr.split())
    strict = runner.invoke(app, ["verify", str(golden), str(bare), "--strict"])
    assert strict.exit_code == 1
    findings = [ln for ln in strict.stdout.splitlines() if ln.startswith("[row.trace_index]")]
    assert findings and all("trace_index is absent from the dump for the row; --strict requires every optional "
                            "field" in ln for ln in findings)
    assert "not checked" not in strict.stderr


def test_a_finding_with_a_surrogate_trace_id_prints_it_escaped(exported, tmp_path: Path):
    """A dump's ids are user input: a lone surrogate is printed as a backslash escape (valid UTF-8), not a crash."""
    golden, rows = exported
    seen = []

    def edit(line: dict) -> dict:
        if line.get("physical_trace_id") and not seen:
            seen.append(line["physical_trace_id"])
            return {**line, "physical_trace_id": "x\ud800"}
        return line

    result = runner.invoke(app, ["verify", str(golden), str(_rewrite(rows, tmp_path / "rows.jsonl", edit))])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "x\\ud800" in result.stdout_bytes.decode("utf-8")
