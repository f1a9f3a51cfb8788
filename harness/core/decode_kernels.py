"""The tiny policy one position at a time as compiled loops (numba), for policy-mode decoding.

A sampled token runs each block on one position: about 60 array operations on vectors of 4 to
516 numbers. In numpy each operation costs its dispatch (about a microsecond, more than its
arithmetic), so one block took ~55 µs; compiled, the same arithmetic takes ~15 µs. Prompt
chunks run through the same step, position by position.

The arithmetic is `policy._Block.forward` for one position, with the layer norms folded into the
products after them (`numpy_decoding._Folded`) and accumulated in float64 whatever the weights'
dtype: like the numpy path, it agrees with the torch forward to rounding, not bit for bit, and
only chooses tokens (the authoritative logprobs come from one full torch forward). No fast-math:
every sum runs in one fixed order, so a step is a pure function of its inputs on a machine.

Imported at the first sampling step (`numpy_decoding._kernels`): numba's import costs ~0.3 s,
which processes that never sample should not pay. The first compile (~3 s) happens once per
machine: `cache=True` keeps the machine code in `__pycache__` next to this file.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numba import njit


def _compiled(fn: Callable) -> Callable:
    """`njit` with its machine code cached on disk, or per process where no cache directory is writable.

    numba refuses `cache=True` when neither the source's `__pycache__` nor a user cache directory
    can be written (a read-only install without a home): then every process compiles once (~3 s).
    """
    try:
        return njit(cache=True)(fn)
    except RuntimeError:
        return njit(fn)


@_compiled
def _folded(x, w, b, eps, out):  # pragma: no cover - compiled
    """out = LN(x) @ W + c with the layer norm folded in: r·((x - mean(x)) @ w) + b (see `_Folded`)."""
    d = x.shape[0]
    mean = 0.0
    for i in range(d):
        mean += x[i]
    mean /= d
    var = 0.0
    for i in range(d):
        c = x[i] - mean
        var += c * c
    r = 1.0 / math.sqrt(var / d + eps)
    m = w.shape[1]
    for j in range(m):
        out[j] = 0.0
    for i in range(d):  # row by row: each output keeps its own running sum, in input order
        c = x[i] - mean
        for j in range(m):
            out[j] += c * w[i, j]
    for j in range(m):
        out[j] = out[j] * r + b[j]


@_compiled
def run_positions(h, keys, values, offset, qkv_w, qkv_b, qkv_eps, proj_w, proj_b, moe_w, moe_b, moe_eps, out_w, out_b,
                  n_heads, top_k):  # pragma: no cover - compiled
    """Input rows h (n, d) of positions [offset, offset + n) through every layer, one position at a time.

    Writes each position's keys (L, heads, head_size, capacity) and values (L, heads, capacity,
    head_size); returns the last position's final hidden state (d,). The weights are stacked
    over layers (`numpy_decoding._StepWeights`).
    """
    x = h[0]  # typed before the loop (callers pass n >= 1)
    for i in range(h.shape[0]):
        x = h[i]
        for layer in range(keys.shape[0]):
            x = _block(x, keys[layer], values[layer], offset + i, qkv_w[layer], qkv_b[layer], qkv_eps[layer],
                       proj_w[layer], proj_b[layer], moe_w[layer], moe_b[layer], moe_eps[layer], out_w[layer],
                       out_b[layer], n_heads, top_k)
    return x


@_compiled
def _block(x, keys, values, t, qkv_w, qkv_b, eps1, proj_w, proj_b, moe_w, moe_b, eps2, out_w, out_b,
           n_heads, top_k):  # pragma: no cover - compiled
    """One block on position t (x: (d,)): writes its key and value at t, returns the block's output (d,) in float64.

    keys (heads, head_size, capacity), values (heads, capacity, head_size); qkv_w's query columns
    are already divided by √head_size; moe_w is [router | every expert's input] (d, E + E*F);
    out_w is every expert's output projection (E*F, d), out_b (E, d).
    """
    d = x.shape[0]
    hs = d // n_heads
    n_experts = out_b.shape[0]
    qkv = np.empty(3 * d)
    _folded(x, qkv_w, qkv_b, eps1, qkv)
    for h in range(n_heads):
        for k in range(hs):
            keys[h, k, t] = qkv[d + h * hs + k]
            values[h, t, k] = qkv[2 * d + h * hs + k]
    n = t + 1
    att = np.empty(n)
    y = np.zeros(d)
    for h in range(n_heads):
        for s in range(n):
            att[s] = 0.0
        for k in range(hs):
            q = qkv[h * hs + k]
            for s in range(n):
                att[s] += q * keys[h, k, s]
        top = att[0]
        for s in range(1, n):
            if att[s] > top:
                top = att[s]
        total = 0.0
        for s in range(n):
            att[s] = math.exp(att[s] - top)
            total += att[s]
        for s in range(n):
            a = att[s]
            for k in range(hs):
                y[h * hs + k] += a * values[h, s, k]
        for k in range(hs):
            y[h * hs + k] /= total
    x1 = np.zeros(d)
    for i in range(d):
        yi = y[i]
        for j in range(d):
            x1[j] += yi * proj_w[i, j]
    for j in range(d):
        x1[j] = x[j] + (x1[j] + proj_b[j])

    u = np.empty(moe_w.shape[1])
    _folded(x1, moe_w, moe_b, eps2, u)  # router logits [0, E), then every expert's input
    chosen = np.empty(top_k, np.int64)  # best first, the lower id on ties (torch.topk's order here)
    for k in range(top_k):
        best = -1
        for e in range(n_experts):
            taken = False
            for j in range(k):
                if chosen[j] == e:
                    taken = True
            if not taken and (best < 0 or u[e] > u[best]):
                best = e
        chosen[k] = best
    gates = np.empty(top_k)
    total = 0.0
    for k in range(top_k):
        gates[k] = math.exp(u[chosen[k]] - u[chosen[0]])
        total += gates[k]
    f_width = (u.shape[0] - n_experts) // n_experts
    out = x1.copy()
    for k in range(top_k):
        e = chosen[k]
        g = gates[k] / total
        mlp = out_b[e].copy()  # float64, as stacked
        for f in range(f_width):
            v = u[n_experts + e * f_width + f]
            hidden = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))  # exact GELU, as F.gelu
            for j in range(d):
                mlp[j] += hidden * out_w[e * f_width + f, j]
        for j in range(d):
            out[j] += g * mlp[j]
    return out


@_compiled
def next_logprobs(x, w, b, eps):  # pragma: no cover - compiled
    """The float64 log-softmax [V] of the token after a final hidden state x (d,): LN_f and the head folded."""
    z = np.empty(w.shape[1])
    _folded(x, w, b, eps, z)
    top = z[0]
    for j in range(1, z.shape[0]):
        if z[j] > top:
            top = z[j]
    total = 0.0
    for j in range(z.shape[0]):
        z[j] -= top
        total += math.exp(z[j])
    log_total = math.log(total)
    for j in range(z.shape[0]):
        z[j] -= log_total
    return z


__all__ = ["next_logprobs", "run_positions"]
