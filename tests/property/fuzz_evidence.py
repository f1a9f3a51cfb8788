"""Mutation fuzzing of Gym evidence through plan -> materialize (issue 15, item 2).

Seeds are valid results of every evidence flavour (the reference examples, `compactsim.scenarios.payloads`
in all five shapes, bare and `/run`-wrapped, with routes and with Gym-addressed media). Operators
edit them the ways the reported failures did (huge integers, bad route envelopes, deep nesting,
swapped types, removed fields, replaced pixels, re-keyed assets, positive logprobs, stripped token
fields, and every documented `compactsim.scenarios.mutations` edit). A case passes when planning and
materialising answer with a valid plan/batch or a `CompactsimError`, and non-strict planning
returns a plan. Operators draw every choice through a `Chooser`, so the same code serves
Hypothesis (which shrinks) and the seeded long-run driver (`fuzz_driver`).
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from compactsim.harness.core.digests import canonical_digest, generation_evidence_digest
from compactsim.harness.core.errors import CompactsimError
from compactsim.harness.core.images import png_data_url
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import GRPOConfig, TrainerConfig
from compactsim.scenarios.mutations import MUTATIONS, MutationNotApplicable
from compactsim.scenarios.payloads import Call, build_response, compacted_three_calls, continuing, run_result

Payload = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
#: One rollout per group, so a single result can be materialised on its own.
FUZZ_CONFIG = TrainerConfig(grpo=GRPOConfig(num_generations_per_prompt=1, num_prompts_per_step=1))


class Chooser(Protocol):
    """Where every random choice comes from (Hypothesis data or a seeded RNG)."""

    def integer(self, lo: int, hi: int) -> int: ...


def pick(ch: Chooser, options: list[Any] | tuple[Any, ...]) -> Any:
    return options[ch.integer(0, len(options) - 1)]


# ----------------------------------------------------------------------------------------- seeds


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (2, 2)) -> str:
    w, h = size
    return png_data_url(np.full((h, w, 3), colour, dtype=np.uint8))


def _gym_addressed(resp: Payload) -> Payload:
    """Rewrite opaque media ids into Gym's content-addressed form (distinct pixels per image)."""
    assets = resp.get("media_assets") or {}
    rename: dict[str, str] = {}
    new_assets: dict[str, Any] = {}
    for k, key in enumerate(sorted(assets)):
        part = {"type": "input_image", "image_url": _png((40 * k, 90, 200 - 30 * k)), "detail": "auto"}
        digest = canonical_digest(part)
        media_id = "media-" + digest[:24]
        rename[key] = media_id
        new_assets[media_id] = {**assets[key], "media_id": media_id, "content_digest": digest, "source_part": part,
                                "original_dimensions": [2, 2]}
    resp["media_assets"] = new_assets
    for rec in resp.get("model_call_metadata") or resp.get("completion_evidence") or []:
        rec["media_ids"] = [rename.get(m, m) for m in rec["media_ids"]]
    return resp


def _routed(flavour: str, envelope: bool) -> Payload:
    c1 = Call([1, 2, 3], [11, 12])
    c2 = continuing(c1, [4], [21, 22])
    c3 = Call([7, 8], [31], boundary=True)
    for c in (c1, c2, c3):
        rows = len(c.prompt) + len(c.sampled)
        arr = np.tile(np.arange(2, dtype=np.int8), (rows, 2, 1))  # [rows, L=2, K=2]
        c.routes = (
            "nrlre1:int8:%dx2x2:%s" % (rows, base64.b64encode(arr.tobytes()).decode("ascii"))
            if envelope else arr.astype(int).tolist()
        )
    return build_response([c1, c2, c3], flavour=flavour)


def _legacy_with_images() -> Payload:
    c1 = Call([1, 2], [3])
    c2 = continuing(c1, [4], [5])
    resp = build_response([c1, c2], flavour="none")
    resp["output"].insert(2, {"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": _png((10, 20, 30)), "detail": "auto"},
        {"type": "input_text", "text": "screen"},
    ]})
    return resp


@functools.lru_cache(maxsize=1)
def seeds() -> tuple[tuple[str, Payload], ...]:
    """Valid results of every flavour; each plans (and, with a reward, materialises) cleanly."""
    out: list[tuple[str, Payload]] = []
    for path in sorted((REPO / "examples").glob("*.json")):
        example = json.loads(path.read_text())
        out.append((path.stem, example))
        out.append((path.stem + "+run", run_result(example, reward=0.5)))
    for flavour in ("transport", "full", "pr2870", "osworld", "none"):
        if flavour == "none":  # the legacy path has no boundaries: one contiguous trace
            c1 = Call([1, 2, 3], [11, 12])
            resp = build_response([c1, continuing(c1, [4], [21, 22])], flavour="none")
        else:
            resp = compacted_three_calls(flavour)
        out.append((flavour, resp))
        out.append((flavour + "+run", run_result(resp, reward=1.0)))
    for flavour in ("transport", "full", "pr2870"):
        out.append((flavour + "+gym-media+run", run_result(_gym_addressed(compacted_three_calls(flavour)), reward=0.0)))
    out.append(("transport+routes-envelope+run", run_result(_routed("transport", envelope=True))))
    out.append(("pr2870+routes-list+run", run_result(_routed("pr2870", envelope=False))))
    out.append(("none+images+run", run_result(_legacy_with_images())))
    return tuple(out)


