"""KV-cached decoding of the tiny policy on the CPU, for policy-mode sampling.

Sampling one token runs the blocks on a single position: a few dozen operations on vectors of
4 to 516 numbers. Through torch each operation costs its dispatch (several microseconds, more
than the arithmetic), through numpy about one. So positions are run one at a time by compiled
loops (`decode_kernels`, numba: ~15 µs a block), and only spans longer than a chunk (forced
tokens) go through numpy's batched products here (`_positions`). `bench/bench_server.py`
measures the whole against the torch module path.

These numbers only choose tokens. The authoritative logprobs and routes of a finished sequence
still come from one full torch forward (`TinyPolicy.sequence_logprobs`), exactly as the trainer
recomputes them. The arithmetic is the model's (`policy._Block.forward`) in other kernels (the
one-position step accumulates in float64 and folds each layer norm into the product after it):
it agrees with the torch forward to rounding (float64: ~1e-15), not bit for bit. Inverse-CDF
sampling turns such a difference into another token only when the uniform draw lands within
rounding of a CDF boundary (about 1e-14 per float64 token); the result stays a pure function of
(weights, prompt, seed) on a machine.

One sequence (no batch). The cache holds, per layer, keys transposed as (heads, head_size,
capacity) and values as (heads, capacity, head_size): the layouts the attention reads row by
row. It grows by doubling. Prompts run in fixed chunks whose keys and values later prompts with
the same start reuse (`prefix_cache`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from compactsim.harness.core.positions import sinusoid
from compactsim.harness.core.prefix_cache import CHUNK, Chunk, PrefixCache, chain_digest

#: Position rows prepared when a decoder is built (the table doubles when outgrown).
_INITIAL_ROWS = 1024
#: Spans up to this many positions (a prompt chunk included) run one position at a time; longer
#: spans of forced tokens run together through numpy's batched products (`_positions`).
_STEPWISE_MAX = CHUNK


@dataclass(frozen=True, slots=True)
class _Folded:
    """A layer norm and the affine map after it as one product: LN(x) @ W + c = r·((x - mean(x)) @ w) + b.

    w = diag(ln.weight) @ W and b = ln.bias @ W + c, in float64 (exact for float32 weights: a
    product of two float32 numbers fits a float64); r = 1/√(var(x) + eps). Read by `decode_kernels`.
    """

    w: np.ndarray
    b: np.ndarray
    eps: float

    @classmethod
    def of(cls, ln: tuple[np.ndarray, np.ndarray, float], w: np.ndarray, c: np.ndarray) -> _Folded:
        weight, bias, eps = (a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in ln)
        w64, c64 = w.astype(np.float64), c.astype(np.float64)
        with np.errstate(all="ignore"):  # non-finite weights fold to non-finite numbers (the server's 422 names them)
            return cls(np.ascontiguousarray(weight[:, None] * w64), bias @ w64 + c64, eps)


@dataclass(frozen=True, slots=True)
class _StepWeights:
    """Every block's weights for the compiled one-position step, stacked over layers (leading axis L), float64.

    Layer norms folded into the products after them (`_Folded`); the query columns of `qkv_w`
    divided by √head_size; `moe_w` is [router | every expert's input] (d, E + E*F).
    """

    qkv_w: np.ndarray  # (L, d, 3d)
    qkv_b: np.ndarray  # (L, 3d)
    qkv_eps: np.ndarray  # (L,)
    proj_w: np.ndarray  # (L, d, d)
    proj_b: np.ndarray  # (L, d)
    moe_w: np.ndarray  # (L, d, E + E*F)
    moe_b: np.ndarray  # (L, E + E*F)
    moe_eps: np.ndarray  # (L,)
    out_w: np.ndarray  # (L, E*F, d): every expert's output projection
    out_b: np.ndarray  # (L, E, d)
    n_heads: int
    top_k: int

    def arguments(self) -> tuple:
        """The weights in `decode_kernels.run_positions`'s argument order."""
        return (self.qkv_w, self.qkv_b, self.qkv_eps, self.proj_w, self.proj_b, self.moe_w, self.moe_b, self.moe_eps,
                self.out_w, self.out_b, self.n_heads, self.top_k)


@dataclass(frozen=True, slots=True)
class _Block:
    """One block's weights as numpy arrays laid out for row-vector products (x @ W)."""

    n_heads: int
    top_k: int
    # spans of forced tokens longer than a chunk (`_positions`): the block's operations as written
    ln1: tuple[np.ndarray, np.ndarray, float]
    w_qkv: np.ndarray  # (d, 3d)
    b_qkv: np.ndarray
    w_proj: np.ndarray  # (d, d)
    b_proj: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray, float]
    w_router: np.ndarray  # (d, E)
    w_in: np.ndarray  # (E, d, F)
    b_in: np.ndarray  # (E, F)
    w_out: np.ndarray  # (E, F, d)
    b_out: np.ndarray  # (E, d)


