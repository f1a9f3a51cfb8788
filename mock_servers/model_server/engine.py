"""The generation core shared by every endpoint: rendered prompt in, sampled ids + logprobs + routes out.

Scripted mode: sampled ids = `encode_action(step)` of the script step (or the digest-derived
default); logprobs = the step's `logprobs` or markers keyed by (seed, rollout, call, position);
routes = markers keyed by (seed, rollout, call, position, layer).

Policy mode: the step fixes the *structure* (``<think>``/``</think>``, tool-call markers, tool
names and arguments, the stop token) and the byte lengths of the reasoning and text spans; the
bytes of those spans are sampled from the tiny policy restricted to printable ASCII, by an
inverse-CDF draw keyed on (seed, request digest, absolute position). Every returned logprob,
forced or sampled, is the policy's **full-vocabulary** log-softmax of that token at its position,
computed by one forward over ``prompt + sampled[:-1]`` under the current weights, and the routes
are the policy's own routes from that same forward. So a trainer recomputing with the same weights
gets the same numbers (float64: |Δ| ≤ 1e-12). Note that the restricted sampling distribution is
not the reported one; that is deliberate (parseable output) and harmless for recompute checks.

Routes follow vLLM's packing: ``[P+G, L, K]``; the final row (the last sampled token, which is
never forwarded) is the placeholder ``arange(K)``.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.chat_template import ParsedCompletion, Rendered, parse_completion
from compactsim.harness.core.digests import bytes_digest, canonical_digest
from compactsim.harness.core.errors import ConfigError, ContractError
from compactsim.mock_servers.model_server.sampling import placeholder_row, sample_text_token, scripted_logprobs, scripted_routes
from compactsim.mock_servers.model_server.settings import ScriptStep, ServerSettings


class RequestRejected(Exception):
    """A client mistake the server answers with `status_code` and ``{"detail": detail}``.

    Over one of the settings' `limits`, `limit` names it and the answer is ``{"detail", "limit",
    "field"}``, `field` being the request field holding the prompt (``messages``, ``input``, ``prompt``).
    """

    def __init__(self, status_code: int, detail: str, *, limit: str | None = None, field: str | None = None) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.limit = limit
        self.field = field


KeySource = Literal["metadata", "derived"]
#: Request-metadata hints a client may send; none is required (DESIGN §6b).
HINT_KEYS: tuple[str, ...] = ("compactsim_rollout_id", "compactsim_turn", "compactsim_attempt")


@dataclass(frozen=True, slots=True)
class CallKey:
    """Which scripted call a request is: rollout, 1-based turn and 1-based attempt, and where each came from.

    `from_metadata` says the rollout was named by ``metadata.compactsim_rollout_id``; otherwise it is
    `task_rollout_key` of the conversation. Turn and attempt come from metadata hints when sent
    (an override) and are otherwise derived by `CallTracker` from the requests of that rollout.
    """

    rollout_id: str
    turn: int
    from_metadata: bool
    attempt: int = 1
    turn_source: KeySource = "metadata"
    attempt_source: KeySource = "metadata"


@dataclass(frozen=True, slots=True)
class CallHints:
    """The optional metadata hints of one request (None: not sent)."""

    rollout_id: str | None = None
    turn: int | None = None
    attempt: int | None = None


def _positive_int(md: Mapping[str, Any], name: str) -> int | None:
    value = md.get(name)
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestRejected(422, f"metadata.{name}: expected an int >= 1 (or its decimal string), found {value!r}")
    return value


def read_hints(metadata: Any) -> CallHints:
    """Validate the ``compactsim_*`` metadata hints (422 naming a malformed one); absent ones are None."""
    md = metadata if isinstance(metadata, Mapping) else {}
    rid = md.get("compactsim_rollout_id")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise RequestRejected(422, "metadata.compactsim_rollout_id: expected a non-empty string")
    return CallHints(rollout_id=rid, turn=_positive_int(md, "compactsim_turn"), attempt=_positive_int(md, "compactsim_attempt"))


def call_item_id(seed: int, key: CallKey) -> str:
    """The 12 hex digits in a call's tool-call ids (``call_<h>_<k>``): the server seed, rollout and turn.

    Not the request body: the same call gets the same ids whatever the client encodes (Gym's model
    server and compactsim's agent write different chat messages for one conversation) and on every
    attempt of it.
    """
    return canonical_digest(["call", seed, key.rollout_id, key.turn])[:12]


def call_digest(body: Mapping[str, Any]) -> str:
    """The digest that identifies a call across retries: the body without the ``compactsim_*`` hints.

    A retry repeats the same body (Gym's client does, byte for byte); a hint-sending client that
    numbers its attempts in metadata still produces the same call digest on every attempt.
    """
    md = body.get("metadata")
    if isinstance(md, Mapping) and any(k in md for k in HINT_KEYS):
        rest = {k: v for k, v in md.items() if k not in HINT_KEYS}
        body = {k: v for k, v in body.items() if k != "metadata"}
        if rest:
            body["metadata"] = rest
    return canonical_digest(body)


def _conversation(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Chat `messages` or Responses `input` as a list of items (a string input is one user message)."""
    if isinstance(body.get("messages"), list):
        items = body["messages"]
    elif isinstance(body.get("input"), str):
        items = [{"role": "user", "content": body["input"]}]
    elif isinstance(body.get("input"), list):
        items = body["input"]
    else:
        items = []
    return [it for it in items if isinstance(it, Mapping)]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, Mapping) and p.get("type") in ("text", "input_text", "output_text"))
    return ""


