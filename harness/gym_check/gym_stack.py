"""Processes and loopback servers of a live gym-check: the revision's own apps, `compactsim serve`, our mocks.

Topology (every socket on 127.0.0.1, each port picked free: see `free_port`)::

    gym-check ──/run──▶ Gym agent (SimpleAgentWithCompaction, revision venv, uvicorn)
                          │  ServerClient (aiohttp), peers resolved from the injected global config
                          ├──/v1/responses──▶ Gym model server (VLLMModelWithCompaction, revision venv)
                          │                     └──/v1/chat/completions, /tokenize──▶ wire recorder ──▶ compactsim serve
                          └──/seed_session, /<tool>, /verify──▶ mock resources server (ours)

Gym's servers find each other the way `ng_run` children do: the whole config travels in
``NEMO_GYM_CONFIG_DICT`` and ``NEMO_GYM_CONFIG_PATH`` names the server a process runs; the app's
``__main__`` calls its ``run_webserver()``. Only the resources server is ours (tools and `/verify`).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import compactsim
from compactsim.harness.core.http_deadline import deadline_client
from compactsim.harness.gym_check.errors import GymSetupError

HOST = "127.0.0.1"
AGENT_MODULE = "responses_api_agents.simple_agent_with_compaction.app"
MODEL_MODULE = "responses_api_models.vllm_model_with_compaction.app"
AGENT_NAME = "compactsim_gym_agent"
MODEL_NAME = "policy_model_for_compaction"
RESOURCES_NAME = "compactsim_resources"
#: Seconds a server may take to answer its first HTTP request (the revision's imports take ~8 s cold).
START_TIMEOUT_S = 120.0


#: Where the kernel's own port choices come from (`bind` to port 0, outgoing connections).
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port `free_port` picks from, below the ephemeral range.
_LOWEST_PORT = 10_000
_CALLS = itertools.count()


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default lower bound


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for a server started next with that port.

    The port is handed to a process that binds it seconds later (Gym's servers import for ~8 s),
    and `wait_http` then takes whatever answers there for it. A port from the kernel's ephemeral
    range could meanwhile be given to any other socket binding port 0 (a test's server, an HTTP
    client's connection) and a foreign server would answer — a 404 where Gym should be. So the
    port is taken from below that range, where the kernel never assigns one by itself, and checked
    free by binding it. Candidates walk the range from a point set by the process id and a call
    counter (Knuth's multiplicative hash), so concurrent processes, such as two test workers each
    starting a Gym stack, start far apart; no port reaches an artifact.
    """
    low, high = _LOWEST_PORT, _ephemeral_low() - 1
    span = high - low + 1
    start = (os.getpid() * 2_654_435_761 + next(_CALLS) * 40_503) % span if span > 0 else 0
    for attempt in range(min(64, max(span, 0))):
        port = low + (start + attempt * 7_919) % span
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded or unusual range: the kernel's pick
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes] | None, log: Path | None, *, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll `url` (one client for every poll) until anything answers; a dead process or the deadline is a `GymSetupError`."""
    deadline = time.monotonic() + timeout_s
    with deadline_client(2.0) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-6:] if log else []
                raise GymSetupError("import", f"{url} exited {proc.returncode} before serving: {' | '.join(tail)}")
            try:
                client.get(url)
                return
            except httpx.HTTPError:
                time.sleep(0.05)  # servers come up in 0.4-3 s; a coarse poll would add up over a check's many starts
    raise GymSetupError("checker", f"{url} did not answer within {timeout_s:.0f} s")


class ThreadServer:
    """An ASGI app under uvicorn in a daemon thread on a free loopback port (our mocks); its lifespan runs
    (startup before `__enter__` returns, shutdown in `__exit__`), so an app can hold one client for all its requests."""

    def __init__(self, app: Any, *, name: str) -> None:
        import uvicorn  # noqa: PLC0415 - only live checks serve anything

        from compactsim.mock_servers.head_deadline import uvicorn_config  # noqa: PLC0415 - imports uvicorn

        self.port = free_port()
        self.name = name
        self._server = uvicorn.Server(uvicorn_config(app, host=HOST, port=self.port, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name=f"gym-check-{name}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise GymSetupError("checker", f"our {self.name} server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@dataclass
class ManagedProcess:
    """A child process with its output in a log file; always ended on exit."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> ManagedProcess:
        fh = self.log.open("wb")
        try:
            self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as exc:
            raise GymSetupError("checker", f"cannot start {self.name}: {exc}") from None
        finally:
            fh.close()
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"}}
    # nothing leaves loopback: no telemetry, no W&B, no Ray dashboard
    env.update({"PYTHONHASHSEED": "0", "WANDB_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    return env


def wait_serve(proc: ManagedProcess, port: int) -> None:
    """Until `start_serve`'s process answers `/health`; if it does not (a `GymSetupError`), it is stopped."""
    try:
        wait_http(f"http://{HOST}:{port}/health", proc.proc, proc.log)
    except BaseException:
        proc.stop()
        raise


def start_serve(settings: Mapping[str, Any], workdir: Path, *, seed: int) -> tuple[ManagedProcess, int]:
    """`compactsim serve --mode scripted` with `settings` (script, faults) on a free port, spawned and not waited
    for: it imports (~0.6 s) while the caller does something else; `wait_serve` it before use."""
    port = free_port()
    path = workdir / f"serve-{port}.json"
    path.write_text(json.dumps(dict(settings), sort_keys=True), encoding="utf-8")
    script = Path(sys.executable).with_name("compactsim")
    entry = [str(script)] if script.exists() else [sys.executable, "-c", "from compactsim.harness.cli import app; app()"]
    cmd = [*entry, "serve", "--mode", "scripted", "--seed", str(seed), "--port", str(port), "--settings", str(path)]
    env = _base_env()
    env["PYTHONPATH"] = str(Path(compactsim.__file__).resolve().parents[1])  # the folder holding `compactsim`
    return ManagedProcess("compactsim serve", cmd, env, workdir, workdir / f"serve-{port}.log").start(), port


def gym_config(*, model_port: int, agent_port: int, resources_port: int, upstream_url: str,
               context_history: Mapping[str, Any], max_steps: int | None, model_name: str) -> dict[str, Any]:
    """The global config dict Gym's servers read: where each peer listens and how each app is configured."""
    agent: dict[str, Any] = {
        "entrypoint": "app.py", "host": HOST, "port": agent_port,
        "resources_server": {"type": "resources_servers", "name": RESOURCES_NAME},
        "model_server": {"type": "responses_api_models", "name": MODEL_NAME},
        "context_history": dict(context_history),
    }
    if max_steps is not None:
        agent["max_steps"] = max_steps
    return {
        "head_server": {"host": HOST, "port": free_port()},
        "dry_run": False,
        MODEL_NAME: {"responses_api_models": {"vllm_model_with_compaction": {
            # what the revision's own vllm_model_for_compaction.yaml sets, pointed at our recorder
            "entrypoint": "app.py", "host": HOST, "port": model_port, "base_url": f"{upstream_url}/v1",
            "api_key": "compactsim", "model": model_name, "return_token_id_information": True,
            "request_prompt_and_generation_token_ids": True, "uses_reasoning_parser": True,
        }}},
        RESOURCES_NAME: {"resources_servers": {"compactsim_mock": {
            "entrypoint": "app.py", "host": HOST, "port": resources_port, "domain": "other",
        }}},
        AGENT_NAME: {"responses_api_agents": {"simple_agent_with_compaction": agent}},
    }


class GymApps:
    """The revision's model server and agent, one process each, configured to reach each other and our mocks."""

    def __init__(self, python: Path, workdir: Path, config: Mapping[str, Any]) -> None:
        self.python = python.absolute()
        self.workdir = workdir
        self.config = dict(config)
        self.model_port = int(config[MODEL_NAME]["responses_api_models"]["vllm_model_with_compaction"]["port"])
        self.agent_port = int(config[AGENT_NAME]["responses_api_agents"]["simple_agent_with_compaction"]["port"])
        self._procs: list[ManagedProcess] = []

    @property
    def agent_url(self) -> str:
        return f"http://{HOST}:{self.agent_port}"

    def _spawn(self, name: str, module: str, server: str) -> ManagedProcess:
        env = _base_env()
        env["NEMO_GYM_CONFIG_DICT"] = json.dumps(self.config)
        env["NEMO_GYM_CONFIG_PATH"] = server
        proc = ManagedProcess(name, [str(self.python), "-m", module], env, self.workdir,
                              self.workdir / f"{server}-{self.agent_port}.log").start()
        self._procs.append(proc)
        return proc

    def start(self) -> GymApps:
        """Spawn both processes, not waiting: they import (~3 s each) while the caller does other work."""
        try:
            self._spawn("Gym model server", MODEL_MODULE, MODEL_NAME)
            self._spawn("Gym agent", AGENT_MODULE, AGENT_NAME)
        except BaseException:
            self.close()
            raise
        return self

    def wait(self) -> GymApps:
        """Until both answer (model server first); if either does not (a `GymSetupError`), both are stopped."""
        urls = [f"http://{HOST}:{self.model_port}/", f"{self.agent_url}/"]
        try:
            for proc, url in zip(self._procs, urls, strict=True):
                wait_http(url, proc.proc, proc.log)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for proc in self._procs:
            text = proc.log.read_text(encoding="utf-8", errors="replace") if proc.log.exists() else ""
            out.append(f"[{proc.name}] " + " | ".join(text.strip().splitlines()[-lines:]))
        return "\n".join(out)


def workdir() -> Path:
    """A fresh scratch directory for configs and server logs."""
    return Path(tempfile.mkdtemp(prefix="compactsim-gym-live-"))


__all__ = [
    "AGENT_MODULE",
    "AGENT_NAME",
    "HOST",
    "MODEL_MODULE",
    "MODEL_NAME",
    "RESOURCES_NAME",
    "START_TIMEOUT_S",
    "GymApps",
    "ManagedProcess",
    "ThreadServer",
    "free_port",
    "gym_config",
    "start_serve",
    "wait_http",
    "wait_serve",
    "workdir",
]
