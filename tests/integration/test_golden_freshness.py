"""`compactsim export --check DIR`: committed goldens compared with a fresh export of their own definitions.

The manifest's digests stop accidents, not an edit that recomputes them: these tests make such
edits to a copy of one real export (re-hashing the manifest, as a forger or a hand-fixed merge
would), show that `verify` still passes on some of them, and that `--check` names each one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.golden.freshness import Difference, compare_manifests
from compactsim.harness.golden.manifest import Manifest
from tests.integration.golden_edits import export_one_step, invoke, manifest, rehash

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

NAME = "scripted-three-steps"
SCEN = f"scenarios/{NAME}"
EXPECTATION = f"{SCEN}/expectation.json"
PAYLOAD = f"{SCEN}/payloads/step-0000/group-0.jsonl"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(golden dir, the reference pipeline's rows dump) of a one-step export with a metric expectation."""
    return export_one_step(tmp_path_factory.mktemp("freshness"), NAME, 3, "--parallel", "1")


@pytest.fixture
def golden(exported: tuple[Path, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(exported[0], tmp_path / "g"))


def _check(golden: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = invoke("export", "--check", str(golden), "--json", "--parallel", "1", *extra)
    return result.exit_code, json.loads(result.stdout)


def _verify(golden: Path, ref: Path) -> int:
    return invoke("verify", str(golden), str(ref / "rows.jsonl"), "--metrics", str(ref / "metrics.jsonl")).exit_code


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_fresh_export_is_current_and_nothing_in_it_is_written(golden: Path):
    before = _snapshot(golden)
    result = invoke("export", "--check", str(golden), "--parallel", "1")
    assert result.exit_code == 0, result.output
    assert f"are current: all {len(manifest(golden)['files'])} files of 1 scenario(s)" in " ".join(result.output.split())
    assert _snapshot(golden) == before


def test_a_removed_metric_expectation_verifies_but_is_named_by_check(golden: Path, exported: tuple[Path, Path]):
    doc = json.loads((golden / EXPECTATION).read_text())
    declared = [e["metric"] for e in doc["metric_expectations"]] + [
        e["metric"] for st in doc["steps"] for e in st["metric_expectations"]]
    assert "physical_trace_training/optimizer_steps" in declared
    doc["metric_expectations"] = []
    for st in doc["steps"]:
        st["metric_expectations"] = []
    (golden / EXPECTATION).write_text(json.dumps(doc, indent=2))
    rehash(golden)
    assert _verify(golden, exported[1]) == 0  # the dump is no longer held to the expectation: only re-deriving sees it
    code, report = _check(golden)
    assert code == 1 and report["current"] is False
    assert [(d["kind"], d["path"]) for d in report["differences"]] == [("changed", EXPECTATION)]
    assert report["export_again"] == ["compactsim", "export", NAME, "--seed", "3", "--steps", "1", "--out", str(golden)]


def test_an_edited_payload_and_an_older_version_are_each_named(golden: Path):
    lines = [json.loads(line) for line in (golden / PAYLOAD).read_text().splitlines()]
    lines[0]["response"]["model"] = "edited"  # a field the rows do not depend on
    (golden / PAYLOAD).write_text("".join(json.dumps(line) + "\n" for line in lines))
    rehash(golden, compactsim_version="0.0.1")
    code, report = _check(golden)
    fresh = manifest(golden)
    assert code == 1
    assert [(d["kind"], d["path"], d["committed"]) for d in report["differences"]] == [
        ("changed", PAYLOAD, next(f["sha256"] for f in fresh["files"] if f["path"] == PAYLOAD)),
        ("field", "compactsim_version", "0.0.1")]


def test_the_table_lists_each_difference_and_the_command_that_exports_again(golden: Path):
    rehash(golden, compactsim_version="0.0.1")
    result = invoke("export", "--check", str(golden), "--parallel", "1")
    text = " ".join(result.output.split())
    assert result.exit_code == 1
    assert "compactsim_version" in text and "0.0.1" in text
    assert f"1 difference(s); to export them again: compactsim export {NAME} --seed 3 --steps 1 --out {golden}" in text


@pytest.mark.parametrize("extra", [["--seed", "0"], ["--steps", "2"], ["--out", "elsewhere"], [NAME],
                                   ["--reference-dump", "ref"]])
def test_check_takes_everything_from_themanifest(extra: list[str], golden: Path):
    code, report = _check(golden, *extra)
    assert code == 2 and (report["error_code"], report["option"]) == ("invalid_argument", "--check")
    assert "writes nothing; drop " in report["message"]


def test_a_directory_that_is_not_goldens_exits_2(tmp_path: Path):
    code, report = _check(tmp_path)
    assert code == 2 and "manifest.json" in json.dumps(report)


def _listing(*files: tuple[str, str], version: str = "0.1.0") -> Manifest:
    return Manifest.from_json({
        "format": "compactsim-golden", "format_version": 1, "compactsim_version": version, "seed": None,
        "max_steps": None, "gym": {"producer": "p", "contract_flavours": []}, "selection": [], "scenarios": [],
        "files": [{"path": p, "sha256": d, "bytes": 1, "schema": None} for p, d in files]})


def test_compare_manifests_names_changed_missing_extra_files_then_fields():
    committed = _listing(("a", "1"), ("b", "2"), ("d", "4"), version="0.0.1")
    exported = _listing(("a", "1"), ("b", "9"), ("c", "3"))
    assert compare_manifests(committed, exported) == (
        Difference("changed", "b", "2", "9"), Difference("missing", "c", None, "3"), Difference("extra", "d", "4", None),
        Difference("field", "compactsim_version", "0.0.1", "0.1.0"))
    assert compare_manifests(exported, exported) == ()
