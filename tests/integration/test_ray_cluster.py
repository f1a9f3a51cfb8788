"""`compactsim run --ray-address` on an existing Ray cluster, started by `ray start --head` in its own process.

The cluster runs on 127.0.0.1 (dashboard off, auth and usage stats off) under a private temp dir.
`ray start --block` stays in the foreground, so the finalizer stops exactly this cluster: SIGTERM
to that process (it shuts its node down), then any process still naming the private temp dir, by
pid. (`ray stop` would also stop every other Ray session on the machine, including other
people's test runs.) The whole module takes about 25 s here (cluster start ~4 s), so it is not
marked slow.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactsim.agents.collect.ray_local import LOCAL_RAY_ENV, check_ray_address
from compactsim.harness.core.errors import ConfigError

#: Real Ray clusters start in subprocesses: end-to-end work, left out of `make test-fast`.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
#: a passing scenario, one with compaction and images, and one refused at plan time
SCENARIOS = ("explicit-logprobs", "image-compaction-k2-rolling", "legacy-token-merge-drift")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pids_naming(text: str) -> list[int]:
    """Processes whose command line contains `text` (this cluster's private temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a fresh single-node cluster (2 CPUs) in its own processes; stopped afterwards."""
    temp = tempfile.mkdtemp(prefix="csray-", dir="/tmp")  # short: Ray's unix socket paths live under it
    home = Path(temp) / "home"
    home.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n", encoding="utf-8")
    port = _free_port()
    env = {**os.environ, **LOCAL_RAY_ENV, "HOME": str(home)}
    log = open(Path(temp) / "ray-start.log", "wb")  # noqa: SIM115 - closed in the finalizer
    proc = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                             f"--port={port}", "--include-dashboard=false", "--num-cpus=2", "--disable-usage-stats",
                             f"--temp-dir={temp}"], stdout=log, stderr=subprocess.STDOUT, env=env)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        text = ""
        while "block forever" not in text:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start did not come up: {(Path(temp) / 'ray-start.log').read_text()[-3000:]}")
            time.sleep(0.5)
            text = (Path(temp) / "ray-start.log").read_text(errors="replace")
        check_ray_address(address, 10)
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        for _ in range(20):
            left = _pids_naming(temp)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL if _ > 10 else signal.SIGTERM)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        log.close()
        left = _pids_naming(temp)
        shutil.rmtree(temp, ignore_errors=True)
        assert left == [], "processes of the test cluster outlived it"


def _compactsim(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "disabled", "PYTHONPATH": os.getcwd()}
    return subprocess.run([str(BIN / "compactsim"), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


@pytest.fixture(scope="module")
def local_summary(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """summary.json of a local run of SCENARIOS at seed 3: what every Ray run below must write byte for byte."""
    out = tmp_path_factory.mktemp("local") / "o"
    local = _compactsim("run", *SCENARIOS, "--seed", "3", "--out", str(out))
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-2000:]
    return (out / "summary.json").read_bytes()


def test_run_on_an_existing_cluster_matches_a_local_run_byte_for_byte(ray_head: str, local_summary: bytes, tmp_path: Path):
    remote = _compactsim("run", *SCENARIOS, "--seed", "3", "--out", str(tmp_path / "ray"), "--ray-address", ray_head)
    assert remote.returncode == 0, remote.stdout[-2000:] + remote.stderr[-2000:]
    assert (tmp_path / "ray" / "summary.json").read_bytes() == local_summary
    timings = (tmp_path / "ray" / "timings.json").read_text()
    assert '"executor": "ray"' in timings  # --ray-address implied the Ray executor


def test_unreachable_address_exits_2_at_once_with_a_clear_error(tmp_path: Path):
    port = _free_port()  # nothing listens there
    started = time.monotonic()
    result = _compactsim("run", "explicit-logprobs", "--out", str(tmp_path / "o"), "--ray-address", f"127.0.0.1:{port}",
                         timeout=120)
    assert result.returncode == 2
    assert result.stderr == (f"error: invalid_argument: --ray-address 127.0.0.1:{port}: no Ray cluster reachable within "
                             f"30 s (connection refused); is a Ray head running there (`ray start --head --port "
                             f"{port}`)?\n")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "o").exists()  # refused before the output folder was touched


def test_ray_address_with_executor_local_is_refused(tmp_path: Path):
    result = _compactsim("run", "explicit-logprobs", "--out", str(tmp_path / "o"), "--executor", "local",
                         "--ray-address", "127.0.0.1:6379", timeout=120)
    assert (result.returncode, result.stderr) == (2, "error: invalid_argument: --ray-address 127.0.0.1:6379 needs the "
                                                     "Ray executor: drop --executor local (--ray-address implies "
                                                     "--executor ray)\n")


def test_silent_listener_times_out_and_a_non_grpc_server_is_named():
    with socket.socket() as silent:  # accepts connections (kernel backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ConfigError) as info:
            check_ray_address(f"127.0.0.1:{port}", timeout_s=1.0)
        assert 0.9 < time.monotonic() - started < 10
        assert str(info.value) == (f"invalid_argument: --ray-address 127.0.0.1:{port}: no Ray cluster reachable within "
                                   f"1 s (no answer); is a Ray head running there (`ray start --head --port {port}`)?")
    with socket.socket() as http:  # answers, but not with HTTP/2
        http.bind(("127.0.0.1", 0))
        http.listen(1)
        port = http.getsockname()[1]

        def answer() -> None:
            conn, _ = http.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        with pytest.raises(ConfigError, match="something listens there but it is not a Ray GCS"):
            check_ray_address(f"127.0.0.1:{port}", timeout_s=5.0)
        thread.join(timeout=5)


@pytest.mark.parametrize(("address", "message"), [
    ("ray://127.0.0.1:10001", "Ray Client ray:// addresses are not supported"),
    ("127.0.0.1", "expected HOST:PORT, e.g. 127.0.0.1:6379"),
    ("127.0.0.1:70000", "expected HOST:PORT"),
])
def test_malformed_addresses_are_refused(address: str, message: str):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        check_ray_address(address, timeout_s=1.0)


def test_executor_ray_without_an_address_starts_its_own_instance(local_summary: bytes, tmp_path: Path):
    dead = f"127.0.0.1:{_free_port()}"  # a cluster address in the environment must not be joined
    env = {**os.environ, "RAY_ADDRESS": dead, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "disabled",
           "PYTHONPATH": os.getcwd()}
    result = subprocess.run([str(BIN / "compactsim"), "run", *SCENARIOS, "--seed", "3", "--executor", "ray",
                             "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=600, env=env,
                            check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (tmp_path / "o" / "summary.json").read_bytes() == local_summary  # two workers of its own Ray, same bytes
    assert '"executor": "ray"' in (tmp_path / "o" / "timings.json").read_text()
