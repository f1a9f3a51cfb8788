"""An independent GRPO loss computed from plain rows, one row at a time, without the pipeline's loss or batching.

It checks the trainer today (rows built from the agents' ground-truth logs) and is meant to take
the oracle's expected rows later (issue 6): anything that can say, per physical row, which
tokens it holds, which are trained, their behaviour logprobs, their advantage and the row's
images can be scored here. Only what the reference runs use is implemented: the PPO-clipped
token-level policy term, the token-level importance-sampling correction ``exp(prev − gen)``
(untruncated) and the k3 KL penalty to a reference policy, normalised by the trained-token count
of all rows together (NeMo-RL's ClippedPG loss, nemo-rl-semantics.md §4). `prev` is the
current policy's own logprob (the trainer recomputes it with the weights that train).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from compactsim.harness.core.images import decode_data_url
from compactsim.harness.core.policy import TinyPolicy


@dataclass(frozen=True)
class PlainRow:
    """One physical training row, own-position layout: index t describes token t."""

    input_ids: Sequence[int]
    #: 1 where token t is trained (a sampled token), else 0.
    token_mask: Sequence[int]
    #: Behaviour logprob of token t where trained (ignored elsewhere).
    generation_logprobs: Sequence[float]
    #: The row's logical advantage (every trained token gets it).
    advantage: float
    #: Images of the row's prompt in order, each (3, H, W) in [0, 1].
    images: Sequence[torch.Tensor] = ()
    #: 0 drops the row from the loss (mask_sample); it still counts nothing then.
    sample_weight: float = 1.0
    #: (T, L, K) expert ids the forward must use (router replay); an all -1 row lets the router
    #: choose. None: the router chooses everywhere.
    routes: np.ndarray | None = None


def independent_grpo_loss(
    policy: TinyPolicy,
    rows: Sequence[PlainRow],
    *,
    reference: TinyPolicy | None = None,
    kl_beta: float = 0.0,
    ratio_clip: tuple[float, float] = (0.2, 0.2),
    importance_sampling: bool = False,
    kl_input_clamp: float = 20.0,
    kl_output_clamp: float = 10.0,
) -> torch.Tensor:
    """The batch loss as a differentiable scalar (policy dtype); see the module docstring."""
    trained = sum(sum(1 for m in row.token_mask[1:] if m) * row.sample_weight for row in rows)
    total = torch.zeros((), dtype=policy.dtype)
    for row in rows:
        ids = torch.tensor([list(row.input_ids)], dtype=torch.long)  # (1, T), no padding
        routes = None if row.routes is None else torch.as_tensor(row.routes, dtype=torch.long)[None]  # (1, T, L, K)
        logits = policy(ids, [list(row.images)], routes).logits[0]  # (T, V)
        lp_all = logits[:-1].log_softmax(-1)  # (T-1, V): position t-1 predicts token t
        lp = lp_all.gather(-1, ids[0, 1:, None])[:, 0]  # (T-1,) logprob of tokens 1..T-1
        prev = lp.detach()
        ref = None
        if kl_beta:
            assert reference is not None
            with torch.no_grad():
                ref_logits = reference(ids, [list(row.images)], routes).logits[0]
            ref = ref_logits[:-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        for t in range(1, len(row.input_ids)):
            if not row.token_mask[t] or row.sample_weight == 0:
                continue
            j = t - 1  # next-token frame index of token t
            a = row.advantage
            ratio = torch.exp(lp[j] - prev[j])
            clipped = torch.clamp(ratio, 1 - ratio_clip[0], 1 + ratio_clip[1])
            term = torch.maximum(-a * ratio, -a * clipped)
            if importance_sampling:
                term = term * math.exp(float(prev[j]) - float(row.generation_logprobs[t]))
            if kl_beta:
                assert ref is not None
                x = torch.clamp(ref[j] - lp[j], -kl_input_clamp, kl_input_clamp)
                weight = torch.exp(lp[j] - lp[j].detach())  # value 1, score-function gradient
                kl = torch.clamp(weight * (torch.exp(x) - 1 - x), -kl_output_clamp, kl_output_clamp)
                term = term + kl_beta * kl
            total = total + row.sample_weight * term
    return total / (trained + 1e-8)


def loo_grpo_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float]:
    """Leave-one-out GRPO advantages of one group: r_i minus the mean of the others, over their std (if > 0)."""
    out = []
    for i, r in enumerate(rewards):
        others = [x for k, x in enumerate(rewards) if k != i]
        if not others:
            out.append(0.0)
            continue
        b = sum(others) / len(others)
        std = float(np.std(others, ddof=1)) if len(others) > 1 else 0.0
        out.append((r - b) / (std + eps) if std > 0 else r - b)
    return out


def plain_rows_from_ground_truth(
    ground_truth: Mapping[str, Any], advantage: float, *, dtype: torch.dtype = torch.float64
) -> list[PlainRow]:
    """The rows one rollout should train as, read from the agents' ground-truth log only.

    One row per declared segment: tokens = its last call's prompt + sampled ids, trained = the
    sampled ids of every call of the segment, images = the last call's media (decoded here).
    Routes (when the calls carry them, vLLM-packed ``[P+G, L, K]`` per call): each call supplies
    the rows of the tokens it added; a call's final token, a placeholder at decode, takes the
    next call's prefill row; the final token of every segment but the last gets -1 (no next
    prefill inside the row: the router decides).
    """
    calls = {int(c["turn_id"]): c["received"] for c in ground_truth["calls"]}
    media = ground_truth["media"]
    weight = 0.0 if ground_truth["outcome"].get("mask_sample") else 1.0
    rows = []
    segments = ground_truth["expected"]["segments_declared"]
    for s, seg in enumerate(segments):
        last = calls[int(seg["turn_ids"][-1])]
        ids = list(last["prompt_token_ids"]) + list(last["generation_token_ids"])
        mask = [0] * len(ids)
        gen = [0.0] * len(ids)
        routes = None
        if all(calls[int(t)].get("routed_experts") is not None for t in seg["turn_ids"]):
            first = np.asarray(calls[int(seg["turn_ids"][0])]["routed_experts"])
            routes = np.zeros((len(ids), *first.shape[1:]), dtype=np.int64)
            done = 0
            for turn in seg["turn_ids"]:
                call = calls[int(turn)]
                call_routes = np.asarray(call["routed_experts"])
                end = len(call["prompt_token_ids"]) + len(call["generation_token_ids"])
                start_row = max(done - 1, 0)  # the previous call's final token is repaired from this prefill
                routes[start_row:end] = call_routes[start_row:end]
                done = end
            if s < len(segments) - 1:
                routes[len(ids) - 1] = -1
        for turn in seg["turn_ids"]:
            call = calls[int(turn)]
            start = len(call["prompt_token_ids"])
            for k, (tok, lp) in enumerate(zip(call["generation_token_ids"], call["generation_log_probs"], strict=True)):
                assert ids[start + k] == tok, "a segment's calls must be prefix continuations"
                mask[start + k] = 1
                gen[start + k] = float(lp)
        images = [decode_data_url(media[m]["data_url"], dtype=dtype) for m in seg["media_ids"]]
        rows.append(PlainRow(ids, mask, gen, advantage, images, weight, routes))
    return rows


__all__ = ["PlainRow", "independent_grpo_loss", "loo_grpo_advantages", "plain_rows_from_ground_truth"]
