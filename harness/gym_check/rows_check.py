"""Materialize the plans of real-Gym payloads and check each row against the payload's own token arrays.

This is the stand-in for the audit on live payloads: the expectation comes straight from Gym's
output (a physical trace's row is its last call's prompt + sampled ids; its mask covers exactly
the sampled ids of its calls; its behaviour logprobs are Gym's), never from the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.harness.core.contract import TOKEN_FIELDS


def _expected_rows(result: Mapping[str, Any], turn_groups: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    response = result["response"] if "response" in result and "output" not in result else result
    items = [i for i in response["output"] if all(k in i for k in TOKEN_FIELDS)]
    by_turn = {t: items[t - 1] for t in range(1, len(items) + 1)}
    rows = []
    for turns in turn_groups:
        last = by_turn[turns[-1]]
        tokens = list(last["prompt_token_ids"]) + list(last["generation_token_ids"])
        mask = [0] * len(tokens)
        logprobs = [0.0] * len(tokens)
        for t in turns:
            item = by_turn[t]
            start = len(item["prompt_token_ids"])
            for j, lp in enumerate(item["generation_log_probs"]):
                mask[start + j] = 1
                logprobs[start + j] = float(lp)
        rows.append({"tokens": tokens, "mask": mask, "logprobs": logprobs})
    return rows


def check_live_rows(plans: Sequence[tuple[str, Mapping[str, Any], Any]]) -> dict[str, str]:
    """Per scenario: "ok: N rows" or the first disagreement between a materialized row and the payload."""
    if not plans:
        return {}
    try:
        import torch  # noqa: PLC0415

        from compactsim.harness.pipeline.materializer import materialize  # noqa: PLC0415
        from compactsim.harness.pipeline.train_config import TrainerConfig  # noqa: PLC0415
    except ImportError as exc:
        return {name: f"skipped: materializer unavailable ({exc})" for name, _r, _p in plans}
    torch.set_num_threads(1)
    out: dict[str, str] = {}
    for name, result, plan in plans:
        try:
            batch = materialize([plan], TrainerConfig.model_validate({"grpo": {"num_generations_per_prompt": 1}}))
        except Exception as exc:  # noqa: BLE001 - reported per scenario
            out[name] = f"materialize failed: {type(exc).__name__}: {exc}"
            continue
        expected = _expected_rows(result, [t.turn_ids for t in plan.traces])
        problem = None
        real_rows = [i for i in range(len(batch.parent_indices)) if int(batch.parent_indices[i]) >= 0]
        if len(real_rows) != len(expected):
            problem = f"{len(real_rows)} rows for {len(expected)} physical traces"
        for r, want in zip(real_rows, expected, strict=False):
            if problem:
                break
            n = int(batch.row_input_lengths[r])
            got_tokens = [int(x) for x in batch.row_input_ids[r, :n]]
            got_mask = [int(round(float(x))) for x in batch.row_token_mask[r, :n]]
            got_lp = [float(x) for x in batch.row_generation_logprobs[r, :n]]
            if got_tokens != want["tokens"]:
                problem = f"row {r}: tokens differ from the trace's last prompt + sampled ids"
            elif got_mask != want["mask"]:
                problem = f"row {r}: token mask differs from the sampled positions"
            elif any(abs(a - b) > 1e-6 for a, b, m in zip(got_lp, want["logprobs"], want["mask"], strict=True) if m):
                problem = f"row {r}: behaviour logprobs differ from Gym's"
        out[name] = problem or f"ok: {len(expected)} row(s) match Gym's token arrays"
    return out


__all__ = ["check_live_rows"]
