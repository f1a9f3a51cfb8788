"""Start (or join) Ray so that a single-machine run never leaves loopback.

Ray resolves "127.0.0.1" to the machine's primary interface unless told that this is not a
cluster (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`), and its API server probes cloud metadata
endpoints (169.254.169.254, metadata.google.internal) to tag usage reports unless it finds an
autoscaler config at ``~/ray_bootstrap_config.yaml`` — even with usage stats disabled. So the
local session is started with those variables set and with HOME pointing at a private
directory that holds a minimal ``provider: local`` config; the driver's HOME is restored at once.

An existing cluster is given as ``HOST:PORT``, the GCS address ``ray start --head --port PORT``
listens on. Before Ray is asked to join it, `check_ray_address` opens a TCP connection and
exchanges the HTTP/2 preface with the GCS's gRPC server, so an unreachable or wrong address fails
within `RAY_CONNECT_TIMEOUT_S` with one `ConfigError` instead of Ray's minutes of retry warnings.
A loopback address is joined on loopback (Ray would otherwise swap 127.0.0.1 for the machine's
primary interface, as above).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from compactsim.harness.core.errors import ConfigError

HOST = "127.0.0.1"
#: Seconds `check_ray_address` waits for a cluster's GCS to answer before giving up.
RAY_CONNECT_TIMEOUT_S = 30.0
#: HTTP/2 client preface and an empty SETTINGS frame: a gRPC server answers with its own SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x4
#: Environment every Ray process of a local session inherits.
LOCAL_RAY_ENV: dict[str, str] = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


def parse_ray_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` of a cluster's GCS as (host, port); a `ConfigError` naming the expected form otherwise."""
    text = address.strip()
    if "://" in text:
        raise ConfigError("invalid_argument", f"--ray-address {address!r}: give the GCS address HOST:PORT that "
                                              "`ray start --head --port PORT` listens on (Ray Client ray:// addresses "
                                              "are not supported)")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("invalid_argument", f"--ray-address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:6379")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine's loopback interface."""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> tuple[str, int]:
    """(host, port) of `address` once a gRPC server (the GCS) answers there; `ConfigError` within `timeout_s` otherwise."""
    host, port = parse_ray_address(address)
    hint = f"is a Ray head running there (`ray start --head --port {port}`)?"
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise ConfigError("invalid_argument", f"--ray-address {address}: no Ray cluster reachable within "
                                              f"{timeout_s:g} s ({reason}); {hint}") from None
    if len(header) < 9 or header[3] != _H2_SETTINGS:
        raise ConfigError("invalid_argument", f"--ray-address {address}: something listens there but it is not a "
                                              f"Ray GCS (no gRPC answer); {hint}")
    return host, port


@contextmanager
def _loopback_driver() -> Iterator[None]:
    """Keep Ray from replacing a loopback address with the primary interface while this driver starts
    (`ENABLE_RAY_CLUSTER` is read from the environment once, when Ray is imported)."""
    import ray

    constants = ray._private.ray_constants
    cluster = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = cluster


@contextmanager
def local_ray(num_cpus: int, *, address: str | None = None,
              connect_timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> Iterator[None]:
    """Ray on 127.0.0.1 (dashboard off, auth and usage stats off), or the cluster at `address` (``HOST:PORT``).

    Joins an already initialised Ray without touching it; shuts down only what it started (never
    the cluster at `address`). An unreachable `address` is a `ConfigError` within `connect_timeout_s`.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    home = tempfile.mkdtemp(prefix="compactsim-ray-home-")
    try:
        if address:
            host, port = check_ray_address(address, connect_timeout_s)
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            try:
                if is_loopback(host):
                    with _loopback_driver():
                        ray.init(address=f"{HOST}:{port}", _node_ip_address=HOST, log_to_driver=False,
                                 configure_logging=False)
                else:
                    ray.init(address=f"{host}:{port}", log_to_driver=False, configure_logging=False)
            except (RuntimeError, ConnectionError) as exc:  # e.g. a Ray or Python version that differs from the cluster's
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ConfigError("invalid_argument", f"--ray-address {address}: Ray could not join the cluster: "
                                                      f"{first}") from None
        else:
            with open(os.path.join(home, "ray_bootstrap_config.yaml"), "w", encoding="utf-8") as f:
                f.write("provider: {type: local}\n")
            saved = {k: os.environ.get(k) for k in (*LOCAL_RAY_ENV, "HOME", "RAY_ADDRESS")}
            os.environ.update(LOCAL_RAY_ENV)
            os.environ["HOME"] = home
            os.environ.pop("RAY_ADDRESS", None)  # a private instance, never a cluster found in the environment
            # Ray read RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it was imported; the driver needs the
            # same answer now (its child processes read the variable themselves).
            try:
                with _loopback_driver():
                    ray.init(
                        address="local",  # start one: without it Ray joins any cluster `ray start` left running here
                        _node_ip_address=HOST,
                        include_dashboard=False,
                        num_cpus=max(num_cpus, 1),
                        log_to_driver=False,
                        configure_logging=False,
                    )
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(home, ignore_errors=True)


__all__ = ["HOST", "LOCAL_RAY_ENV", "RAY_CONNECT_TIMEOUT_S", "check_ray_address", "is_loopback", "local_ray",
           "parse_ray_address"]