@dataclass(slots=True)
class KVCache:
    """Keys and values of positions [0, filled) of every layer; shared by the states of one sequence.

    A state extends the cache in place when it is the newest (`filled == state.length`); an older
    state extended again (a branch) copies its prefix first, so no state ever sees another's tokens.
    """

    keys: np.ndarray  # (L, heads, head_size, capacity)
    values: np.ndarray  # (L, heads, capacity, head_size)
    filled: int = 0

    @property
    def capacity(self) -> int:
        return self.values.shape[2]

    def branch(self, length: int, capacity: int) -> KVCache:
        """A new cache holding positions [0, length) of this one, with room for `capacity`."""
        n_layers, heads, head_size, _ = self.keys.shape
        keys = np.zeros((n_layers, heads, head_size, capacity), dtype=self.keys.dtype)
        keys[..., :length] = self.keys[..., :length]
        values = np.zeros((n_layers, heads, capacity, head_size), dtype=self.values.dtype)
        values[:, :, :length] = self.values[:, :, :length]
        return KVCache(keys, values, filled=length)


@dataclass(slots=True, eq=False)
class NumpyDecoder:
    """The policy's weights as numpy arrays, and the steps that sample with them."""

    blocks: tuple[_Block, ...]
    embedding: np.ndarray  # (V, d)
    positions: np.ndarray  # (rows, d) sinusoid rows [0, rows)
    d_model: int
    step: _StepWeights  # one position at a time (every sampled token, prompt chunks)
    head: _Folded  # ln_f into the output head
    #: keys and values of full prompt chunks, for later prompts with the same start
    prefixes: PrefixCache = field(default_factory=PrefixCache)

    @classmethod
    def from_policy(cls, policy) -> NumpyDecoder:  # policy: TinyPolicy on the CPU
        """Copies of the weights (training may later change the policy's in place)."""
        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().numpy().copy()

        def rows(t: torch.Tensor) -> np.ndarray:  # nn.Linear (out, in) -> (in, out)
            return np.ascontiguousarray(t.detach().numpy().T)

        def ln(m) -> tuple[np.ndarray, np.ndarray, float]:
            return arr(m.weight), arr(m.bias), float(m.eps)

        embedding = arr(policy.tok_emb.weight)
        dtype = embedding.dtype
        blocks, qkv, moe = [], [], []
        for b in policy.blocks:
            e, d, f = b.w_in.shape
            w_in, b_in, w_qkv, b_qkv = arr(b.w_in), arr(b.b_in), rows(b.qkv.weight), arr(b.qkv.bias)
            w_router = rows(b.router.weight)
            blocks.append(_Block(
                n_heads=b.n_heads, top_k=b.top_k, ln1=ln(b.ln1), w_qkv=w_qkv, b_qkv=b_qkv,
                w_proj=rows(b.proj.weight), b_proj=arr(b.proj.bias), ln2=ln(b.ln2), w_router=w_router,
                w_in=w_in, b_in=b_in, w_out=arr(b.w_out), b_out=arr(b.b_out),
            ))
            q_scale = np.ones(3 * d)
            q_scale[:d] = 1.0 / math.sqrt(d // b.n_heads)
            qkv.append(_Folded.of(ln(b.ln1), w_qkv * q_scale, b_qkv * q_scale))
            moe.append(_Folded.of(ln(b.ln2), np.concatenate([w_router, w_in.transpose(1, 0, 2).reshape(d, e * f)], axis=1),
                                  np.concatenate([np.zeros(e, dtype), b_in.reshape(e * f)])))

        def stack(arrays) -> np.ndarray:
            return np.ascontiguousarray(np.stack(list(arrays)).astype(np.float64))

        step = _StepWeights(
            qkv_w=stack(x.w for x in qkv), qkv_b=stack(x.b for x in qkv), qkv_eps=stack(x.eps for x in qkv),
            proj_w=stack(b.w_proj for b in blocks), proj_b=stack(b.b_proj for b in blocks),
            moe_w=stack(x.w for x in moe), moe_b=stack(x.b for x in moe), moe_eps=stack(x.eps for x in moe),
            out_w=stack(b.w_out.reshape(-1, b.w_out.shape[-1]) for b in blocks), out_b=stack(b.b_out for b in blocks),
            n_heads=blocks[0].n_heads, top_k=blocks[0].top_k)
        d = policy.config.d_model
        return cls(blocks=tuple(blocks), embedding=embedding, positions=_position_table(_INITIAL_ROWS, d, dtype),
                   d_model=d, step=step,
                   head=_Folded.of(ln(policy.ln_f), rows(policy.lm_head.weight), arr(policy.lm_head.bias)))

    def new_cache(self, capacity: int) -> KVCache:
        n_layers, heads = len(self.blocks), self.step.n_heads
        head_size = self.d_model // heads
        return KVCache(np.zeros((n_layers, heads, head_size, capacity), dtype=self.embedding.dtype),
                       np.zeros((n_layers, heads, capacity, head_size), dtype=self.embedding.dtype))

    def ensure_positions(self, rows: int) -> None:
        """Grow the position table to at least `rows` rows (same values: each row depends only on its index)."""
        if self.positions.shape[0] < rows:
            self.positions = _position_table(max(rows, 2 * self.positions.shape[0]), self.d_model, self.embedding.dtype)

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        return self.embedding[np.asarray(ids, dtype=np.int64)]

    def prefill(self, h: np.ndarray, cache: KVCache) -> np.ndarray:
        """Prompt input rows (S, d) (token or image-patch embeddings) into an empty cache.

        Full chunks of `CHUNK` positions are taken from, or added to, the prefix cache; the rest
        runs after them. Returns the float64 log-softmax [V] of the token after the prompt.
        """
        s = h.shape[0]
        key, last = b"", None
        for start in range(0, s - s % CHUNK, CHUNK):
            end = start + CHUNK
            key = chain_digest(key, h[start:end])
            chunk = self.prefixes.get(key)
            if chunk is None:
                last = self._forward(h[start:end], cache, start)
                self.prefixes.put(key, Chunk(keys=cache.keys[..., start:end].copy(),
                                             values=cache.values[:, :, start:end].copy(), last=last))
            else:
                cache.keys[..., start:end] = chunk.keys
                cache.values[:, :, start:end] = chunk.values
                last = chunk.last
            cache.filled = end
        if cache.filled < s:
            last = self._forward(h[cache.filled:], cache, cache.filled)
        cache.filled = s
        return self._next_logprobs(last)

    def run(self, h: np.ndarray, cache: KVCache, offset: int) -> np.ndarray:
        """Token embeddings (n, d) of positions [offset, offset + n) through every block, writing their keys/values.

        Returns the float64 log-softmax [V] of the token after the last position.
        """
        last = self._forward(h, cache, offset)
        cache.filled = offset + h.shape[0]
        return self._next_logprobs(last)

    def _forward(self, h: np.ndarray, cache: KVCache, offset: int) -> np.ndarray:
        """Rows (n, d) of positions [offset, offset + n) through every block; the last row's final hidden state (d,)."""
        n = h.shape[0]
        self.ensure_positions(offset + n)
        h = h + self.positions[offset: offset + n]
        if n <= _STEPWISE_MAX:
            rows = h.astype(np.float64, copy=False)
            return _kernels().run_positions(rows, cache.keys, cache.values, offset, *self.step.arguments())
        for layer, w in enumerate(self.blocks):
            h = _positions(w, h, cache.keys[layer], cache.values[layer], offset)
        return h[-1]

    def _next_logprobs(self, x: np.ndarray) -> np.ndarray:
        """The float64 log-softmax [V] of the token after a final hidden state x (d,)."""
        head = self.head
        return _kernels().next_logprobs(x.astype(np.float64, copy=False), head.w, head.b, head.eps)


@functools.cache
def _kernels():  # -> the decode_kernels module
    """The compiled steps, imported when first needed: numba's import costs processes that never sample."""
    from compactsim.harness.core import decode_kernels

    return decode_kernels


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