# ------------------------------------------------------------------------------ payload access


def body(payload: Payload) -> Payload:
    return payload["response"] if isinstance(payload.get("response"), dict) and "output" not in payload else payload


def token_items(payload: Payload) -> list[dict[str, Any]]:
    out = body(payload).get("output")
    if not isinstance(out, list):
        return []
    return [i for i in out if isinstance(i, dict) and isinstance(i.get("generation_token_ids"), list)]


def records(payload: Payload) -> list[dict[str, Any]]:
    resp = body(payload)
    for key in ("model_call_metadata", "completion_evidence"):
        value = resp.get(key)
        if isinstance(value, list):
            return [r for r in value if isinstance(r, dict)]
    return []


def nodes(value: Any, *, limit: int = 4000, max_depth: int = 12) -> list[tuple[Any, ...]]:
    """Paths to every container and leaf (breadth-first, bounded), the root excluded."""
    out: list[tuple[Any, ...]] = []
    queue: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        if len(path) >= max_depth:
            continue
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            out.append(path + (key,))
            queue.append((path + (key,), child))
    return out


def get_at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def set_at(value: Any, path: tuple[Any, ...], new: Any) -> None:
    get_at(value, path[:-1])[path[-1]] = new


def _reseal(payload: Payload, index: int) -> None:
    """Recompute call `index`'s digest (or schema-2 arrays) so later rules, not the digest, fire."""
    items, recs = token_items(payload), records(payload)
    if index >= len(items) or index >= len(recs):
        return
    item, rec = items[index], recs[index]
    if not all(isinstance(item.get(f), list) for f in TOKEN_FIELDS):
        return
    if "generation_evidence_digest" in rec:
        try:
            rec["generation_evidence_digest"] = generation_evidence_digest(
                item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]
            )
        except (CompactsimError, TypeError, ValueError, OverflowError):
            pass  # not digestible; the planner must refuse it on its own
    else:
        rec["prompt_token_ids"] = copy.deepcopy(item["prompt_token_ids"])
        rec["sampled_token_ids"] = copy.deepcopy(item["generation_token_ids"])
        rec["sampled_logprobs"] = copy.deepcopy(item["generation_log_probs"])


# --------------------------------------------------------------------------------- operators

HUGE_INTS = (2**53 + 1, -(2**53) - 1, 2**63, 2**64, 4294967296, 10**20, -(10**30), 10**309, -(10**400), 10**4000)
ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 1.5, -0.0, math.nan, math.inf, -math.inf, 1e308, "", "x", "-1", "1e400",
    [], {}, [1], [[1]], {"a": 1}, ["x"],
)
ROUTE_DIMS = ("-2", "-1", "0", "1", "2", "3", "4294967296", "8589934592", "1000000000", "+1", " 1", "1_0",
              "\u0663", "", "x", "99999999999")


def op_big_int(payload: Payload, ch: Chooser) -> None:
    """A number too large for a float (or for int32) where a number belongs."""
    value = pick(ch, HUGE_INTS)
    target = ch.integer(0, 4)
    items, recs = token_items(payload), records(payload)
    if target == 0 and items:
        lps = pick(ch, items).get("generation_log_probs")
        if isinstance(lps, list) and lps:
            lps[ch.integer(0, len(lps) - 1)] = value
            return
    if target == 1 and "response" in payload:
        payload["reward"] = value
        return
    if target == 2 and recs:
        pick(ch, recs)[pick(ch, ("turn_id", "context_epoch", "policy_version", "segment_index"))] = value
        return
    if target == 3 and items:
        pick(ch, items)[pick(ch, ("prompt_token_ids", "generation_token_ids"))] = [value]
        return
    numeric = [p for p in nodes(payload) if isinstance(get_at(payload, p), (int, float)) and not isinstance(get_at(payload, p), bool)]
    if numeric:
        set_at(payload, pick(ch, numeric), value)


def _num_tokens(item: dict[str, Any]) -> int:
    """prompt + sampled length of an item whose arrays an earlier edit may have replaced."""
    return sum(len(v) for v in (item.get("prompt_token_ids"), item.get("generation_token_ids")) if isinstance(v, list))


