"""`compactsim verify` on tampered or malformed golden directories: one typed line naming the file, exit 2.

Goldens come from elsewhere (a repository, an artifact store), so each test takes a copy of one
real export and breaks it the way a careless edit or an attacker would — often "re-hashing" the
manifest afterwards, so that only the reader's own checks stand between the edit and a passing
verify. Nothing may end in a traceback, a hang, an out-of-memory, or a silently accepted edit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.golden_edits import export_one_step, invoke, manifest, rehash, write_manifest

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

NAME = "image-compaction-k2-rolling"
SCEN = f"scenarios/{NAME}"
EXPECTATION = f"{SCEN}/expectation.json"
ROWS = f"{SCEN}/rows/step-0000.jsonl"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(golden dir, the reference pipeline's rows dump) of a one-scenario, one-step export."""
    golden, reference = export_one_step(tmp_path_factory.mktemp("hardening"), NAME, 0)
    return golden, reference / "rows.jsonl"


@pytest.fixture
def golden(exported: tuple[Path, Path], tmp_path: Path) -> Path:
    """A private copy of the export, free to break."""
    return Path(shutil.copytree(exported[0], tmp_path / "g"))


def verify(golden: Path, dump: Path) -> Any:
    return invoke("verify", str(golden), str(dump))


def assert_refused(result: Any, *fragments: str) -> None:
    """Exit 2, a one-line `error:` message holding every fragment, and no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.output.startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def test_the_untouched_copy_verifies(golden: Path, exported: tuple[Path, Path]):
    result = verify(golden, exported[1])
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------ bug 1: malformed golden files


def _set_name(golden: Path, name: str) -> None:
    data = manifest(golden)
    data["scenarios"][0]["name"] = name
    write_manifest(golden, data)


def _rewrite(path: str, content: bytes) -> Callable[[Path], None]:
    def edit(golden: Path) -> None:
        (golden / path).write_bytes(content)
        rehash(golden)
    return edit


def _rows_wrong_shape(golden: Path) -> None:
    lines = (golden / ROWS).read_text().splitlines()
    first = json.loads(lines[0])
    del first["parent_index"]
    (golden / ROWS).write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    rehash(golden)


def _rows_span_outside(golden: Path) -> None:
    lines = (golden / ROWS).read_text().splitlines()
    first = json.loads(lines[0])
    first["mask_spans"] = [[0, len(first["input_ids"]) + 5]]
    (golden / ROWS).write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    rehash(golden)


def _rows_unlisted_missing(golden: Path) -> None:
    (golden / ROWS).unlink()
    data = manifest(golden)
    data["files"] = [f for f in data["files"] if f["path"] != ROWS]
    write_manifest(golden, data)


def _scenario_dir_missing(golden: Path) -> None:
    data = manifest(golden)
    data["scenarios"].append(dict(data["scenarios"][0], name="ghost", directory="scenarios/ghost"))
    write_manifest(golden, data)


MALFORMED: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "manifest_deep": (lambda g: (g / "manifest.json").write_text("[" * 5000 + "]" * 5000),
                      ("manifest.json:1:65", "nested deeper than 64 levels")),
    "manifest_surrogate_name": (lambda g: _set_name(g, "x\ud800"),
                                ("manifest.json: field scenarios[0].name", "is not a relative path")),
    "expect_deep_rehash": (_rewrite(EXPECTATION, b"[" * 5000 + b"]" * 5000),
                           ("expectation.json:1:65", "nested deeper than 64 levels")),
    "expect_trunc_rehash": (_rewrite(EXPECTATION, b'{\n  "scenario": "image-compaction-k2-rolling",\n  "purp'),
                            ("expectation.json:3:3", "not valid JSON")),
    "expect_bigint_rehash": (_rewrite(EXPECTATION, b'{"seed": ' + b"9" * 5000 + b"}"),
                             ("expectation.json:1:10", "field $.seed", "integer with 5000 digits")),
    "expect_list_rehash": (_rewrite(EXPECTATION, b"[]"),
                           ("expectation.json: field <root>", "not a valid golden expectation")),
    "rows_garbage_rehash": (_rewrite(ROWS, b"{garbage\n"), ("step-0000.jsonl:1:2", "not valid JSON")),
    "rows_binary_rehash": (_rewrite(ROWS, b'{"a": 1}\n\x80\x81\n'), ("step-0000.jsonl:2:1", "not UTF-8 text")),
    "rows_list_rehash": (_rewrite(ROWS, b"[1]\n"),
                         ("step-0000.jsonl:1: field <root>", "not a valid golden expected row")),
    "rows_wrongshape_rehash": (_rows_wrong_shape,
                               ("step-0000.jsonl:1", "'parent_index' is a required property")),
    "rows_span_outside_rehash": (_rows_span_outside, ("step-0000.jsonl:1: field mask_spans/0", "is not inside the row")),
    "rows_unlisted_missing": (_rows_unlisted_missing, (f"{ROWS}: not listed in manifest.json files[]",)),
    "scenario_dir_missing": (_scenario_dir_missing, ("scenarios/ghost/expectation.json: not listed in manifest.json",)),
    "scenario_name_traversal": (lambda g: _set_name(g, f"../../g/{SCEN}"),
                                ("manifest.json: field scenarios[0].name", "is not a relative path")),
    "scenario_directory_mismatch": (lambda g: write_manifest(g, {**manifest(g), "scenarios": [
        dict(manifest(g)["scenarios"][0], directory="scenarios/other")]}),
                                    ("field scenarios[0].directory", f"expected '{SCEN}'")),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_golden_files_exit_2_naming_the_file_and_field(case: str, golden: Path, exported: tuple[Path, Path]):
    edit, fragments = MALFORMED[case]
    edit(golden)
    assert_refused(verify(golden, exported[1]), *fragments)


# ------------------------------------------------------------------ bug 2: integrity of what is read


def test_an_edited_golden_cannot_hide_by_leaving_the_manifest(golden: Path, exported: tuple[Path, Path]):
    """Emptying `files[]` used to skip every digest check, so an edited expectation verified (exit 0)."""
    (golden / EXPECTATION).write_text((golden / EXPECTATION).read_text().replace('"seed": 0', '"seed": 1', 1))
    write_manifest(golden, {**manifest(golden), "files": []})
    assert_refused(verify(golden, exported[1]), f"{EXPECTATION}: not listed in manifest.json files[]")


@pytest.mark.parametrize("path", ["{outside}", "../outside.jsonl", f"{SCEN}/../../../outside.jsonl", "./manifest.json",
                                  f"{SCEN}//x.jsonl", "C:\\x.json"])
def test_manifest_paths_must_stay_inside_the_golden_directory(path: str, golden: Path, exported: tuple[Path, Path],
                                                              tmp_path: Path):
    """Listed with its true digest, a file outside the directory used to pass the check (gd/path_etc_passwd)."""
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"{}\n")
    data = manifest(golden)
    data["files"].append({"path": path.format(outside=outside), "sha256": hashlib.sha256(b"{}\n").hexdigest(),
                          "bytes": 3, "schema": "payload"})
    write_manifest(golden, data)
    assert_refused(verify(golden, exported[1]), f"field files[{len(data['files']) - 1}].path", "is not a relative path")


def test_an_expectation_file_reference_must_stay_inside_its_scenario(golden: Path, exported: tuple[Path, Path]):
    doc = json.loads((golden / EXPECTATION).read_text())
    doc["steps"][0]["rows"]["file"] = "../../../rows.jsonl"
    (golden / EXPECTATION).write_text(json.dumps(doc))
    rehash(golden)
    assert_refused(verify(golden, exported[1]), "expectation.json: field steps[0].rows.file", "is not a relative path")


def test_a_symlink_leading_outside_is_not_read(golden: Path, exported: tuple[Path, Path], tmp_path: Path):
    """Same bytes, so the digest matches: only the containment check refuses it."""
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes((golden / ROWS).read_bytes())
    (golden / ROWS).unlink()
    (golden / ROWS).symlink_to(outside)
    assert_refused(verify(golden, exported[1]), f"{ROWS}: is a symlink leading outside the golden directory")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_symlink_to_a_device_is_not_read(golden: Path, exported: tuple[Path, Path]):
    (golden / ROWS).unlink()
    (golden / ROWS).symlink_to("/dev/zero")
    assert_refused(verify(golden, exported[1]), f"{ROWS}:", "golden file(s) differ from manifest.json")


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("which", ["rows", "manifest"])
def test_a_fifo_is_refused_without_blocking(which: str, golden: Path, exported: tuple[Path, Path]):
    path = golden / (ROWS if which == "rows" else "manifest.json")
    path.unlink()
    os.mkfifo(path)
    fragment = f"{ROWS}: is not a regular file" if which == "rows" else "manifest.json: is a named pipe (FIFO)"
    assert_refused(verify(golden, exported[1]), fragment)


def test_golden_reads_are_size_capped(golden: Path, exported: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch):
    """A listed size over the input limit is refused before anything is read."""
    cap = max((golden / "manifest.json").stat().st_size, exported[1].stat().st_size) + 1
    assert (golden / SCEN / "payloads/step-0000/group-0.jsonl").stat().st_size > cap
    monkeypatch.setenv("COMPACTSIM_MAX_INPUT_BYTES", str(cap))
    assert_refused(verify(golden, exported[1]), "over the input limit")


# ------------------------------------------------------------------ forged but internally inconsistent goldens


def _edit_expectation(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(golden: Path) -> None:
        doc = json.loads((golden / EXPECTATION).read_text())
        change(doc)
        (golden / EXPECTATION).write_text(json.dumps(doc))
        rehash(golden)
    return edit


def _duplicate_first_row(golden: Path) -> None:
    lines = (golden / ROWS).read_text().splitlines()
    (golden / ROWS).write_text("\n".join([lines[0], *lines]) + "\n")
    rehash(golden)


def _manifest_steps(golden: Path) -> None:
    data = manifest(golden)
    data["scenarios"][0]["steps"] = 99
    write_manifest(golden, data)


def _refuse_step(doc: dict[str, Any]) -> None:
    doc["steps"][0]["error"] = {"code": "incomplete_group", "rollout_id": None, "turn_id": None}


def _declare_error(doc: dict[str, Any]) -> None:
    doc["verdict"] = "error"


FORGED = {
    "renumbered_step": (_edit_expectation(lambda d: d["steps"][0].update(step=5)),
                        ("field steps[0].step: 5: steps are numbered 0, 1, 2",)),
    "refused_step_with_rows": (_edit_expectation(_refuse_step),
                               ("field steps[0].rows.file: a refused step trains no row",)),
    "verdict_without_error": (_edit_expectation(_declare_error), ("field verdict: 'error' with error None disagrees",)),
    "row_listed_twice": (_duplicate_first_row, ("field steps[0].rows: says",)),
    "manifest_step_count": (_manifest_steps, ("the manifest lists verdict 'success', 99 step(s)",)),
    # the trainer fields restate `trainer.config`: an edit to one side only is refused, naming both
    "normalize_flipped": (_edit_expectation(lambda d: d["trainer"].update(normalize=not d["trainer"]["normalize"])),
                          ("field trainer/normalize:", "but trainer.config.grpo.normalize_rewards is")),
    "config_group_size": (_edit_expectation(lambda d: d["trainer"]["config"]["grpo"].update(num_generations_per_prompt=7)),
                          ("field trainer/config:", "train_global_batch_size")),
    "config_value_of_another_type": (_edit_expectation(lambda d: d["trainer"]["config"]["grpo"].update(normalize_rewards="x")),
                                     ("field trainer/config:", "grpo.normalize_rewards='x'")),
    "config_unsupported": (_edit_expectation(lambda d: d["trainer"]["config"]["policy"].update(sequence_packing_enabled=True)),
                           ("field trainer/config:", "policy.sequence_packing_enabled=True is unsupported")),
    "config_leave_one_out": (_edit_expectation(lambda d: d["trainer"]["config"]["grpo"].update(
        use_leave_one_out_baseline=not d["trainer"]["leave_one_out"])),
        ("field trainer/leave_one_out:", "trainer.config.grpo.use_leave_one_out_baseline")),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_goldens_that_contradict_themselves_are_refused_even_with_valid_digests(case: str, golden: Path,
                                                                                  exported: tuple[Path, Path]):
    """Digests prove the files are the ones listed, not that they agree: a renumbered step used to verify
    clean with none of its rows audited, and a step that must be refused verified a dump that trained it."""
    edit, fragments = FORGED[case]
    edit(golden)
    assert_refused(verify(golden, exported[1]), "the golden files are inconsistent", *fragments)
