"""`compactsim serve`: run the deterministic mock model server standalone on 127.0.0.1.

    compactsim serve --mode scripted --seed 7 --port 8000
    curl -s 127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' \
      -d '{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"return_token_ids":true}'
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any

import typer

from compactsim.harness.commands.common import MAX_PORT, MAX_SEED, ExitCode, err_console
from compactsim.harness.core.errors import ConfigError

HOST = "127.0.0.1"


def build_settings(mode: str | None, seed: int | None, settings_file: Path | None, dtype: str | None) -> Any:
    """ServerSettings from an optional JSON/YAML file, with the --mode/--seed/--dtype that were given applied on top.

    An option left out keeps the file's value (or the default): `--settings` with `"mode": "policy"`
    serves the policy.

    The file must hold a mapping of fields (an empty YAML file counts as none); a list or a scalar
    is refused rather than ignored, and every invalid field is named.
    """
    from pydantic import ValidationError

    from compactsim.mock_servers.model_server.settings import ServerSettings

    data: dict[str, Any] = {}
    where = "server settings"
    if settings_file is not None:
        from compactsim.harness.core.json_input import load_structured

        where = str(settings_file)
        loaded = load_structured(settings_file, what="server settings file")
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("invalid_config", f"{settings_file}: expected a mapping of ServerSettings fields, "
                                                f"got {_kind(loaded)}")
        data = dict(loaded or {})
    if mode is not None:
        data["mode"] = mode
    if seed is not None:
        data["seed"] = seed
    if dtype is not None:
        policy = data.get("policy")
        # a `policy` that is not a mapping stays as it is, for validation to name the field
        data["policy"] = {**(policy or {}), "dtype": dtype} if policy is None or isinstance(policy, dict) else policy
    try:
        return ServerSettings.model_validate(data)
    except ValidationError as exc:
        from compactsim.harness.core.file_places import Positions
        from compactsim.harness.core.json_input import read_text

        # the text again, only on this path, to name each value's line and column; an option's value is not in it
        places = Positions(None if settings_file is None else read_text(settings_file, what="server settings file"))
        given = [loc for loc, value in ((("mode",), mode), (("seed",), seed), (("policy", "dtype"), dtype)) if value is not None]
        violations = tuple(f"{'.'.join(map(str, e['loc'])) or '<settings>'}: {e['msg']}{_at(places, e, given)}"
                           for e in exc.errors(include_url=False))
        raise ConfigError("invalid_config", f"{where}: invalid server settings", violations=violations) from None


def _at(places: Any, error: Any, given: list[tuple[str, ...]]) -> str:
    """`` (line L, column C)`` of a validation error's value in the settings file; "" without a file, for a value an
    option gave (a place in `given`), or when the place is not in the file (a key a model adds, such as a union
    member's name)."""
    from compactsim.harness.core.json_input import format_field_path

    loc = tuple(error["loc"])
    if any(loc[:len(g)] == g for g in given):
        return ""
    line, column, field = places.find(loc, key=error["type"] == "extra_forbidden", missing=error["type"] == "missing")
    if line is None or field != format_field_path(list(loc)):
        return ""
    return f" (line {line}, column {column})"


def _kind(value: Any) -> str:
    """How a JSON/YAML value reads in a message: "a list", "a string", ..."""
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def check_policy_device(device: str) -> None:
    """Policy mode on ``cuda``/``cuda:N`` needs that GPU now, as ``train --device cuda`` does (exit 2, not a crash).

    The settings model already refused anything but ``cpu``, ``cuda`` and ``cuda:N``.
    """
    if device == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("invalid_config", f"policy.device={device!r}: no CUDA device is available (use cpu)")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError("invalid_config", f"policy.device={device!r}: this machine has "
                                            f"{torch.cuda.device_count()} CUDA device(s)")


def bind_port(port: int) -> socket.socket:
    """A listening-ready socket on 127.0.0.1:`port`, bound before uvicorn starts (`ConfigError` when it cannot be).

    Binding here turns "address already in use" into one line and exit 2 (uvicorn would log it
    and exit 3, the Gym-drift code), and tells the real port when `port` is 0.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise ConfigError("invalid_argument", f"--port {port}: cannot listen on {HOST}:{port}: "
                                              f"{exc.strerror or exc}") from None
    return sock


def serve_command(
    mode: Annotated[str | None, typer.Option(help="scripted: answers from the script table; policy: the tiny MoE "
                                                  "policy samples [default: the settings file's, else scripted]")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="run seed; every answer is a pure function of "
                                                                      "(seed, body, policy version) [default: the "
                                                                      "settings file's, else 0]")] = None,
    port: Annotated[int, typer.Option(min=0, max=MAX_PORT, help="TCP port on 127.0.0.1 (0 = pick a free one)")] = 8000,
    settings: Annotated[Path | None, typer.Option("--settings", help="JSON/YAML file of ServerSettings (script, faults, limits)")] = None,
    dtype: Annotated[str | None, typer.Option(help="policy dtype: float32 or float64")] = None,
) -> None:
    """Serve /v1/chat/completions, /v1/responses, /tokenize, /v1/models, /health and /weights on 127.0.0.1."""
    if mode is not None and mode not in ("scripted", "policy"):
        err_console.print(f"[red]error[/red]: --mode={mode!r}: expected scripted or policy")
        raise typer.Exit(ExitCode.ERROR)
    try:
        server_settings = build_settings(mode, seed, settings, dtype)
        if server_settings.mode == "policy":  # scripted answers never touch torch: no import, up in under a second
            from compactsim.harness.core.policy import configure_determinism

            check_policy_device(server_settings.policy.device)
            configure_determinism()
        from compactsim.mock_servers.model_server import create_app

        app = create_app(server_settings)  # opens the request log: an unwritable path fails here
        sock = bind_port(port)
    except ConfigError as exc:
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(ExitCode.ERROR) from None
    import uvicorn

    from compactsim.mock_servers.head_deadline import uvicorn_config

    bound = sock.getsockname()[1]
    err_console.print(f"compactsim mock model server: mode={server_settings.mode} seed={server_settings.seed} "
                      f"on http://{HOST}:{bound}",
                      markup=False, soft_wrap=True)
    server = uvicorn.Server(uvicorn_config(app, host=HOST, port=bound))
    with sock:
        server.run(sockets=[sock])
    if not server.started:
        err_console.print(f"error: the server did not start on {HOST}:{bound}", markup=False, soft_wrap=True)
        raise typer.Exit(ExitCode.ERROR)
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    from compactsim.harness.core.json_input import limits_help

    app.command("serve", epilog=limits_help())(serve_command)


__all__ = ["bind_port", "build_settings", "check_policy_device", "register", "serve_command"]
