"""Differential cases: the spec replay (tests/spec_replay/replay.py) against compactsim's pipeline.

A case is a batch (one result, or a group of 2-3) drawn from a seeded RNG, with random trainer
settings both sides receive. "type" cases edit `fuzz_evidence` seeds with its operators (mostly §3
type errors); "semantic" cases make the type-preserving edits below, which reach §4-§12. `answer`
gives what one side does with a batch: ("refuse", code, rollout, turn) or ("trains", rows, metrics).
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

from compactsim.harness.core.errors import ContractError
from compactsim.harness.golden.batch_dump import batch_dump_lines
from compactsim.harness.pipeline.loss import LossConfig
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import AsyncGRPOConfig, GRPOConfig, PolicyConfig, TrainerConfig
from compactsim.harness.pipeline.trainer import check_batch
from tests.property import fuzz_evidence as FE
from tests.spec_replay import replay as R

Payload = dict[str, Any]


class RandomChooser:
    """`fuzz_evidence.Chooser` over a seeded RNG."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)


# ----------------------------------------------------------------------- type-preserving edits


def _edit_tokens(p: Payload, rng: random.Random) -> None:
    """A token changed, dropped or added (logprob too, mostly), or an array emptied; resealed mostly."""
    items = FE.token_items(p)
    if not items:
        return
    k = rng.randrange(len(items))
    item = items[k]
    field = rng.choice(["prompt_token_ids", "generation_token_ids"])
    ids, lps = item.get(field), item.get("generation_log_probs")
    if not isinstance(ids, list) or not isinstance(lps, list):
        return
    kind = rng.randint(0, 3)
    if kind == 0 and ids:
        ids[rng.randrange(len(ids))] = rng.randint(0, 200)
    elif kind == 1 and ids:
        ids.pop()
        if field == "generation_token_ids" and lps and rng.random() < 0.7:
            lps.pop()
    elif kind == 2:
        ids.append(rng.randint(0, 200))
        if field == "generation_token_ids" and rng.random() < 0.7:
            lps.append(-0.5)
    else:
        item[field] = []
        if field == "generation_token_ids":
            item["generation_log_probs"] = []
    if rng.random() < 0.8:
        FE._reseal(p, k)


def _edit_logprob(p: Payload, rng: random.Random) -> None:
    items = FE.token_items(p)
    if items:
        k = rng.randrange(len(items))
        lps = items[k].get("generation_log_probs")
        if isinstance(lps, list) and lps:
            lps[rng.randrange(len(lps))] = rng.choice([0.0, -0.0, 0, 5e-324, 1e-45, 3.0e38, -3.0e38, 1e-7, -1])
            if rng.random() < 0.8:
                FE._reseal(p, k)


def _edit_record(p: Payload, rng: random.Random) -> None:
    """A record's turn id, append flag, compaction event or policy version changed."""
    recs = FE.records(p)
    if not recs:
        return
    rec = rng.choice(recs)
    events = FE.body(p).get("boundary_events") or []
    kind = rng.randint(0, 3)
    if kind == 0:
        rec["turn_id"] = rng.randint(1, 5)
    elif kind == 1:
        rec["expected_append_compatible"] = not rec.get("expected_append_compatible")
    elif kind == 2:
        rec["compaction_event_id"] = rng.choice([None, "ghost-event"] + [e["event_id"] for e in events])
    else:
        rec["policy_version"] = rng.choice([None, 0, 1, 2])


def _edit_events(p: Payload, rng: random.Random) -> None:
    events = FE.body(p).setdefault("boundary_events", [])
    kind = rng.randint(0, 3)
    if kind == 0 and events:
        rng.choice(events)["applies_to_step"] = rng.randint(0, 5)
    elif kind == 1 and events:
        events.pop(rng.randrange(len(events)))
    elif kind == 2:
        events.append({"event_id": "extra-ev", "trigger_after_step": 1, "applies_to_step": rng.randint(1, 4)})
    elif events:
        events.append(copy.deepcopy(rng.choice(events)))