def op_route_envelope(payload: Payload, ch: Chooser) -> None:
    """A routed-experts value with negative, zero, overflowing or non-decimal dimensions, or bad bytes."""
    items = token_items(payload)
    if not items:
        return
    item = pick(ch, items)
    kind = ch.integer(0, 5)
    if kind == 0:
        item["routed_experts"] = "nrlre1:int8:-2x-2x1:AQEBAQ=="
    elif kind == 1:
        item["routed_experts"] = "nrlre1:int8:4294967296x4294967296x1:AQEBAQ=="
    elif kind == 2:
        dims = "x".join(pick(ch, ROUTE_DIMS) for _ in range(ch.integer(1, 4)))
        size = ch.integer(0, 12)
        data = base64.b64encode(bytes(ch.integer(0, 255) for _ in range(size))).decode("ascii")
        item["routed_experts"] = f"nrlre1:{pick(ch, ('int8', 'int16', 'int32', 'int64', 'float32'))}:{dims}:{data}"
    elif kind == 3:
        rows = _num_tokens(item)
        layers, topk = ch.integer(0, 2), ch.integer(0, 2)
        ids = [ch.integer(-3, 3) for _ in range(3)]
        item["routed_experts"] = [[[ids[(r + j) % 3] for j in range(topk)] for _ in range(layers)] for r in range(rows)]
    elif kind == 4:
        rows = _num_tokens(item)
        arr = np.full((max(rows, 1), 1, 2), ch.integer(-128, 127), dtype=np.int8)
        item["routed_experts"] = f"nrlre1:int8:{max(rows, 1)}x1x2:" + base64.b64encode(arr.tobytes()).decode("ascii")
    else:
        item["routed_experts"] = pick(ch, ([[[]]], [[]], [], [[[0, 1]], [[0]]], "nrlre1", "nrlre1:int8:1x1x1:", 7))
    if ch.integer(0, 1):
        _reseal(payload, items.index(item))


def _nested(depth: int, as_dict: bool) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"a": value} if as_dict else [value]
    return value


def op_deep_nesting(payload: Payload, ch: Chooser) -> None:
    """A value nested thousands of levels deep somewhere in the payload."""
    deep = _nested(pick(ch, (40, 70, 500, 3000, 100_000)), bool(ch.integer(0, 1)))
    resp = body(payload)
    assets = resp.get("media_assets")
    if ch.integer(0, 2) == 0 and isinstance(assets, dict) and assets:
        asset = assets[pick(ch, sorted(assets))]
        if isinstance(asset, dict) and isinstance(asset.get("source_part"), dict):
            asset["source_part"][pick(ch, ("image_url", "detail", "extra"))] = deep
            return
    paths = nodes(payload)
    if paths:
        set_at(payload, pick(ch, paths), deep)


def op_swap_type(payload: Payload, ch: Chooser) -> None:
    """Any value replaced by one of another JSON type (or NaN/inf)."""
    paths = nodes(payload)
    if paths:
        set_at(payload, pick(ch, paths), copy.deepcopy(pick(ch, ODD_VALUES)))


def op_remove_field(payload: Payload, ch: Chooser) -> None:
    """A key removed from any object."""
    paths = [p for p in nodes(payload) if isinstance(get_at(payload, p), dict) and get_at(payload, p)]
    paths.append(())
    target = get_at(payload, pick(ch, paths))
    if isinstance(target, dict) and target:
        del target[pick(ch, sorted(target, key=str))]


def op_list_edit(payload: Payload, ch: Chooser) -> None:
    """A list element duplicated, dropped or moved."""
    paths = [p for p in nodes(payload) if isinstance(get_at(payload, p), list) and get_at(payload, p)]
    if not paths:
        return
    target = get_at(payload, pick(ch, paths))
    i = ch.integer(0, len(target) - 1)
    kind = ch.integer(0, 2)
    if kind == 0:
        target.insert(i, copy.deepcopy(target[i]))
    elif kind == 1:
        del target[i]
    else:
        target.append(target.pop(i))


def op_replace_pixels(payload: Payload, ch: Chooser) -> None:
    """An image's pixels replaced while its media_id and content_digest stay the same."""
    assets = body(payload).get("media_assets")
    if not isinstance(assets, dict) or not assets:
        return
    asset = assets[pick(ch, sorted(assets))]
    if not isinstance(asset, dict) or not isinstance(asset.get("source_part"), dict):
        return
    size = pick(ch, ((1, 1), (2, 2), (3, 1)))
    asset["source_part"]["image_url"] = _png((ch.integer(0, 255), ch.integer(0, 255), 7), size)