def _opening(body: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], bool]:
    """(leading system/developer messages + the first user message, whether that is the whole conversation)."""
    items = _conversation(body)
    head: list[Mapping[str, Any]] = []
    for i, it in enumerate(items):
        role = it.get("role")
        if it.get("type", "message") == "message" and role in ("system", "developer"):
            head.append(it)
            continue
        if it.get("type", "message") == "message" and role == "user":
            head.append(it)
            return head, i == len(items) - 1
        return head, False
    return head, bool(head)


def task_rollout_key(body: Mapping[str, Any]) -> str:
    """The rollout a request without ``compactsim_rollout_id`` belongs to: ``task-<digest16>``.

    The digest covers `instructions` and the *text* of the leading system/developer messages and
    the first user message (the task). Compaction keeps the initial context (summaries insert
    after it, recency protects its images by default, think-strip and truncation never touch it),
    and image parts are left out, so every call of an episode maps to the same key. Rollouts of
    one prompt share the key: without a rollout id the server cannot tell them apart.
    """
    head, _ = _opening(body)
    texts = [str(body.get("instructions") or "")] + [f"{it.get('role')}:{_text_of(it.get('content'))}" for it in head]
    return f"task-{canonical_digest(texts)[:16]}"


def opens_episode(body: Mapping[str, Any]) -> bool:
    """True when the conversation is only the opening (system messages + one user message): a turn-1 call."""
    head, whole = _opening(body)
    return whole and bool(head) and head[-1].get("role") == "user"


@dataclass
class _RolloutCalls:
    turns: dict[str, int] = field(default_factory=dict)  # call digest -> turn
    seen: Counter[tuple[str, int]] = field(default_factory=Counter)  # (call digest, turn) -> requests so far
    turn: int = 0  # the turn of the rollout's latest call


