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

The one-position step (every sampled token) is the hot path: its layer norms are folded into
the products that follow them (LN(x) @ W = r·((x - mean) @ diag(w) W) + b @ W, with r the
inverse deviation) and it evaluates every expert's MLP with zero gates on the experts not chosen
(one product instead of a loop), as the torch forward does densely. Prompts are computed in
fixed chunks whose keys and values later prompts with the same start reuse (`prefix_cache`).
"""

from __future__ import annotations

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
#: Spans up to this many positions run one position at a time (the step is cheaper than the
#: many-position products below about this size); longer spans run together.
_STEPWISE_MAX = 4


@dataclass(frozen=True, slots=True)
class _Folded:
    """A layer norm and the affine map after it as one product: LN(x) @ W + c = r·((x - mean(x)) @ w) + b.

    w = diag(ln.weight) @ W and b = ln.bias @ W + c, folded in float64 then cast; r = 1/√(var(x) + eps).
    """

    w: np.ndarray
    b: np.ndarray
    eps: float

    @classmethod
    def of(cls, ln: tuple[np.ndarray, np.ndarray, float], w: np.ndarray, c: np.ndarray, dtype: np.dtype) -> _Folded:
        weight, bias, eps = (a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in ln)
        w64, c64 = w.astype(np.float64), c.astype(np.float64)
        return cls(np.ascontiguousarray((weight[:, None] * w64).astype(dtype)), (bias @ w64 + c64).astype(dtype), eps)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        inv_d = 1.0 / x.shape[0]
        xc = x - float(np.add.reduce(x)) * inv_d
        return (xc @ self.w) * (1.0 / math.sqrt(float(xc @ xc) * inv_d + self.eps)) + self.b


@dataclass(frozen=True, slots=True)
class _Block:
    """One block's weights as numpy arrays laid out for row-vector products (x @ W)."""

    n_heads: int
    top_k: int
    # many positions (prompt chunks, forced spans): the block's operations as written
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
    # one position (the sampling step): layer norms folded into the products after them
    step_qkv: _Folded  # ln1 into w_qkv, queries pre-divided by √head_size
    step_moe: _Folded  # ln2 into [w_router | every expert's w_in]: (d, E + E*F)
    w_out_flat: np.ndarray  # (E*F, d): every expert's output projection in one product


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
        blocks = []
        for b in policy.blocks:
            e, d, f = b.w_in.shape
            w_in, b_in, w_qkv, b_qkv = arr(b.w_in), arr(b.b_in), rows(b.qkv.weight), arr(b.qkv.bias)
            w_router = rows(b.router.weight)
            q_scale = np.ones(3 * d)
            q_scale[:d] = 1.0 / math.sqrt(d // b.n_heads)
            w_in_flat = w_in.transpose(1, 0, 2).reshape(d, e * f)
            blocks.append(_Block(
                n_heads=b.n_heads, top_k=b.top_k, ln1=ln(b.ln1), w_qkv=w_qkv, b_qkv=b_qkv,
                w_proj=rows(b.proj.weight), b_proj=arr(b.proj.bias), ln2=ln(b.ln2), w_router=w_router,
                w_in=w_in, b_in=b_in, w_out=arr(b.w_out), b_out=arr(b.b_out),
                step_qkv=_Folded.of(ln(b.ln1), w_qkv * q_scale, b_qkv * q_scale, dtype),
                step_moe=_Folded.of(ln(b.ln2), np.concatenate([w_router, w_in_flat], axis=1),
                                    np.concatenate([np.zeros(e, dtype), b_in.reshape(e * f)]), dtype),
                w_out_flat=np.ascontiguousarray(arr(b.w_out).reshape(e * f, d)),
            ))
        d = policy.config.d_model
        w_head, b_head = rows(policy.lm_head.weight), arr(policy.lm_head.bias)
        return cls(blocks=tuple(blocks), embedding=embedding, positions=_position_table(_INITIAL_ROWS, d, dtype),
                   ln_f=ln(policy.ln_f), w_head=w_head, b_head=b_head, d_model=d,
                   head=_Folded.of(ln(policy.ln_f), w_head, b_head, dtype))

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
                self.prefixes.put(key, Chunk(keys=tuple(k[:, :, start:end].copy() for k in cache.keys),
                                             values=tuple(v[:, start:end].copy() for v in cache.values), last=last))
            else:
                for k, v, ck, cv in zip(cache.keys, cache.values, chunk.keys, chunk.values, strict=True):
                    k[:, :, start:end] = ck
                    v[:, start:end] = cv
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
            for i in range(n):
                x = h[i]
                for layer, w in enumerate(self.blocks):
                    x = _one_position(w, x, cache.keys[layer], cache.values[layer], offset + i)
            return x
        for layer, w in enumerate(self.blocks):
            h = _positions(w, h, cache.keys[layer], cache.values[layer], offset)
        return h[-1]

    def _next_logprobs(self, x: np.ndarray) -> np.ndarray:
        """The float64 log-softmax [V] of the token after a final hidden state x (d,)."""
        z = self.head(x).astype(np.float64, copy=False)
        z -= np.maximum.reduce(z)
        return z - math.log(float(np.add.reduce(np.exp(z))))


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


def _one_position(w: _Block, x: np.ndarray, keys: np.ndarray, values: np.ndarray, t: int) -> np.ndarray:
    """`_Block.forward` for the single position `t` (x: (d,)), with its own routes: the sampling step."""
    d = x.shape[0]
    nh = w.n_heads
    qkv = w.step_qkv(x).reshape(3, nh, d // nh)  # queries already divided by √head_size
    keys[:, :, t] = qkv[1]
    values[:, t] = qkv[2]
    att = qkv[0, :, None, :] @ keys[:, :, : t + 1]  # (nh, 1, T)
    att -= np.maximum.reduce(att, axis=-1, keepdims=True)
    np.exp(att, out=att)
    y = (att @ values[:, : t + 1]) / np.add.reduce(att, axis=-1, keepdims=True)  # softmax's division after the product
    x = x + (y.reshape(d) @ w.w_proj + w.b_proj)

    e = w.b_in.shape[0]
    u = w.step_moe(x)  # (E + E*F,): router logits, then every expert's input
    logits = u[:e]
    chosen = np.argsort(-logits, kind="stable")[: w.top_k].tolist()  # best first, as topk (NaN last)
    scores = logits[chosen].tolist()
    top = scores[0]
    scores = [math.exp(v - top) for v in scores]  # v - top <= 0 (or NaN): no overflow
    total = math.fsum(scores)
    gates = [0.0] * e
    for j, ex in enumerate(chosen):
        gates[ex] = scores[j] / total
    g = np.array(gates, dtype=x.dtype)
    hidden = _gelu(u[e:]).reshape(e, -1)  # (E, F)
    hidden *= g[:, None]  # the experts not chosen weigh 0, as in the dense torch forward
    return x + (hidden.reshape(-1) @ w.w_out_flat + g @ w.b_out)


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
