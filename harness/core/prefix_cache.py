"""Keys and values of prompt chunks, reused by every later prompt that starts with the same inputs.

Policy-mode prompts share long prefixes: the rollouts of a GRPO group start from one prompt, and
each turn of a rollout starts with the previous turn's prompt (until a compaction rewrites it).
vLLM reuses such prefixes block by block (automatic prefix caching); this is the same idea for
the numpy decoding.

Determinism decides the shape. A prompt is always computed in chunks of `CHUNK` positions at
fixed offsets (chunk j covers [j·CHUNK, (j+1)·CHUNK), computed in one step after chunks
0..j-1), whether or not any chunk was cached, so a chunk's keys and values are the same numbers
either way: the sampled tokens never depend on which requests came before. A chunk is keyed by
a chained digest of every input row [0, (j+1)·CHUNK) (token or image-patch embeddings, so images
are part of the key), and a cache belongs to one set of weights (`NumpyDecoder`, rebuilt when a
parameter changes). Only full prompt chunks are kept; the tail and sampled positions are not.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

#: Positions per cached chunk (vLLM's default block is 16; 32 halves the steps of a cold prompt).
CHUNK = 32
#: Bytes of keys and values kept per decoder before the least recently used chunk is dropped.
MAX_BYTES = 64 << 20


def chain_digest(previous: bytes, rows: np.ndarray) -> bytes:
    """The key of a chunk: its input rows (contiguous) hashed after the key of the chunk before it."""
    h = hashlib.blake2b(previous, digest_size=20)
    h.update(memoryview(np.ascontiguousarray(rows)).cast("B"))
    return h.digest()


@dataclass(frozen=True, slots=True, eq=False)
class Chunk:
    """One chunk's keys (L, heads, head_size, CHUNK) and values (L, heads, CHUNK, head_size), and the
    final hidden state (d,) of its last position (the next token's input when the prompt ends there)."""

    keys: np.ndarray
    values: np.ndarray
    last: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + self.last.nbytes


class PrefixCache:
    """A byte-bounded least-recently-used map from chain digests to chunks (thread-safe)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._chunks: OrderedDict[bytes, Chunk] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._chunks)

    def get(self, key: bytes) -> Chunk | None:
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is None:
                self.misses += 1
                return None
            self._chunks.move_to_end(key)
            self.hits += 1
            return chunk

    def put(self, key: bytes, chunk: Chunk) -> None:
        with self._lock:
            if key in self._chunks or chunk.nbytes > self._max_bytes:
                return
            self._chunks[key] = chunk
            self._bytes += chunk.nbytes
            while self._bytes > self._max_bytes:
                _, dropped = self._chunks.popitem(last=False)
                self._bytes -= dropped.nbytes


__all__ = ["CHUNK", "Chunk", "MAX_BYTES", "PrefixCache", "chain_digest"]