def _edit_media_ids(p: Payload, rng: random.Random) -> None:
    recs = [r for r in FE.records(p) if isinstance(r.get("media_ids"), list)]
    if not recs:
        return
    media = rng.choice(recs)["media_ids"]
    assets = sorted(FE.body(p).get("media_assets") or {})
    kind = rng.randint(0, 3)
    if kind == 0 and media:
        media.pop(rng.randrange(len(media)))
    elif kind == 1 and len(media) > 1:
        media.reverse()
    elif kind == 2 and assets:
        media.append(rng.choice(assets))
    else:
        media.insert(0, rng.choice(["ghost", "media-" + "a" * 24]))


def _edit_versions(p: Payload, rng: random.Random) -> None:
    version = rng.choice([None, 0, 1, 2])
    items = FE.token_items(p)
    if rng.random() < 0.5 and "response" in p:
        p["trainer_policy_version"] = version
    for item in items if rng.random() < 0.5 else items[:1]:
        item["policy_version"] = version


def _edit_routes(p: Payload, rng: random.Random) -> None:
    """Routes added with a right, short or long row count, a row partly −1, a layer more, or removed."""
    items = FE.token_items(p)
    if not items:
        return
    item = rng.choice(items)
    routes = item.get("routed_experts")
    kind = rng.randint(0, 4)
    if kind == 0 or not isinstance(routes, list) or not routes:
        rows = FE._num_tokens(item) + rng.choice([0, 0, 1, -1, 2])
        layers, topk = rng.choice([(2, 2), (2, 2), (1, 2), (2, 1)])
        item["routed_experts"] = [[[(j + r) % 4 for j in range(topk)] for _ in range(layers)] for r in range(max(rows, 0))]
    elif kind == 1:
        routes[rng.randrange(len(routes))][0][0] = -1
    elif kind == 2:
        for row in routes:
            row.append(list(row[0]))
    elif kind == 3:
        item.pop("routed_experts")
    else:
        for other in items:
            other.pop("routed_experts", None)
    for k in range(len(items)):
        if rng.random() < 0.5:
            FE._reseal(p, k)


def _edit_reward(p: Payload, rng: random.Random) -> None:
    if "response" in p:
        kind = rng.randint(0, 2)
        if kind == 0:
            p.pop("reward", None)
        elif kind == 1:
            p["reward"] = rng.choice([0, 1, 0.25, -3, 2**53])
        else:
            p["instance_config"] = {"mask_sample": rng.random() < 0.5}


def _edit_identity(p: Payload, rng: random.Random) -> None:
    """Grouping fields, a record's or both contracts' rollout ids, or an unknown `*_contract` key."""
    resp = FE.body(p)
    key = next((k for k in R.CONTRACT_KEYS if isinstance(resp.get(k), dict)), None)
    if key is None:
        resp["id"] = rng.choice(["resp-x", "a", None])
        return
    contract = resp[key]
    kind = rng.randint(0, 4)
    if kind == 0:
        contract[rng.choice(["rollout_index", "group_id", "task_id"])] = None
    elif kind == 1 and FE.records(p):
        rng.choice(FE.records(p))["rollout_id"] = "other"
    elif kind == 2:
        other = copy.deepcopy(contract)
        other["rollout_id"] = rng.choice([contract["rollout_id"], "zzz"])
        if key == "context_compaction_contract":
            other.pop("schema_version", None)
            other.pop("mode", None)
            resp["rollout_trace_contract"] = other
        else:
            resp["context_compaction_contract"] = {**other, "schema_version": 3, "mode": "exact_trace_authority"}
    elif kind == 3:
        resp["foo_contract"] = rng.choice([None, {"rollout_id": "x"}])
    else:
        contract["rollout_id"] = rng.choice(["a", "z"])
        for rec in FE.records(p):
            rec["rollout_id"] = contract["rollout_id"]