def op_rekey_asset(payload: Payload, ch: Chooser) -> None:
    """A media_assets key that differs from the asset's own media_id (references optionally follow)."""
    assets = body(payload).get("media_assets")
    if not isinstance(assets, dict) or not assets:
        return
    old = pick(ch, sorted(assets))
    new = pick(ch, ("media-" + "0" * 24, old + "-x", "ghost"))
    assets[new] = assets.pop(old)
    if ch.integer(0, 1):
        for rec in records(payload):
            if isinstance(rec.get("media_ids"), list):
                rec["media_ids"] = [new if m == old else m for m in rec["media_ids"]]


def op_positive_logprob(payload: Payload, ch: Chooser) -> None:
    """A logprob above 0, with the digest recomputed so only the sign is wrong."""
    items = token_items(payload)
    if not items:
        return
    k = ch.integer(0, len(items) - 1)
    lps = items[k].get("generation_log_probs")
    if isinstance(lps, list) and lps:
        lps[ch.integer(0, len(lps) - 1)] = pick(ch, (3.5, 0.5, 1e-300, 1e308, 1, 2**53))
        _reseal(payload, k)


def op_strip_token_fields(payload: Payload, ch: Chooser) -> None:
    """A call's only token-bearing item loses all three token fields (its record stays)."""
    items = token_items(payload)
    if items:
        item = pick(ch, items)
        for f in TOKEN_FIELDS:
            item.pop(f, None)


def op_scenario_mutation(payload: Payload, ch: Chooser) -> None:
    """One of the documented `compactsim.scenarios.mutations` edits, in place."""
    mutation = pick(ch, MUTATIONS)
    try:
        mutated = mutation.apply(payload)
    except (MutationNotApplicable, KeyError, IndexError, TypeError, AttributeError, ValueError, CompactsimError):
        return  # the mutation needs a shape an earlier edit removed
    payload.clear()
    payload.update(mutated)


def op_reseal(payload: Payload, ch: Chooser) -> None:
    """Every call's digest recomputed, so an earlier token edit reaches the rules behind the digest."""
    for k in range(len(token_items(payload))):
        _reseal(payload, k)


@dataclass(frozen=True, slots=True)
class Operator:
    name: str
    apply: Callable[[Payload, Chooser], None]


OPERATORS: tuple[Operator, ...] = tuple(
    Operator(fn.__name__.removeprefix("op_"), fn)
    for fn in (
        op_big_int, op_route_envelope, op_deep_nesting, op_swap_type, op_remove_field, op_list_edit,
        op_replace_pixels, op_rekey_asset, op_positive_logprob, op_strip_token_fields, op_scenario_mutation,
        op_reseal,
    )
)


def mutated_case(ch: Chooser) -> tuple[str, list[str], Payload]:
    """(seed name, operator names, payload): one seed and one to three operators, all drawn from `ch`."""
    name, seed = pick(ch, seeds())
    payload = copy.deepcopy(seed)
    applied: list[str] = []
    for _ in range(ch.integer(1, 3)):
        op = pick(ch, OPERATORS)
        try:
            op.apply(payload, ch)
        except Exception:  # noqa: BLE001 - an edit that cannot apply to what earlier edits left is skipped
            continue  # (e.g. deep-copying a value nested 100k deep): a limit of the fuzzer, not of the pipeline
        applied.append(op.name)
    return name, applied, payload


# ------------------------------------------------------------------------------------ the oracle


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the pipeline answered one payload: 'ok', 'typed:<code>', or a failure kind with its traceback."""

    verdict: str
    failure: str | None = None

    @property
    def untyped(self) -> bool:
        return self.failure is not None


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "code", type(exc).__name__))


def run_case(payload: Payload) -> Outcome:
    """Plan (non-strict, then strict) and materialise; only typed errors or valid results are acceptable."""
    try:
        plan = plan_rollout(payload, strict=False)
    except Exception:  # noqa: BLE001 - the point is to catch everything
        return Outcome("untyped", "non-strict plan raised:\n" + traceback.format_exc())
    try:
        plan_rollout(payload, strict=True)
        strict_verdict = "ok"
    except CompactsimError as exc:
        strict_verdict = "typed:" + _code(exc)
    except Exception:  # noqa: BLE001
        return Outcome("untyped", "strict plan raised:\n" + traceback.format_exc())
    expected = "ok" if plan.trainable else "typed:" + plan.violations[0].code
    if strict_verdict != expected:
        return Outcome("untyped", f"strict plan answered {strict_verdict}; the non-strict plan says {expected}")
    try:
        materialize([plan], FUZZ_CONFIG)
    except CompactsimError as exc:
        if plan.trainable:
            return Outcome("typed:" + _code(exc))
        return Outcome(strict_verdict)
    except Exception:  # noqa: BLE001
        return Outcome("untyped", "materialize raised:\n" + traceback.format_exc())
    if not plan.trainable:
        return Outcome("untyped", f"materialize accepted a plan with violations ({expected})")
    return Outcome("ok")


__all__ = ["OPERATORS", "Chooser", "Outcome", "mutated_case", "run_case", "seeds"]
