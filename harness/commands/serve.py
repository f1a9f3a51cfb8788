"""`compactsim serve`: run the deterministic mock model server standalone on 127.0.0.1.

    compactsim serve --mode scripted --seed 7 --port 8000
    curl -s 127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' \
      -d '{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"return_token_ids":true}'
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from compactsim.harness.commands.common import ExitCode, err_console
from compactsim.harness.core.errors import ConfigError

HOST = "127.0.0.1"


def build_settings(mode: str, seed: int, settings_file: Path | None, dtype: str | None) -> Any:
    """ServerSettings from an optional JSON/YAML file, with --mode/--seed/--dtype applied on top."""
    from pydantic import ValidationError

    from compactsim.mock_servers.model_server.settings import ServerSettings

    data: dict[str, Any] = {}
    if settings_file is not None:
        from compactsim.harness.core.json_input import load_structured

        data = load_structured(settings_file, what="server settings file") or {}
        if not isinstance(data, dict):
            raise ConfigError("invalid_config", f"{settings_file}: expected a mapping of ServerSettings fields")
    data["mode"] = mode
    data["seed"] = seed
    if dtype is not None:
        data["policy"] = {**data.get("policy", {}), "dtype": dtype}
    try:
        return ServerSettings.model_validate(data)
    except ValidationError as exc:
        violations = tuple(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))
        raise ConfigError("invalid_config", "server settings are invalid", violations=violations) from None


def serve_command(
    mode: Annotated[str, typer.Option(help="scripted: answers from the script table; policy: the tiny MoE policy samples")] = "scripted",
    seed: Annotated[int, typer.Option(help="run seed; every answer is a pure function of (seed, body, policy version)")] = 0,
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1 (0 = pick a free one)")] = 8000,
    settings: Annotated[Path | None, typer.Option("--settings", help="JSON/YAML file of ServerSettings (script, faults, limits)")] = None,
    dtype: Annotated[str | None, typer.Option(help="policy dtype: float32 or float64")] = None,
) -> None:
    """Serve /v1/chat/completions, /v1/responses, /tokenize, /v1/models, /health and /weights on 127.0.0.1."""
    if mode not in ("scripted", "policy"):
        err_console.print(f"[red]error[/red]: --mode={mode!r}: expected scripted or policy")
        raise typer.Exit(ExitCode.ERROR)
    try:
        server_settings = build_settings(mode, seed, settings, dtype)
    except ConfigError as exc:
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(ExitCode.ERROR) from None
    import uvicorn

    from compactsim.mock_servers.model_server import create_app

    if server_settings.mode == "policy":  # scripted answers never touch torch: no import, a server up in under a second
        from compactsim.harness.core.policy import configure_determinism

        configure_determinism()
    err_console.print(f"compactsim mock model server: mode={mode} seed={seed} on http://{HOST}:{port}")
    uvicorn.run(create_app(server_settings), host=HOST, port=port, log_level="warning", access_log=False)
    raise typer.Exit(ExitCode.OK)


def register(app: typer.Typer) -> None:
    from compactsim.harness.core.json_input import limits_help

    app.command("serve", epilog=limits_help())(serve_command)


__all__ = ["build_settings", "register", "serve_command"]