class CallTracker:
    """Derives turn and attempt per rollout from the requests themselves (DESIGN §6b).

    Rule, per rollout key: a call digest (`call_digest`) seen before is a retry of the turn it was
    first seen at, and its attempt is how many times that digest has arrived for that turn. A new digest is the
    next turn: 1 when the body is only the opening (`opens_episode`: a fresh episode, e.g. a rerun
    of the rollout by another client), else the rollout's latest turn + 1. This never reads the
    history's content, so compaction (dropped images, stripped reasoning, summaries that replace
    whole turns, truncated tool output) cannot change it: each call of an episode sends a body it
    has not sent before, because it carries at least the previous answer or an artifact replacing it.
    Calls inside one rollout are sequential (each needs the previous answer), so the derivation
    depends only on that rollout's own order, never on how rollouts interleave. Metadata hints
    win when sent. State grows with the number of distinct calls (bounded by the requests served).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rollouts: dict[str, _RolloutCalls] = {}

    def key(self, body: Mapping[str, Any], hints: CallHints, digest: str | None = None) -> CallKey:
        """Assign this request its `CallKey`, recording it (call once per accepted generation request)."""
        digest = digest or call_digest(body)
        from_md = hints.rollout_id is not None
        rid = hints.rollout_id if hints.rollout_id is not None else task_rollout_key(body)
        with self._lock:
            r = self._rollouts.setdefault(rid, _RolloutCalls())
            if hints.turn is not None:
                turn = hints.turn
            elif digest in r.turns:
                turn = r.turns[digest]
            else:
                turn = 1 if opens_episode(body) else r.turn + 1
            r.turns.setdefault(digest, turn)
            r.turn = turn
            r.seen[(digest, turn)] += 1
            attempt = r.seen[(digest, turn)]
        return CallKey(
            rollout_id=rid, turn=turn, from_metadata=from_md,
            attempt=hints.attempt if hints.attempt is not None else attempt,
            turn_source="metadata" if hints.turn is not None else "derived",
            attempt_source="metadata" if hints.attempt is not None else "derived",
        )


@dataclass(frozen=True, slots=True, eq=False)
class Generation:
    """One model call's evidence, before endpoint-specific serialisation and content faults."""

    prompt_ids: tuple[int, ...]
    sampled_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]
    routes: np.ndarray | None  # (P+G, L, K) int64
    finish_reason: str  # "stop" | "length"
    parsed: ParsedCompletion
    policy_version: int
    key: CallKey
    media_ids: tuple[str, ...]


def default_step(settings: ServerSettings, request_digest: str) -> ScriptStep:
    """The answer when no script step applies: a final message (policy mode: reasoning + message)."""
    if settings.mode == "policy":
        p = settings.policy
        return ScriptStep(reasoning="r" * p.default_reasoning_bytes if p.default_reasoning_bytes else None,
                          text="t" * p.default_text_bytes)
    return ScriptStep(text=f"Done ({request_digest[:8]}).")


def check_prompt_tokens(prompt: Rendered, limit: int, field: str) -> None:
    """422 naming `max_prompt_tokens` for a rendered prompt longer than `limit` (chat, responses and /tokenize alike)."""
    if len(prompt.token_ids) > limit:
        raise RequestRejected(422, f"{field}: the prompt renders to {len(prompt.token_ids)} tokens; the limit is {limit}",
                              limit="max_prompt_tokens", field=field)


def check_prefix(prompt_ids: tuple[int, ...], required: list[int] | None) -> None:
    """400 unless the rendered prompt starts with `required` (Gym's `required_prefix_token_ids`)."""
    if required is None:
        return
    n = len(required)
    if n > len(prompt_ids) or tuple(required) != prompt_ids[:n]:
        first = next((i for i, (a, b) in enumerate(zip(required, prompt_ids)) if a != b), min(n, len(prompt_ids)))
        got = prompt_ids[first] if first < len(prompt_ids) else None
        want = required[first] if first < n else None
        raise RequestRejected(
            400,
            "required_prefix_token_ids is not a prefix of the rendered prompt: "
            f"required_count={n} prompt_count={len(prompt_ids)} first_mismatch_index={first} "
            f"required_token={want} prompt_token={got}",
        )


