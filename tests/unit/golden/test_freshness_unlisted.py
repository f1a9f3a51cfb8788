"""`unlisted_files`: every entry of a golden directory its manifest does not list, hidden ones included."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.golden.freshness import Difference, FreshnessResult, _merged, unlisted_files
from compactsim.harness.golden.manifest import Manifest


def _manifest(*paths: str) -> Manifest:
    return Manifest.from_json({
        "format": "compactsim-golden", "format_version": 1, "compactsim_version": "0.1.0", "seed": None,
        "max_steps": None, "gym": {"producer": "p", "contract_flavours": []}, "selection": [], "scenarios": [],
        "files": [{"path": p, "sha256": "0" * 64, "bytes": 1, "schema": None} for p in paths]})


def _write(root: Path, rel: str, data: bytes = b"x") -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(data)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_unlisted_file_in_path_order_with_its_digest(tmp_path: Path):
    for rel in ("manifest.json", "scenarios/a/expectation.json", "scenarios/a/rows/step-0000.jsonl"):
        _write(tmp_path, rel)
    _write(tmp_path, "scenarios/a/rows/step-0001.jsonl", b"copy")
    _write(tmp_path, "scenarios/a/.DS_Store", b"")
    _write(tmp_path, "notes.txt", b"n")
    (tmp_path / "scenarios/b").mkdir()  # an empty directory holds no file
    listed = _manifest("scenarios/a/expectation.json", "scenarios/a/rows/step-0000.jsonl")
    assert unlisted_files(tmp_path, listed) == (
        Difference("extra", "notes.txt", _sha(b"n"), None),
        Difference("extra", "scenarios/a/.DS_Store", _sha(b""), None),
        Difference("extra", "scenarios/a/rows/step-0001.jsonl", _sha(b"copy"), None),
    )


def test_a_listed_directory_only_and_a_fresh_export_have_none(tmp_path: Path):
    _write(tmp_path, "manifest.json")
    _write(tmp_path, "scenarios/a/x.json")
    assert unlisted_files(tmp_path, _manifest("scenarios/a/x.json")) == ()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
def test_a_fifo_and_a_symlinked_directory_are_extra_without_a_digest_and_never_read(tmp_path: Path):
    _write(tmp_path, "manifest.json")
    os.mkfifo(tmp_path / "pipe")  # reading it would block: it is reported, not hashed
    (tmp_path / "outside").mkdir()
    _write(tmp_path, "outside/y.json")
    (tmp_path / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    listed = _manifest("outside/y.json")
    assert unlisted_files(tmp_path, listed) == (Difference("extra", "linked", None, None),
                                                Difference("extra", "pipe", None, None))


def test_a_directory_that_cannot_be_listed_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot list the golden directory"):
        unlisted_files(tmp_path / "absent", _manifest())


def test_unlisted_files_merge_into_the_file_differences_by_path_before_the_fields():
    listed = (Difference("changed", "b", "1", "2"), Difference("missing", "d", None, "4"),
              Difference("field", "compactsim_version", "0.0.1", "0.1.0"))
    unlisted = (Difference("extra", "a", "9", None), Difference("extra", "c", "8", None),
                Difference("extra", "d", "7", None))
    assert _merged(listed, unlisted) == (
        Difference("extra", "a", "9", None), Difference("changed", "b", "1", "2"), Difference("extra", "c", "8", None),
        Difference("missing", "d", None, "4"), Difference("extra", "d", "7", None),
        Difference("field", "compactsim_version", "0.0.1", "0.1.0"))
    result = FreshnessResult(directory=Path("g"), scenarios=(), files=0, differences=_merged(listed, unlisted),
                             unlisted=("a", "c", "d"))
    assert result.current is False and "unlisted" not in result.to_json()
