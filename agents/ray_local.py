"""Start (or join) Ray so that a single-machine run never leaves loopback.

Ray resolves "127.0.0.1" to the machine's primary interface unless told that this is not a
cluster (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`), and its API server probes cloud metadata
endpoints (169.254.169.254, metadata.google.internal) to tag usage reports unless it finds an
autoscaler config at ``~/ray_bootstrap_config.yaml`` — even with usage stats disabled. So the
local session is started with those variables set and with HOME pointing at a private
directory that holds a minimal ``provider: local`` config; the driver's HOME is restored at once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

HOST = "127.0.0.1"
#: Environment every Ray process of a local session inherits.
LOCAL_RAY_ENV: dict[str, str] = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


@contextmanager
def local_ray(num_cpus: int, *, address: str | None = None) -> Iterator[None]:
    """Ray on 127.0.0.1 (dashboard off, auth and usage stats off), or the cluster at `address`.

    Joins an already initialised Ray without touching it; shuts down only what it started.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    home = tempfile.mkdtemp(prefix="compactsim-ray-home-")
    try:
        if address:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        else:
            with open(os.path.join(home, "ray_bootstrap_config.yaml"), "w", encoding="utf-8") as f:
                f.write("provider: {type: local}\n")
            saved = {k: os.environ.get(k) for k in (*LOCAL_RAY_ENV, "HOME")}
            os.environ.update(LOCAL_RAY_ENV)
            os.environ["HOME"] = home
            # Ray read RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it was imported; the driver needs the
            # same answer now (its child processes read the variable themselves).
            constants = ray._private.ray_constants
            cluster = constants.ENABLE_RAY_CLUSTER
            constants.ENABLE_RAY_CLUSTER = False
            try:
                ray.init(
                    _node_ip_address=HOST,
                    include_dashboard=False,
                    num_cpus=max(num_cpus, 1),
                    log_to_driver=False,
                    configure_logging=False,
                )
            finally:
                constants.ENABLE_RAY_CLUSTER = cluster
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


__all__ = ["HOST", "LOCAL_RAY_ENV", "local_ray"]
