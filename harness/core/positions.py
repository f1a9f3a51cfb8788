"""The tiny policy's sinusoidal position rows, shared by its torch forward and its numpy decoding."""

from __future__ import annotations

import math

import torch


def sinusoid(seq_len: int, d: int, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rows [0, seq_len) of the sinusoidal table (Vaswani et al. 2017, §3.5): computed in float64, then cast."""
    pos = torch.arange(seq_len, dtype=torch.float64, device=device)[:, None]  # (S, 1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64, device=device) * (-math.log(10000.0) / d))  # (d/2,)
    pe = torch.zeros(seq_len, d, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.to(dtype)  # (S, d)


__all__ = ["sinusoid"]
