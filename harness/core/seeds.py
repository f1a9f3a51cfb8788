"""Counter-based randomness keyed by (seed, ids, purpose); the only place generators are made.

Every random draw in compactsim comes from a generator whose key is a digest of the run seed
and the identity of what is being drawn (rollout id, call index, position, purpose). No
generator carries state from one draw site to another, so results never depend on
concurrency, arrival order or worker count.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import numpy as np

from compactsim.harness.core.errors import ConfigError


def check_seed(seed: object) -> int:
    """Return `seed` if it is a non-negative int below 2**63; else raise `ConfigError(invalid_seed)`."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("invalid_seed", f"seed={seed!r} ({type(seed).__name__}): expected a non-negative int")
    if seed < 0 or seed >= 2**63:
        raise ConfigError("invalid_seed", f"seed={seed!r}: expected 0 <= seed < 2**63")
    return seed


def derive_key(seed: int, purpose: str, **ids: Any) -> bytes:
    """32 bytes identifying one draw site: sha256 over the seed, purpose and sorted ids."""
    check_seed(seed)
    parts = [f"seed={seed}", f"purpose={purpose}"] + [f"{k}={ids[k]!r}" for k in sorted(ids)]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()


def derive_int(seed: int, purpose: str, **ids: Any) -> int:
    """A deterministic 63-bit integer for (seed, purpose, ids)."""
    return struct.unpack("<Q", derive_key(seed, purpose, **ids)[:8])[0] >> 1


def rng(seed: int, purpose: str, **ids: Any) -> np.random.Generator:
    """A fresh Philox generator keyed by (seed, purpose, ids); the same key always draws the same stream."""
    key = derive_key(seed, purpose, **ids)
    words = np.frombuffer(key[:16], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=words))


def uniform01(seed: int, purpose: str, **ids: Any) -> float:
    """One uniform float in [0, 1) for (seed, purpose, ids), without building a generator."""
    return (derive_int(seed, purpose, **ids) >> 10) / float(1 << 53)


def torch_generator(seed: int, purpose: str, **ids: Any):  # -> torch.Generator
    """A CPU `torch.Generator` seeded from the same key derivation (for weight init)."""
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed(derive_int(seed, purpose, **ids))
    return g


__all__ = ["check_seed", "derive_int", "derive_key", "rng", "torch_generator", "uniform01"]
