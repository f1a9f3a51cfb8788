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


_PROBE = """
import sys
import uvicorn
uvicorn.run = lambda app, **kw: print("served", type(app).__name__, kw["host"])
from compactsim.harness.cli import app
try:
    app(["serve", "--mode", sys.argv[1], "--port", "0"])
except SystemExit as exc:
    print("exit", exc.code)
torch = sys.modules.get("torch")
print("torch", "absent" if torch is None else (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()))
"""


@pytest.mark.parametrize(("mode", "torch_line"), [("scripted", "torch absent"), ("policy", "torch (1, True)")])
def test_only_policy_mode_loads_torch_and_sets_its_determinism(mode: str, torch_line: str):
    """A scripted server starts without importing torch (about 1 s saved per start); policy mode configures it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-3:] == ["served FastAPI 127.0.0.1", "exit 0", torch_line]
