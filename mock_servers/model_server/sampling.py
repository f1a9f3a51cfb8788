"""Counter-based draws for the mock model server: scripted logprobs, marker routes, policy sampling.

One key per (seed, purpose, rollout, call) comes from `compactsim.harness.core.seeds.derive_int`; per
position (and layer) values are `splitmix64(key + counter)`, vectorised with numpy. Nothing here
holds state, so a value depends only on its key and counter, never on request order.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.seeds import derive_int, uniform01

_GAMMA, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFT30, _SHIFT27, _SHIFT31 = np.uint64(30), np.uint64(27), np.uint64(31)

#: Byte tokens policy mode may sample in free text: printable ASCII (0x20..0x7E), so sampled
#: text is always valid UTF-8 and parses back to the same ids.
TEXT_ALPHABET: np.ndarray = np.arange(tok.BYTE_OFFSET + 0x20, tok.BYTE_OFFSET + 0x7F, dtype=np.int64)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser over a uint64 array (arithmetic mod 2**64), as a new array.

    numpy wraps uint64 array arithmetic silently (only operations on scalars warn), so the
    steps run in place on a 1-d copy, without masks or an error-state context.
    """
    z = np.asarray(x, dtype=np.uint64)
    shape = z.shape
    z = z.reshape(-1) + _GAMMA  # a new 1-d array: the caller's is never written
    z ^= z >> _SHIFT30
    z *= _MIX1
    z ^= z >> _SHIFT27
    z *= _MIX2
    z ^= z >> _SHIFT31
    return z.reshape(shape)


def _counter_u64(key: int, counters: np.ndarray) -> np.ndarray:
    """``splitmix64(key + counter)`` per counter (mod 2**64), in the counters' shape."""
    c = np.asarray(counters).astype(np.uint64)
    return splitmix64(c.reshape(-1) + np.uint64(key)).reshape(c.shape)  # 1-d: array arithmetic wraps silently


def scripted_logprobs(seed: int, rollout_id: str, call: int, positions: np.ndarray) -> np.ndarray:
    """Logprob markers in [-4.0, -0.001) for absolute `positions` of one call: float64 [n]."""
    key = derive_int(seed, "scripted_logprob", rollout=rollout_id, call=call)
    u = (_counter_u64(key, positions) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return -(0.001 + 3.999 * u)


#: Router shapes with at most this many ordered top-k choices draw from a table of them (8P8 = 40,320, the
#: scenario model's cap); larger ones, which `serve` accepts up to 127 experts x top-16, unrank each draw instead.
_TABLE_LIMIT = 40_320


def _count(num_experts: int, top_k: int) -> int:
    """nPk: the ordered choices of `top_k` distinct experts out of `num_experts`."""
    return math.perm(num_experts, top_k)


@lru_cache(maxsize=64)
def _permutations(num_experts: int, top_k: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(num_experts), top_k)), dtype=np.int64)  # (P, K)


def _unrank(ranks: list[int], num_experts: int, top_k: int) -> np.ndarray:
    """Row r of ``itertools.permutations(range(num_experts), top_k)`` (lexicographic) for each rank, without listing
    them: position i's expert is the (rank // (n-1-i)P(k-1-i))-th still unused one. Python ints, so nPk may
    exceed 2**64."""
    blocks = [_count(num_experts - 1 - i, top_k - 1 - i) for i in range(top_k)]
    out = np.empty((len(ranks), top_k), dtype=np.int64)
    for row, rank in enumerate(ranks):
        free = list(range(num_experts))
        for i, block in enumerate(blocks):
            digit, rank = divmod(rank, block)
            out[row, i] = free.pop(digit)
    return out


def scripted_routes(seed: int, rollout_id: str, call: int, num_rows: int, num_layers: int, num_experts: int, top_k: int) -> np.ndarray:
    """Marker routes [num_rows, L, K] keyed by (seed, rollout, call, position, layer): K distinct experts per row,
    the permutation of rank ``splitmix64(key + position * L + layer) mod nPk`` in lexicographic order (above 2**64
    permutations, the rank is read from several draws, so every expert can lead)."""
    key = derive_int(seed, "scripted_route", rollout=rollout_id, call=call)
    counters = np.arange(num_rows * num_layers, dtype=np.uint64)  # position * L + layer
    draws = _counter_u64(key, counters)
    total = _count(num_experts, top_k)
    if total <= _TABLE_LIMIT:
        table = _permutations(num_experts, top_k)
        pick = (draws % np.uint64(total)).astype(np.int64)
        return table[pick].reshape(num_rows, num_layers, top_k)
    if total <= 1 << 64:
        ranks = [int(d) % total for d in draws.tolist()]
    else:  # one 64-bit draw reaches only the first 2**64 ranks (routes that all start 0, 1, 2, ...): draw wider
        words = -(-total.bit_length() // 64) + 1  # 64 spare bits keep the modulo bias below 2**-64
        wide_key = derive_int(seed, "scripted_route_wide", rollout=rollout_id, call=call)
        wide = _counter_u64(wide_key, np.arange(num_rows * num_layers * words, dtype=np.uint64)).reshape(-1, words)
        ranks = [int.from_bytes(np.asarray(row, dtype=">u8").tobytes(), "big") % total for row in wide]
    return _unrank(ranks, num_experts, top_k).reshape(num_rows, num_layers, top_k)


def sample_text_token(logprobs: np.ndarray, *, seed: int, request_digest: str, position: int) -> int:
    """Inverse-CDF draw from the policy restricted to `TEXT_ALPHABET`, keyed by (seed, request, position)."""
    sub = logprobs[TEXT_ALPHABET]
    p = np.exp(sub - sub.max())
    cdf = np.cumsum(p)
    u = uniform01(seed, "policy_sample", request=request_digest, position=position) * cdf[-1]
    idx = int(np.searchsorted(cdf, u, side="right"))
    return int(TEXT_ALPHABET[min(idx, len(TEXT_ALPHABET) - 1)])


def placeholder_row(num_layers: int, top_k: int) -> np.ndarray:
    """vLLM's final-token placeholder `arange(K)` for every layer: [L, K]."""
    return np.tile(np.arange(top_k, dtype=np.int64), (num_layers, 1))


__all__ = ["TEXT_ALPHABET", "placeholder_row", "sample_text_token", "scripted_logprobs", "scripted_routes", "splitmix64"]