class Engine:
    """Holds settings, the (optional) policy and its version; `generate` is deterministic per (request, version)."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._policy = None
        self._policy_version = 0
        self._weights_digest: str | None = None
        if settings.mode == "policy":
            self._install(self._seeded_policy(settings.policy.seed if settings.policy.seed is not None else settings.seed), bump=False)

    # ------------------------------------------------------------------ weights

    @property
    def policy_version(self) -> int:
        return self._policy_version

    @property
    def weights_digest(self) -> str | None:
        return self._weights_digest

    @property
    def policy(self):
        return self._policy

    def _torch_dtype(self):
        import torch

        return {"float32": torch.float32, "float64": torch.float64}[self.settings.policy.dtype]

    def _policy_config(self):
        """The shape this server's policy has, from its settings; pushed weights must have it too."""
        from compactsim.harness.core.policy import PolicyConfig

        s = self.settings
        return PolicyConfig(n_layers=s.num_layers, n_experts=s.num_experts, top_k=s.top_k)

    def _seeded_policy(self, seed: int):
        from compactsim.harness.core.policy import TinyPolicy

        return TinyPolicy.from_seed(seed, self._policy_config(), dtype=self._torch_dtype(), device=self.settings.policy.device)

    def _install(self, policy, *, bump: bool) -> int:
        digest = bytes_digest(policy.to_bytes())
        with self._lock:
            self._policy = policy
            self._weights_digest = digest
            if bump:
                self._policy_version += 1
            return self._policy_version

    def load_weights(self, data: bytes) -> int:
        """Load `TinyPolicy.to_bytes()` weights; bumps and returns `policy_version`."""
        from compactsim.harness.core.policy import TinyPolicy

        try:
            policy = TinyPolicy.load_bytes(data, dtype=self._torch_dtype(), device=self.settings.policy.device,
                                           expect=self._policy_config())
        except ConfigError as exc:
            raise RequestRejected(422, f"body: {exc.detail}") from None
        problem = _non_finite_parameter(policy)
        if problem is not None:  # a diverged trainer's weights: refused here, not a 500 on every later call
            raise RequestRejected(422, f"body: {problem}; the served weights stay at policy_version {self._policy_version}")
        return self._install(policy, bump=True)

    def load_seed(self, seed: int) -> int:
        """Re-initialise the policy from `seed`; bumps and returns `policy_version`."""
        return self._install(self._seeded_policy(seed), bump=True)

    # ------------------------------------------------------------------ generation

    def step_for(self, key: CallKey, request_digest: str) -> ScriptStep:
        steps = self.settings.script.get(key.rollout_id, ())
        if 1 <= key.turn <= len(steps):
            return steps[key.turn - 1]
        return default_step(self.settings, request_digest)

    def check_media(self, prompt: Rendered, field: str) -> None:
        """413 for an oversized image, 422 for too many or a non-data URL (never fetched or opened here: policy
        mode decodes, and checks the pixel count, in `generate`). `field` holds the prompt in the request."""
        from compactsim.harness.core.images import data_url_payload, encoded_size

        lim = self.settings.limits
        if len(prompt.images) > lim.max_images:
            raise RequestRejected(422, f"{field}: the prompt has {len(prompt.images)} images; the limit is {lim.max_images}",
                                  limit="max_images", field=field)
        for j, im in enumerate(prompt.images):
            if not im.image_url.startswith("data:image/"):
                raise RequestRejected(422, f"image {j} ({im.image_url[:40]!r}): only base64 data:image/... URLs are accepted; "
                                      "the server never reads paths or URLs")
            size = encoded_size(im.image_url)
            if size > lim.max_image_bytes:
                raise RequestRejected(413, f"{field}: image {j} is {size} bytes; the limit is {lim.max_image_bytes}",
                                      limit="max_image_bytes", field=field)
            try:
                data_url_payload(im.image_url)
            except ContractError as exc:
                raise RequestRejected(422, f"image {j}: {exc.detail}") from None

    def generate(
        self,
        prompt: Rendered,
        *,
        request_digest: str,
        key: CallKey,
        max_tokens: int | None,
        top_logprobs: int = 0,
        force_length: bool = False,
        field: str = "messages",
    ) -> Generation:
        """Answer one call. `force_length` is the `finish_length` fault: drop the stop token. `field` holds the
        prompt in the request (named by a refusal over a limit)."""
        lim = self.settings.limits
        check_prompt_tokens(prompt, lim.max_prompt_tokens, field)
        step = self.step_for(key, request_digest)
        ids = step.sampled_ids()
        budget = min(max_tokens or lim.max_new_tokens, lim.max_new_tokens)
        finish = "stop" if ids and ids[-1] == tok.TURN_END else "length"
        if len(ids) > budget:
            ids, finish = ids[:budget], "length"
        if force_length and ids and ids[-1] == tok.TURN_END and len(ids) > 1:
            ids, finish = ids[:-1], "length"
        if self.settings.mode == "scripted":
            gen = self._scripted(prompt, ids, step, key, top_logprobs)
        else:
            cap = self.settings.policy.max_sequence_tokens
            if len(prompt.token_ids) + len(ids) > cap:
                raise RequestRejected(422, f"prompt of {len(prompt.token_ids)} tokens + {len(ids)} to generate exceeds "
                                           f"policy.max_sequence_tokens={cap} (the policy's attention memory grows "
                                           "with the square of the sequence)")
            gen = self._policy_generate(prompt, ids, key, request_digest, top_logprobs, field)
        parsed = parse_completion(gen["sampled"], item_id=call_item_id(self.settings.seed, key))
        return Generation(
            prompt_ids=prompt.token_ids,
            sampled_ids=tuple(gen["sampled"]),
            logprobs=tuple(gen["logprobs"]),
            top_logprobs=gen["top"],
            routes=gen["routes"] if self.settings.return_routed_experts else None,
            finish_reason=finish,
            parsed=parsed,
            policy_version=gen["version"],
            key=key,
            media_ids=prompt.media_ids,
        )

    def _scripted(self, prompt: Rendered, ids: list[int], step: ScriptStep, key: CallKey, top_n: int) -> dict[str, Any]:
        s = self.settings
        p, g = len(prompt.token_ids), len(ids)
        if step.logprobs is not None:
            lps = [float(x) for x in step.logprobs[:g]]
        else:
            lps = scripted_logprobs(s.seed, key.rollout_id, key.turn, np.arange(p, p + g)).tolist()
        routes = scripted_routes(s.seed, key.rollout_id, key.turn, p + g, s.num_layers, s.num_experts, s.top_k)
        routes[-1] = placeholder_row(s.num_layers, s.top_k)
        top = tuple(((t, lp),) for t, lp in zip(ids, lps)) if top_n > 0 else ()
        return {"sampled": ids, "logprobs": lps, "routes": routes, "top": top, "version": self._policy_version}

    def _policy_generate(self, prompt: Rendered, template: list[int], key: CallKey, digest: str, top_n: int,
                         field: str) -> dict[str, Any]:
        import torch

        from compactsim.harness.core.images import PixelCapExceeded, decode_data_url

        s = self.settings
        images = []
        for j, im in enumerate(prompt.images):
            try:
                images.append(decode_data_url(im.image_url, max_bytes=s.limits.max_image_bytes,
                                              max_pixels=s.limits.max_image_pixels, dtype=self._torch_dtype()))
            except PixelCapExceeded as exc:
                raise RequestRejected(422, f"{field}: image {j}: {exc.detail}", limit="max_image_pixels",
                                      field=field) from None
            except ContractError as exc:
                raise RequestRejected(422, f"image {j}: {exc.detail}") from None
        free = _free_positions(template)
        with self._lock:  # one generation at a time: a consistent (weights, version) snapshot
            policy, version = self._policy, self._policy_version
            p = len(prompt.token_ids)
            sampled: list[int] = []
            state = policy.start_decoding(prompt.token_ids, images)
            pending: list[int] = []
            for i, t in enumerate(template):
                if i in free:
                    state = policy.extend_decoding(state, pending)
                    t = sample_text_token(state.logprobs, seed=s.seed, request_digest=digest, position=p + i)
                    pending = []
                sampled.append(t)
                pending.append(t)
            full = list(prompt.token_ids) + sampled
            lp_all, routes_t = policy.sequence_logprobs(full[:-1], images)  # (P+G-1, V), (P+G-1, L, K)
        g = len(sampled)
        rows = lp_all[p - 1: p - 1 + g]  # (G, V) distribution of each sampled token
        idx = torch.tensor(sampled, dtype=torch.long, device=rows.device)[:, None]
        lps = rows.gather(-1, idx)[:, 0].to("cpu", torch.float64).tolist()
        if not all(map(math.isfinite, lps)):  # finite weights whose activations overflow: no logprob to report
            bad = next(i for i, v in enumerate(lps) if not math.isfinite(v))
            raise RequestRejected(422, f"the policy (policy_version {version}) gives a non-finite logprob ({lps[bad]}) "
                                       f"for generated token {bad}: its weights overflow the {policy.dtype} forward")
        top: tuple = ()
        if top_n > 0:
            rows_np = rows.to("cpu", torch.float64).numpy()
            order = np.argsort(-rows_np, axis=-1, kind="stable")[:, :top_n]
            top = tuple(tuple((int(j), float(rows_np[r, j])) for j in order[r]) for r in range(g))
        routes = np.concatenate([routes_t.to("cpu").numpy().astype(np.int64),
                                 placeholder_row(policy.config.n_layers, policy.config.top_k)[None]], axis=0)
        return {"sampled": sampled, "logprobs": lps, "routes": routes, "top": top, "version": version}


