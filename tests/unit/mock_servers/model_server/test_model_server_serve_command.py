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


def test_options_left_out_keep_the_settings_file_values(tmp_path):
    """`serve --settings` with `"mode": "policy"` serves the policy: only given options override the file."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"mode": "policy", "seed": 7}))
    assert (lambda s: (s.mode, s.seed))(build_settings(None, None, path, None)) == ("policy", 7)
    assert (lambda s: (s.mode, s.seed))(build_settings(None, None, None, None)) == ("scripted", 0)
    assert (lambda s: (s.mode, s.seed))(build_settings("scripted", None, path, None)) == ("scripted", 7)


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
def fake_run(self, sockets=None):  # the command binds its own socket and hands it to uvicorn.Server.run
    self.started = True
    print("served", type(self.config.app).__name__, sockets[0].getsockname()[0])
uvicorn.Server.run = fake_run
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


# ---------------------------------------------------------------------------------------------- bad input: exit 2


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """uvicorn never serves: a command that gets that far records the port it was handed and returns."""
    import uvicorn

    ports: list[int] = []

    def fake_run(self, sockets=None):
        ports.append(sockets[0].getsockname()[1])
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: ports.append(-1))
    return ports


def _serve(*args: str):
    from compactsim.harness.cli import app

    return CliRunner().invoke(app, ["serve", *args])


@pytest.mark.parametrize("port", ["70000", "-1", "99999999999999999999"])
def test_a_port_outside_0_to_65535_exits_2(no_serving, port: str):
    result = _serve("--port", port)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--port'" in result.output
    assert no_serving == []


def test_a_port_in_use_exits_2_with_one_line(no_serving):
    import socket

    with socket.socket() as busy:
        busy.bind((HOST, 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _serve("--port", str(port))
    assert result.exit_code == 2, result.output
    assert result.output == f"error: invalid_argument: --port {port}: cannot listen on {HOST}:{port}: Address already in use\n"
    assert no_serving == []


def test_port_0_prints_the_port_it_bound(no_serving):
    result = _serve("--port", "0")
    assert result.exit_code == 0, result.output
    assert no_serving and no_serving[0] > 0
    assert f"compactsim mock model server: mode=scripted seed=0 on http://{HOST}:{no_serving[0]}\n" == result.output


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("policy: 5\n", ["--dtype", "float32"], "- policy: Input should be a valid dictionary"),
        ("[]", [], "expected a mapping of ServerSettings fields, got a list"),
        ('{"num_layers": 99999999999999999999}', [], "- num_layers: Input should be less than or equal to 128"),
        ('{"num_layers": 100000000, "top_k": 1}', [], "- num_layers: Input should be less than or equal to 128"),
        ('{"top_k": 17, "num_experts": 64}', [], "- top_k: Input should be less than or equal to 16"),
        ('{"policy": {"device": "banana"}}', ["--mode", "policy"], "- policy.device: Value error, device='banana': "
                                                                     "expected cpu, cuda or cuda:N"),
        ('{"request_log_path": "/proc/nope/x.jsonl"}', [], "error: invalid_config: request_log_path "
                                                            "'/proc/nope/x.jsonl': cannot append to it: "
                                                            "No such file or directory"),
        ('{"request_log_path": "."}', [], "cannot append to it: Is a directory"),
        # strict integers, as in scenario files: `seed: true` served seed 1 and "5" seed 5 (CLI probe)
        ('{"seed": true}', [], "- seed: Input should be a valid integer"),
        ('{"seed": "5"}', [], "- seed: Input should be a valid integer"),
        ('{"limits": {"max_new_tokens": 8.0}}', [], "- limits.max_new_tokens: Input should be a valid integer"),
    ],
)
def test_bad_settings_exit_2_naming_the_field(tmp_path, no_serving, content: str, extra: list[str], message: str):
    path = tmp_path / ("s.yaml" if content.startswith("policy") else "s.json")
    path.write_text(content)
    result = _serve("--settings", str(path), "--port", "0", *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert no_serving == []


def test_a_cuda_policy_device_needs_that_gpu(tmp_path, no_serving):
    path = tmp_path / "s.json"
    path.write_text('{"policy": {"device": "cuda:999"}}')
    result = _serve("--settings", str(path), "--port", "0", "--mode", "policy")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: invalid_config: policy.device='cuda:999': ")
    assert no_serving == []


@pytest.mark.parametrize(("device", "ok"), [("cpu", True), ("cuda", True), ("cuda:1", True), ("CUDA", False),
                                            ("cuda:", False), ("mps", False), ("cpu ", False)])
def test_policy_device_is_cpu_cuda_or_cuda_n(device: str, ok: bool):
    from pydantic import ValidationError

    from compactsim.mock_servers.model_server.settings import PolicySettings

    if ok:
        assert PolicySettings(device=device).device == device
    else:
        with pytest.raises(ValidationError, match="expected cpu, cuda or cuda:N"):
            PolicySettings(device=device)


def test_invalid_settings_name_the_line_and_column_of_each_value_in_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("mode: scripted\nfaults:\n  - kind: explode\ndrift: sideways\nsed: 1\npolicy: {dtype: float32}\n")
    with pytest.raises(ConfigError) as err:
        build_settings(None, None, path, "banana")
    assert [(v.split(":")[0], v[v.rindex("("):] if v.endswith(")") else None) for v in err.value.violations] == [
        ("drift", "(line 4, column 8)"),
        ("faults.0.kind", "(line 3, column 11)"),
        ("policy.dtype", None),  # --dtype's value, not the file's float32
        ("sed", "(line 5, column 1)"),  # an unknown key: the key itself
    ]
    json_path = tmp_path / "s.json"
    json_path.write_text('{"seed": 1,\n "limits": {"max_new_tokens": 8.0}}')
    with pytest.raises(ConfigError) as err:
        build_settings(None, None, json_path, None)
    assert err.value.violations == ("limits.max_new_tokens: Input should be a valid integer (line 2, column 31)",)
    with pytest.raises(ConfigError) as err:  # no file: nothing to point at
        build_settings(None, None, None, "banana")
    assert err.value.violations == ("policy.dtype: Input should be 'float32' or 'float64'",)