def _edit_calls(p: Payload, rng: random.Random) -> None:
    """A record dropped, duplicated or swapped with the next, or a token item dropped or duplicated."""
    resp = FE.body(p)
    recs = next((resp[k] for k in ("model_call_metadata", "completion_evidence") if isinstance(resp.get(k), list)), [])
    out = resp["output"]
    calls = [k for k, item in enumerate(out) if isinstance(item, dict) and "generation_token_ids" in item]
    kind = rng.randint(0, 3)
    if kind == 0 and recs:
        recs.pop(rng.randrange(len(recs)))
    elif kind == 1 and recs:
        i = rng.randrange(len(recs))
        recs.insert(i, copy.deepcopy(recs[i]))
    elif kind == 2 and len(recs) > 1:
        i = rng.randrange(len(recs) - 1)
        recs[i], recs[i + 1] = recs[i + 1], recs[i]
    elif calls:
        j = rng.choice(calls)
        if rng.random() < 0.5:
            out.pop(j)
        else:
            out.insert(j, copy.deepcopy(out[j]))


def _edit_images(p: Payload, rng: random.Random) -> None:
    """Declared image dimensions changed, or an image part (decodable or not) added to a message."""
    assets = FE.body(p).get("media_assets")
    if isinstance(assets, dict) and assets and rng.random() < 0.5:
        assets[rng.choice(sorted(assets))]["original_dimensions"] = rng.choice([[2, 2], [3, 2], [1, 1], None])
        return
    url = rng.choice([FE._png((1, 2, 3)), {"url": FE._png((4, 5, 6))}, "http://x/y.png", None])
    item = {"type": "message", "role": rng.choice(["user", "assistant", "tool"]),
            "content": [{"type": rng.choice(["input_image", "image", "image_url"]), "image_url": url}]}
    out = FE.body(p)["output"]
    out.insert(rng.randrange(len(out) + 1), item)


SEMANTIC_EDITS = (_edit_tokens, _edit_logprob, _edit_record, _edit_events, _edit_media_ids, _edit_versions,
                  _edit_routes, _edit_reward, _edit_identity, _edit_calls, _edit_images)


# ----------------------------------------------------------------------------------- cases


def _as_member(payload: Payload, k: int, rng: random.Random) -> Payload:
    """Batch member k of group "grp": its own rollout id, index and reward."""
    if "response" not in payload:
        payload = FE.run_result(payload, reward=1.0)
    resp = FE.body(payload)
    if isinstance(resp.get("id"), str):
        resp["id"] = f"resp-{k}"
    for key in R.CONTRACT_KEYS:
        if isinstance(resp.get(key), dict):
            resp[key].update(rollout_id=f"r{k}", group_id="grp", rollout_index=k)
    for rec in FE.records(payload):
        rec["rollout_id"] = f"r{k}"
    payload["reward"] = rng.choice([0.0, 1.0, 0.5, -1.0, 2.0])
    return payload


def make_case(mode: str, seed: int, case: int) -> tuple[list[Payload], dict[str, Any]]:
    """(results, trainer settings) of one case; mode "type" or "semantic"."""
    rng = random.Random(f"spec-replay-diff/{mode}/{seed}/{case}")
    chooser = RandomChooser(rng)
    size = 1 if rng.random() < 0.55 else rng.randint(2, 3)
    all_seeds = FE.seeds()
    _, base = all_seeds[rng.randrange(len(all_seeds))]
    results = []
    for k in range(size):
        payload = copy.deepcopy(base)
        if size > 1:
            payload = _as_member(payload, k, rng)
        if size == 1 or rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                try:
                    if mode == "type":
                        FE.pick(chooser, FE.OPERATORS).apply(payload, chooser)
                    else:
                        rng.choice(SEMANTIC_EDITS)(payload, rng)
                except Exception:  # noqa: BLE001 - an edit that cannot apply to what earlier edits left
                    continue
        results.append(payload)
    has_routes = any(item.get("routed_experts") is not None for p in results for item in FE.token_items(p))
    async_mode = rng.random() < 0.2
    trainer = {
        "num_generations_per_prompt": size if rng.random() < 0.9 else rng.choice([1, 2, 3]),
        "leave_one_out": rng.random() < 0.8, "normalize": rng.random() < 0.8,
        "clip_low": rng.choice([None, None, -0.5]), "clip_high": rng.choice([None, None, 0.5]),
        "dp_size": rng.choice([1, 1, 2]), "micro_batch_size": rng.choice([1, 1, 2, 3]),
        "async_mode": async_mode, "importance_sampling_correction": async_mode or rng.random() < 0.2,
        "router_replay": rng.random() < (0.5 if has_routes else 0.05),
        "max_total_sequence_length": rng.choice([4096] * 8 + [8, 12, 20]),
        "make_sequence_length_divisible_by": rng.choice([1, 1, 4]),
    }
    return results, trainer


