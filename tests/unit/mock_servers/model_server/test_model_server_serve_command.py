"""`compactsim serve`: settings assembly and registration (the server itself is tested in-process)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from compactsim.harness.commands.serve import HOST, build_settings, register
from compactsim.harness.core.errors import ConfigError


def test_build_settings_applies_options_over_a_settings_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"mode": "scripted", "seed": 1, "script": {"r": [{"text": "hi"}]},
                                "faults": [{"kind": "slow", "delay_s": 0.1}]}))
    s = build_settings("policy", 9, path, "float32")
    assert (s.mode, s.seed, s.policy.dtype) == ("policy", 9, "float32")
    assert s.script["r"][0].text == "hi"
    assert s.faults[0].kind == "slow"


def test_build_settings_reports_every_invalid_field(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("drift: sideways\nfaults:\n  - kind: explode\n")
    with pytest.raises(ConfigError) as err:
        build_settings("scripted", 0, path, None)
    assert err.value.code == "invalid_config"
    assert [v.split(":")[0] for v in err.value.violations] == ["drift", "faults.0.kind"]


def test_serve_binds_loopback_only_and_rejects_unknown_modes():
    assert HOST == "127.0.0.1"
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer in multi-command mode
        pass

    result = CliRunner().invoke(app, ["serve", "--mode", "magic"])
    assert result.exit_code == 2
    assert "--mode='magic': expected scripted or policy" in result.output
