"""Editing a copy of a real golden export the way a careless hand or a forger would, for the golden tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from compactsim.harness.cli import app


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def export_one_step(base: Path, name: str, seed: int, *options: str) -> tuple[Path, Path]:
    """(golden dir, reference-dump dir) of a one-step export of `name` into `base`; the export must succeed."""
    result = invoke("export", name, "--seed", str(seed), "--steps", "1", "--out", str(base / "g"),
                    "--reference-dump", str(base / "ref"), *options)
    assert result.exit_code == 0, result.output
    return base / "g", base / "ref"


def manifest(golden: Path) -> dict[str, Any]:
    return json.loads((golden / "manifest.json").read_text())


def write_manifest(golden: Path, data: dict[str, Any]) -> None:
    (golden / "manifest.json").write_text(json.dumps(data, indent=2))


def rehash(golden: Path, **fields: Any) -> None:
    """Every listed file's size and digest as on disk now, and the manifest `fields` set: an edit only a check
    beyond the digests can see."""
    data = {**manifest(golden), **fields}
    for f in data["files"]:
        raw = (golden / f["path"]).read_bytes()
        f["sha256"], f["bytes"] = hashlib.sha256(raw).hexdigest(), len(raw)
    write_manifest(golden, data)
