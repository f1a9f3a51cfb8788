"""`compactsim export --check DIR` names every file in DIR that its manifest does not list as `extra` (exit 1).

`verify` never reads an unlisted file, so only the check can see one: a stray ``extra.json``, a copied rows
file, even a hidden ``.DS_Store`` (strict: no file is exempt), each in path order, in the table and in JSON.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.integration.golden_edits import invoke

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SCEN = "scenarios/no-compaction"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unlisted") / "g"
    result = invoke("export", "no-compaction", "--seed", "0", "--steps", "1", "--out", str(out), "--parallel", "1")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def golden(exported: Path, tmp_path: Path) -> Path:
    g = Path(shutil.copytree(exported, tmp_path / "g"))
    (g / SCEN / "extra.json").write_text("{}\n")
    shutil.copyfile(g / SCEN / "rows/step-0000.jsonl", g / SCEN / "rows/step-0001.jsonl")
    (g / ".DS_Store").write_bytes(b"")
    return g


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_unlisted_files_are_extra_differences_in_path_order_in_json(golden: Path):
    result = invoke("export", "--check", str(golden), "--json", "--parallel", "1")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["current"] is False and report["files"] == 4
    assert report["differences"] == [
        {"kind": "extra", "path": ".DS_Store", "committed": hashlib.sha256(b"").hexdigest(), "exported": None},
        {"kind": "extra", "path": f"{SCEN}/extra.json", "committed": hashlib.sha256(b"{}\n").hexdigest(),
         "exported": None},
        {"kind": "extra", "path": f"{SCEN}/rows/step-0001.jsonl",
         "committed": _sha(golden / SCEN / "rows/step-0000.jsonl"), "exported": None},
    ]


def test_the_table_lists_each_unlisted_file_and_says_exporting_again_keeps_them(golden: Path):
    result = invoke("export", "--check", str(golden), "--parallel", "1")
    assert result.exit_code == 1, result.output
    rows = [ln.split("│")[1:3] for ln in result.stdout.splitlines() if ln.startswith("│")]
    assert [(kind.strip(), path.strip()) for kind, path in rows] == [
        ("extra", ".DS_Store"), ("extra", f"{SCEN}/extra.json"), ("extra", f"{SCEN}/rows/step-0001.jsonl")]
    text = " ".join(result.stdout.split())
    assert (f"3 difference(s); to export them again: compactsim export no-compaction --seed 0 --steps 1 --out "
            f"{golden}") in text
    assert ("3 extra file(s) not listed in manifest.json (hidden files included); exporting again leaves them in "
            "place: remove them yourself") in text
    assert "are current" not in text


def test_an_unlisted_empty_directory_is_not_a_file(exported: Path, tmp_path: Path):
    g = Path(shutil.copytree(exported, tmp_path / "g"))
    (g / SCEN / "empty").mkdir()
    result = invoke("export", "--check", str(g), "--json", "--parallel", "1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["differences"] == []
