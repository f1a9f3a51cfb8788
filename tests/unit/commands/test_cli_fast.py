"""A fast CLI: `--help`, `list`, `show` and `schema` load neither torch, ray, fastapi nor matplotlib; --version; suggestions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.commands.selection import did_you_mean, suggestions

runner = CliRunner()
HEAVY = ("torch", "ray", "fastapi", "matplotlib")

_PROBE = """
import json, sys
from typer.testing import CliRunner
from compactsim.harness.cli import app
result = CliRunner().invoke(app, {argv!r})
print(json.dumps({{"exit_code": result.exit_code, "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def _probe(argv: list[str]) -> dict[str, object]:
    """Build the app and run one command in a fresh interpreter; report the heavy modules it loaded."""
    out = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv, heavy=HEAVY)], capture_output=True,
                         text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["schema"], ["schema", "rows-dump"], ["plan", "--help"],
                                  ["run", "--help"], ["verify", "--help"]], ids=" ".join)
def test_light_commands_load_no_heavy_module(argv: list[str]):
    assert _probe(argv) == {"exit_code": 0, "loaded": []}


def test_importing_the_cli_loads_no_heavy_module():
    code = f"import sys, compactsim.harness.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["list"], ["show", "no-compaction"], ["scenarios", "list", "--json"]], ids=" ".join)
def test_catalogue_commands_load_no_heavy_module(argv: list[str]):
    assert _probe(argv) == {"exit_code": 0, "loaded": []}


def test_loss_config_and_server_settings_import_without_torch_or_fastapi():
    code = ("import sys; from compactsim.harness.pipeline.loss import LossConfig, METRIC_KEYS; "
            "from compactsim.mock_servers.model_server import ServerSettings, FaultSpec; LossConfig(); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_lazy_names_still_resolve():
    import compactsim.mock_servers.model_server as model_server
    from compactsim.harness.pipeline import loss
    from compactsim.mock_servers.model_server.app import create_app

    assert model_server.create_app is create_app
    assert set(model_server.__all__) <= set(dir(model_server)) | {"create_app"}
    assert loss.valid_counts.__name__ == "valid_counts"
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        model_server.nope  # noqa: B018


def test_catalogue_suggests_typos_of_names_and_tags():
    from compactsim.harness.core.errors import ConfigError
    from compactsim.scenarios.catalogue import close_names, default_catalogue

    catalogue = default_catalogue()
    assert close_names("imgae-compaction-k2-rolling", catalogue.names)[0] == "image-compaction-k2-rolling"
    assert close_names("zzzzzz", catalogue.names + catalogue.tags) == []
    with pytest.raises(ConfigError) as info:
        catalogue.get("no-compacton")
    assert str(info.value).startswith("invalid_argument: unknown scenario 'no-compacton'; did you mean 'no-compaction'")
    with pytest.raises(ConfigError) as info:
        catalogue.select(["compacton"])
    assert str(info.value) == ("invalid_argument: no scenario or tag 'compacton'; did you mean 'compaction', "
                               "'no-compaction', 'summary-compaction' or 'policy-no-compaction'?")
    with pytest.raises(ConfigError) as info:
        catalogue.get("zzzzzz")
    assert str(info.value) == f"invalid_argument: unknown scenario 'zzzzzz'; {len(catalogue)} scenarios, see `compactsim list`"


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"compactsim {version('compactsim')}\n")


def test_typo_in_a_scenario_name_suggests_the_catalogue_name():
    assert suggestions("no-compacton", ["no-compaction", "image-compaction-k2-rolling", "smoke"]) == ["no-compaction"]
    assert did_you_mean("no-compacton", ["no-compaction"]) == "; did you mean 'no-compaction'?"
    assert did_you_mean("zzz", ["no-compaction"]) == ""
    result = runner.invoke(app, ["run", "no-compacton"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: invalid_argument: no scenario or tag 'no-compacton'; did you mean "
                                    "'no-compaction'")


def test_typo_in_show_and_in_a_tag_suggests():
    result = runner.invoke(app, ["show", "no-compacton"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: invalid_argument: unknown scenario 'no-compacton'; did you mean "
                                    "'no-compaction'")
    result = runner.invoke(app, ["list", "--tag", "compacton"])
    assert (result.exit_code, result.stderr) == (2, "error: invalid_argument: no scenario or tag 'compacton'; did you "
                                                    "mean 'compaction', 'no-compaction', 'summary-compaction' or "
                                                    "'policy-no-compaction'?\n")


@pytest.mark.parametrize("command", ["run", "export", "shrink", "train"])
def test_missing_yaml_path_is_file_not_found(command: str, tmp_path):
    argv = [command, "nope/missing.yaml"] + (["--out", str(tmp_path / "t")] if command == "train" else [])
    result = runner.invoke(app, argv)
    assert (result.exit_code, result.stderr) == (
        2, "error: invalid_argument: nope/missing.yaml: file not found (a scenario YAML file)\n")


def test_gym_check_cache_env_name_matches_the_venv_module():
    from compactsim.harness.commands.gym_check import CACHE_ENV
    from compactsim.harness.gym_check.venv import CACHE_ENV as REAL

    assert CACHE_ENV == REAL
