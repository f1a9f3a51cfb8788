"""Selecting scenarios: the same scenario chosen twice runs once; two different ones never hide each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.runner import resolve_scenarios

SHADOW = 'scenarios:\n  - name: no-compaction\n    purpose: "a file entry with a catalogue name"\n' \
         '    script: {generate: {turns: 2}}\n'


def test_a_scenario_selected_by_name_and_by_tag_runs_once():
    chosen = resolve_scenarios(["no-compaction", "baseline"])
    assert [s.name for s in chosen].count("no-compaction") == 1


def test_a_file_scenario_named_like_a_selected_catalogue_entry_is_refused(tmp_path: Path):
    path = tmp_path / "shadow.yaml"
    path.write_text(SHADOW)
    assert [s.purpose for s in resolve_scenarios([str(path)])] == ["a file entry with a catalogue name"]
    with pytest.raises(ConfigError, match="two different scenarios are named 'no-compaction'"):
        resolve_scenarios([str(path), "no-compaction"])
