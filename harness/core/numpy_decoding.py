"""KV-cached decoding of the tiny policy in numpy, for policy-mode sampling on the CPU.

Sampling one token runs the blocks on a single position: a few dozen operations on vectors of
64 to 512 numbers. Through torch each operation costs its dispatch (several microseconds, more
than the arithmetic); numpy's per-call cost is a fraction of that, so a sampled token costs
a few times less (`bench/bench_server.py` measures it against the torch module path).

These numbers only choose tokens. The authoritative logprobs and routes of a finished sequence
still come from one full torch forward (`TinyPolicy.sequence_logprobs`), exactly as the trainer
recomputes them. The arithmetic here is the model's (`policy._Block.forward`), in the model's
dtype, but in numpy's kernels: it agrees with the torch forward to rounding (float64: ~1e-15),
not bit for bit. Inverse-CDF sampling turns such a difference into another token only when the
uniform draw lands within rounding of a CDF boundary (about 1e-14 per float64 token); the
result stays a pure function of (weights, prompt, seed) on a machine.

One sequence (no batch). The cache holds, per layer, keys transposed as (heads, head_size,
capacity) and values as (heads, capacity, head_size): the layouts the two attention products
read without a copy. It grows by doubling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from compactsim.harness.core.positions import sinusoid

#: Position rows prepared when a decoder is built (the table doubles when outgrown).
_INITIAL_ROWS = 1024


@dataclass(frozen=True, slots=True)
class _Block:
    """One block's weights as numpy arrays laid out for row-vector products (x @ W)."""

    n_heads: int
    top_k: int
    ln1: tuple[np.ndarray, np.ndarray, float]
    w_qkv: np.ndarray  # (d, 3d)
    b_qkv: np.ndarray
    w_proj: np.ndarray  # (d, d)
    b_proj: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray, float]
    w_router: np.ndarray  # (d, E)
    w_in: np.ndarray  # (E, d, F)
    w_in_flat: np.ndarray  # (d, E*F): every expert's input projection in one product
    b_in: np.ndarray  # (E, F)
    b_in_flat: np.ndarray  # (E*F,)
    w_out: np.ndarray  # (E, F, d)
    b_out: np.ndarray  # (E, d)


@dataclass(slots=True)
class KVCache:
    """Keys and values of positions [0, filled) per layer; shared by the states of one sequence.

    A state extends the cache in place when it is the newest (`filled == state.length`); an older
    state extended again (a branch) copies its prefix first, so no state ever sees another's tokens.
    """

    keys: list[np.ndarray]  # per layer (heads, head_size, capacity)
    values: list[np.ndarray]  # per layer (heads, capacity, head_size)
    filled: int = 0

    @property
    def capacity(self) -> int:
        return self.values[0].shape[1]

    def branch(self, length: int, capacity: int) -> KVCache:
        """A new cache holding positions [0, length) of this one, with room for `capacity`."""
        keys, values = [], []
        for k, v in zip(self.keys, self.values, strict=True):
            k2 = np.zeros((k.shape[0], k.shape[1], capacity), dtype=k.dtype)
            k2[:, :, :length] = k[:, :, :length]
            v2 = np.zeros((v.shape[0], capacity, v.shape[2]), dtype=v.dtype)
            v2[:, :length] = v[:, :length]
            keys.append(k2)
            values.append(v2)
        return KVCache(keys, values, filled=length)


