"""The golden manifest: digests, schema per file, format version, and refusal of changed goldens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.json_input import InputError
from compactsim.harness.golden.export import write_golden
from compactsim.harness.golden.manifest import (
    FORMAT_VERSION,
    MANIFEST,
    GoldenFiles,
    Manifest,
    ScenarioEntry,
    build_manifest,
    check_files,
    check_relative_path,
    file_schema,
    read_manifest,
)
from compactsim.harness.golden.schema import validator

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def entry(name: str = "toy", flavours: tuple[str, ...] = ("gym-0.7.0-transport",)) -> ScenarioEntry:
    return ScenarioEntry(name=name, purpose="p", tags=("t",), seed=3, verdict="success", error=None, steps=1,
                         contract_flavours=flavours)


def files() -> dict[str, bytes]:
    return {
        "scenarios/toy/scenario.json": b"abc",
        "scenarios/toy/expectation.json": b"{}\n",
        "scenarios/toy/payloads/step-0000/group-0.jsonl": b"",
        "scenarios/toy/rows/step-0000.jsonl": b"\n",
    }


def manifest() -> Manifest:
    return build_manifest(files(), [entry(), entry("two", ("gym-pr2870", "gym-0.7.0-transport"))], seed=3,
                          max_steps=None, selection=["toy"], version="9.9.9")


def test_manifest_lists_files_in_path_order_with_sha256_and_schema():
    m = manifest()
    assert [f.path for f in m.files] == sorted(files())
    scenario_json = next(f for f in m.files if f.path.endswith("scenario.json"))
    assert (scenario_json.sha256, scenario_json.bytes, scenario_json.schema) == (ABC_SHA256, 3, "scenario")
    assert [f.schema for f in m.files] == ["expectation", "payload", "expected-rows", "scenario"]
    assert m.contract_flavours == ("gym-0.7.0-transport", "gym-pr2870")


def test_manifest_json_matches_its_schema_and_round_trips():
    data = manifest().to_json()
    assert list(validator("manifest").iter_errors(data)) == []
    assert data["format"] == "compactsim-golden" and data["format_version"] == FORMAT_VERSION
    assert data["gym"] == {"producer": "compactsim-emitter", "contract_flavours": ["gym-0.7.0-transport", "gym-pr2870"]}
    assert data["scenarios"][0]["directory"] == "scenarios/toy"
    assert Manifest.from_json(data) == manifest()


def test_file_schema_refuses_a_file_no_schema_describes():
    with pytest.raises(ConfigError, match="not a golden file"):
        file_schema("scenarios/toy/notes.txt")


def test_golden_directory_round_trips_and_detects_a_changed_file(tmp_path: Path):
    out = tmp_path / "g"
    write_golden(out, files(), manifest())
    m = read_manifest(out)
    assert m == manifest()
    check_files(out, m)
    (out / "scenarios/toy/scenario.json").write_bytes(b"abd")
    (out / "scenarios/toy/rows/step-0000.jsonl").unlink()
    with pytest.raises(ConfigError) as info:
        check_files(out, m)
    assert info.value.violations == (
        "scenarios/toy/rows/step-0000.jsonl: missing",
        f"scenarios/toy/scenario.json: sha256 a52d159f262b2c6d… differs from the manifest's {ABC_SHA256[:16]}…",
    )
    assert "2 golden file(s) differ from manifest.json" in str(info.value)


def test_read_manifest_refuses_a_directory_without_one(tmp_path: Path):
    with pytest.raises(ConfigError, match="not a golden directory"):
        read_manifest(tmp_path)


def test_read_manifest_refuses_another_format_version(tmp_path: Path):
    data = manifest().to_json() | {"format_version": FORMAT_VERSION + 1}
    (tmp_path / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ConfigError) as info:
        read_manifest(tmp_path)
    assert info.value.code == "unsupported_config"
    assert f"golden format_version {FORMAT_VERSION + 1}" in info.value.detail


def test_read_manifest_names_the_invalid_field(tmp_path: Path):
    data = manifest().to_json()
    data["files"][0]["sha256"] = "xyz"
    (tmp_path / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="not a valid golden manifest at files/0/sha256"):
        read_manifest(tmp_path)


def test_write_golden_replaces_a_previous_export_and_keeps_other_files_out(tmp_path: Path):
    out = tmp_path / "g"
    write_golden(out, files(), manifest())
    smaller = {"scenarios/toy/scenario.json": b"abc"}
    write_golden(out, smaller, build_manifest(smaller, [entry()], seed=3, max_steps=None, selection=[], version="1"))
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "manifest.json", "scenarios/toy/scenario.json"]


def test_write_golden_refuses_a_non_empty_directory_that_is_not_a_golden_one(tmp_path: Path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="non-empty directory without a golden manifest.json"):
        write_golden(tmp_path, files(), manifest())
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("path", ["scenarios/toy/rows/step-0000.jsonl", "scenarios/a_b-1/payloads/step-0000/group-0.jsonl"])
def test_check_relative_path_accepts_what_export_writes(path: str):
    assert check_relative_path(path, "m.json", "files[0].path") == path


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../b", "./a", "a//b", "a/", "", ".hidden", "a\\b", "C:x",
                                  "x\ud800", "a b", 5, None])
def test_check_relative_path_refuses_anything_that_could_leave_the_directory(path: object):
    with pytest.raises(InputError) as info:
        check_relative_path(path, "m.json", "files[0].path")
    assert info.value.field == "files[0].path" and "is not a relative path" in info.value.problem


@pytest.mark.parametrize(("field", "edit"), [
    ("files[0].path", lambda d: d["files"][0].update(path="../outside.json")),
    ("files[1].path", lambda d: d["files"][1].update(path=d["files"][0]["path"])),
    ("scenarios[0].name", lambda d: d["scenarios"][0].update(name="../toy")),
    ("scenarios[1].name", lambda d: d["scenarios"][1].update(name="toy", directory="scenarios/toy")),
    ("scenarios[0].directory", lambda d: d["scenarios"][0].update(directory="scenarios/two")),
])
def test_read_manifest_refuses_names_and_paths_the_reader_could_not_safely_join(tmp_path: Path, field: str, edit):
    data = manifest().to_json()
    edit(data)
    (tmp_path / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        read_manifest(tmp_path)
    assert info.value.field == field and info.value.source == str(tmp_path / MANIFEST)


def test_golden_files_reads_only_listed_unchanged_regular_files_inside_the_directory(tmp_path: Path):
    out = tmp_path / "g"
    write_golden(out, files(), manifest())
    reader = GoldenFiles(out, read_manifest(out))
    assert reader.read_bytes("scenarios/toy/scenario.json") == b"abc"
    (out / "scenarios/toy/extra.json").write_text("{}")
    with pytest.raises(InputError, match="not listed in manifest.json files"):
        reader.read_bytes("scenarios/toy/extra.json")
    (out / "scenarios/toy/scenario.json").write_bytes(b"abcd")
    with pytest.raises(InputError, match="4 bytes differ from the manifest's 3 bytes"):
        reader.read_bytes("scenarios/toy/scenario.json")
    (tmp_path / "outside.json").write_bytes(b"abc")
    (out / "scenarios/toy/scenario.json").unlink()
    (out / "scenarios/toy/scenario.json").symlink_to(tmp_path / "outside.json")
    with pytest.raises(InputError, match="symlink leading outside the golden directory"):
        reader.read_bytes("scenarios/toy/scenario.json")
    (out / "scenarios/toy/scenario.json").unlink()
    (out / "scenarios/toy/scenario.json").mkdir()
    with pytest.raises(InputError, match="is not a regular file"):
        reader.read_bytes("scenarios/toy/scenario.json")