# --------------------------------------------------------------------------- the two answers


def _row(row: dict[str, Any]) -> dict[str, Any]:
    """A rows-dump line in a comparable form: trained positions only, mask as 0/1."""
    n = len(row["input_ids"])
    if "token_mask" in row:
        mask = [int(m) for m in row["token_mask"]]
    else:
        mask = [0] * n
        for start, end in row["mask_spans"]:
            mask[start:end] = [1] * (end - start)
    out = {key: row.get(key) for key in ("physical_trace_id", "logical_rollout_id", "parent_index", "input_ids",
                                         "rollout_advantage", "sample_mask")}
    out.update(mask=mask, logprobs=[row["generation_logprobs"][i] for i in range(n) if mask[i]],
               advantages=[row["advantages"][i] for i in range(n) if mask[i]])
    if row["parent_index"] >= 0:
        out.update({key: row.get(key) for key in ("trace_index", "generation_policy_version", "media_ids",
                                                  "pixel_digests", "routed_experts_sentinel_positions",
                                                  "routed_experts")})
    return out


def _config(t: dict[str, Any]) -> TrainerConfig:
    return TrainerConfig(
        grpo=GRPOConfig(num_generations_per_prompt=t["num_generations_per_prompt"], num_prompts_per_step=1,
                        use_leave_one_out_baseline=t["leave_one_out"], normalize_rewards=t["normalize"],
                        advantage_clip_low=t["clip_low"], advantage_clip_high=t["clip_high"],
                        async_grpo=AsyncGRPOConfig(enabled=t["async_mode"])),
        loss_fn=LossConfig(use_importance_sampling_correction=t["importance_sampling_correction"]),
        policy=PolicyConfig(dp_size=t["dp_size"], train_micro_batch_size=t["micro_batch_size"],
                            train_global_batch_size=t["num_generations_per_prompt"],
                            router_replay_enabled=t["router_replay"],
                            max_total_sequence_length=t["max_total_sequence_length"],
                            make_sequence_length_divisible_by=t["make_sequence_length_divisible_by"],
                            precision="float64", logprob_dtype="float64"),
    )


def pipeline_answer(results: list[Payload], t: dict[str, Any]) -> tuple[Any, ...]:
    config = _config(t)
    try:
        batch = materialize([plan_rollout(r, strict=True) for r in results], config)
        check_batch(batch, config)
    except ContractError as exc:
        return ("refuse", exc.code, exc.rollout_id, exc.turn_id)
    rows = [_row(row) for row in batch_dump_lines(batch, scenario="diff", step=0)]
    return ("trains", rows, batch.metrics())


def replay_answer(results: list[Payload], t: dict[str, Any]) -> tuple[Any, ...]:
    trainer = R.Trainer.of(t)
    try:
        ordered = R.check_batch([R.read_rollout(r) for r in results], trainer)
        rows, metrics = R.build_rows("diff", 0, ordered, trainer, {})
    except R.Refusal as refusal:
        return ("refuse", refusal.code, refusal.rollout_id, refusal.turn_id)
    return ("trains", [_row(row) for row in rows], metrics)


def same(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-9 (lists and dicts element by element)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9,
                                                                                            abs_tol=1e-9)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b