@dataclass(slots=True, eq=False)
class NumpyDecoder:
    """The policy's weights as numpy arrays, and the steps that sample with them."""

    blocks: tuple[_Block, ...]
    embedding: np.ndarray  # (V, d)
    positions: np.ndarray  # (rows, d) sinusoid rows [0, rows)
    ln_f: tuple[np.ndarray, np.ndarray, float]
    w_head: np.ndarray  # (d, V)
    b_head: np.ndarray
    d_model: int

    @classmethod
    def from_policy(cls, policy) -> NumpyDecoder:  # policy: TinyPolicy on the CPU
        """Copies of the weights (training may later change the policy's in place)."""
        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().numpy().copy()

        def rows(t: torch.Tensor) -> np.ndarray:  # nn.Linear (out, in) -> (in, out)
            return np.ascontiguousarray(t.detach().numpy().T)

        def ln(m) -> tuple[np.ndarray, np.ndarray, float]:
            return arr(m.weight), arr(m.bias), float(m.eps)

        blocks = []
        for b in policy.blocks:
            e, d, f = b.w_in.shape
            w_in, b_in = arr(b.w_in), arr(b.b_in)
            blocks.append(_Block(
                n_heads=b.n_heads, top_k=b.top_k, ln1=ln(b.ln1), w_qkv=rows(b.qkv.weight), b_qkv=arr(b.qkv.bias),
                w_proj=rows(b.proj.weight), b_proj=arr(b.proj.bias), ln2=ln(b.ln2), w_router=rows(b.router.weight),
                w_in=w_in, w_in_flat=np.ascontiguousarray(w_in.transpose(1, 0, 2).reshape(d, e * f)), b_in=b_in,
                b_in_flat=b_in.reshape(e * f), w_out=arr(b.w_out), b_out=arr(b.b_out),
            ))
        embedding = arr(policy.tok_emb.weight)
        d = policy.config.d_model
        return cls(blocks=tuple(blocks), embedding=embedding, positions=_position_table(_INITIAL_ROWS, d, embedding.dtype),
                   ln_f=ln(policy.ln_f), w_head=rows(policy.lm_head.weight), b_head=arr(policy.lm_head.bias), d_model=d)

    def new_cache(self, capacity: int) -> KVCache:
        keys = [np.zeros((b.n_heads, self.d_model // b.n_heads, capacity), dtype=self.embedding.dtype) for b in self.blocks]
        values = [np.zeros((b.n_heads, capacity, self.d_model // b.n_heads), dtype=self.embedding.dtype) for b in self.blocks]
        return KVCache(keys, values)

    def ensure_positions(self, rows: int) -> None:
        """Grow the position table to at least `rows` rows (same values: each row depends only on its index)."""
        if self.positions.shape[0] < rows:
            self.positions = _position_table(max(rows, 2 * self.positions.shape[0]), self.d_model, self.embedding.dtype)

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        return self.embedding[np.asarray(ids, dtype=np.int64)]

    def run(self, h: np.ndarray, cache: KVCache, offset: int) -> np.ndarray:
        """Token embeddings (n, d) of positions [offset, offset + n) through every block, writing their keys/values.

        Returns the float64 log-softmax [V] of the token after the last position.
        """
        n = h.shape[0]
        self.ensure_positions(offset + n)
        h = h + self.positions[offset: offset + n]
        if n == 1:
            x = h[0]
            for layer, w in enumerate(self.blocks):
                x = _one_position(w, x, cache.keys[layer], cache.values[layer], offset)
        else:
            for layer, w in enumerate(self.blocks):
                h = _positions(w, h, cache.keys[layer], cache.values[layer], offset)
            x = h[-1]
        cache.filled = offset + n
        z = (_norm_vector(x, *self.ln_f) @ self.w_head + self.b_head).astype(np.float64, copy=False)
        z = z - z.max()
        return z - math.log(float(np.exp(z).sum()))


def _position_table(rows: int, d: int, dtype: np.dtype) -> np.ndarray:
    """The policy's position rows [0, rows) (`positions.sinusoid`, float64) in the decoder's dtype."""
    return sinusoid(rows, d, dtype=torch.float64, device=torch.device("cpu")).numpy().astype(dtype)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """`F.layer_norm` over the last axis (biased variance, as torch)."""
    inv_d = 1.0 / x.shape[-1]
    xc = x - np.add.reduce(x, axis=-1, keepdims=True) * inv_d
    var = np.add.reduce(xc * xc, axis=-1, keepdims=True) * inv_d
    return xc / np.sqrt(var + eps) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, as `F.gelu`: numpy has no erf, so torch computes it on a shared view."""
    return F.gelu(torch.from_numpy(x)).numpy()


def _softmax_(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place."""
    x -= np.maximum.reduce(x, axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= np.add.reduce(x, axis=-1, keepdims=True)
    return x


def _norm_vector(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """`_layer_norm` of one vector (d,), with scalar statistics: fewer array operations on the hot path."""
    inv_d = 1.0 / x.shape[0]
    xc = x - float(np.add.reduce(x)) * inv_d
    return xc * (1.0 / math.sqrt(float(xc @ xc) * inv_d + eps)) * w + b


def _one_position(w: _Block, x: np.ndarray, keys: np.ndarray, values: np.ndarray, t: int) -> np.ndarray:
    """`_Block.forward` for the single position `t` (x: (d,)), with its own routes: the sampling step."""
    d = x.shape[0]
    nh = w.n_heads
    hs = d // nh
    qkv = _norm_vector(x, *w.ln1) @ w.w_qkv + w.b_qkv  # (3d,)
    keys[:, :, t] = qkv[d: 2 * d].reshape(nh, hs)
    values[:, t] = qkv[2 * d:].reshape(nh, hs)
    q = qkv[:d].reshape(nh, 1, hs) * (1.0 / math.sqrt(hs))
    att = _softmax_((q @ keys[:, :, : t + 1]).reshape(nh, t + 1))  # (nh, T)
    x = x + ((att[:, None, :] @ values[:, : t + 1]).reshape(d) @ w.w_proj + w.b_proj)

    m = _norm_vector(x, *w.ln2)
    logits = m @ w.w_router  # (E,)
    chosen = np.argsort(-logits, kind="stable")[: w.top_k].tolist()  # best first, as topk
    scores = [math.exp(v - float(logits[chosen[0]])) for v in logits[chosen].tolist()]
    total = math.fsum(scores)
    e, f = w.b_in.shape
    pre = (m @ w.w_in_flat + w.b_in_flat).reshape(e, f)  # every expert's input: one product
    hidden = _gelu(pre[chosen])  # (K, F): the chosen experts only
    for j, ex in enumerate(chosen):
        x = x + (scores[j] / total) * (hidden[j] @ w.w_out[ex] + w.b_out[ex])
    return x


def _positions(w: _Block, h: np.ndarray, keys: np.ndarray, values: np.ndarray, offset: int) -> np.ndarray:
    """`_Block.forward` for positions [offset, offset + n) (h: (n, d)), with their own routes: prefill and forced spans."""
    n, d = h.shape
    nh = w.n_heads
    hs = d // nh
    t_all = offset + n
    qkv = (_layer_norm(h, *w.ln1) @ w.w_qkv + w.b_qkv).reshape(n, 3, nh, hs)
    keys[:, :, offset:t_all] = qkv[:, 1].transpose(1, 2, 0)
    values[:, offset:t_all] = qkv[:, 2].transpose(1, 0, 2)
    q = qkv[:, 0].transpose(1, 0, 2) * (1.0 / math.sqrt(hs))  # (nh, n, hs)
    att = q @ keys[:, :, :t_all]  # (nh, n, T)
    att += np.triu(np.full((n, t_all), -np.inf, dtype=h.dtype), offset + 1)  # position offset + i sees keys [0, offset + i]
    y = (_softmax_(att) @ values[:, :t_all]).transpose(1, 0, 2).reshape(n, d)
    h = h + (y @ w.w_proj + w.b_proj)

    m = _layer_norm(h, *w.ln2)
    logits = m @ w.w_router  # (n, E)
    chosen = np.argsort(-logits, axis=-1, kind="stable")[:, : w.top_k]  # (n, K)
    gates = _softmax_(np.take_along_axis(logits, chosen, axis=-1))  # (n, K)
    out = np.zeros_like(h)
    for ex in range(w.b_in.shape[0]):
        rows, slot = np.nonzero(chosen == ex)
        if rows.size:
            hidden = _gelu(m[rows] @ w.w_in[ex] + w.b_in[ex])
            out[rows] += gates[rows, slot, None] * (hidden @ w.w_out[ex] + w.b_out[ex])
    return h + out


__all__ = ["KVCache", "NumpyDecoder"]