def _non_finite_parameter(policy) -> str | None:
    """The first parameter holding a NaN or an infinity, named with its count and first index (None when all are finite)."""
    import torch

    for name, p in policy.named_parameters():
        bad = ~torch.isfinite(p.detach())
        if bool(bad.any()):
            where = tuple(int(i) for i in bad.nonzero()[0])
            return (f"parameter {name!r} holds {int(bad.sum())} non-finite value(s), the first at {list(where)}: "
                    f"{float(p.detach()[where])}")
    return None


def _free_positions(template: list[int]) -> set[int]:
    """Indices of reasoning/text bytes in `template` (sampled in policy mode); tool-call bytes stay forced."""
    free: set[int] = set()
    in_call = False
    for i, t in enumerate(template):
        if t == tok.TOOL_CALL_START:
            in_call = True
        elif t == tok.TOOL_CALL_END:
            in_call = False
        elif not tok.is_special(t) and not in_call:
            free.add(i)
    return free


def apply_content_faults(gen: Generation, kinds: frozenset[str]) -> Generation:
    """Corrupt the evidence the way a buggy backend would (missing/short logprobs, wrong or no route rows)."""
    if "missing_logprobs" in kinds:
        gen = replace(gen, logprobs=None, top_logprobs=())
    elif "logprob_length_mismatch" in kinds and gen.logprobs:
        gen = replace(gen, logprobs=gen.logprobs[:-1], top_logprobs=gen.top_logprobs[:-1])
    if "no_routes" in kinds:
        gen = replace(gen, routes=None)
    if gen.routes is not None:
        if "surplus_route_rows" in kinds:
            extra = np.repeat(gen.routes[-1:], 2, axis=0)
            gen = replace(gen, routes=np.concatenate([gen.routes, extra], axis=0))
        elif "missing_route_rows" in kinds:
            gen = replace(gen, routes=gen.routes[:-2])
        elif "one_surplus_route_row" in kinds:  # valid vLLM packing: one row past the last token
            gen = replace(gen, routes=np.concatenate([gen.routes, gen.routes[-1:]], axis=0))
    return gen


__all__ = [
    "HINT_KEYS",
    "CallHints",
    "CallKey",
    "CallTracker",
    "Engine",
    "Generation",
    "KeySource",
    "RequestRejected",
    "apply_content_faults",
    "call_digest",
    "call_item_id",
    "check_prefix",
    "check_prompt_tokens",
    "default_step",
    "opens_episode",
    "read_hints",
    "task_rollout_key",
]
