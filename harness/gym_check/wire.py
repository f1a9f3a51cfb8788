"""Our two loopback helpers in a live check, and the wire table they make possible.

- `WireRecorder`: sits between the revision's model server and `compactsim serve`, forwards every
  request unchanged and keeps both bodies. Its log is the ground truth of what was sent and served.
- `MockResources`: the only mocked Gym server. It answers `/seed_session`, each tool call with the
  scenario's scripted tool output, and `/verify` through compactsim's reward server.

`wire_summary` turns the recorded exchanges into the report's wire section.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx

from compactsim.agents.rollout.script import ROLLOUT_KEY

#: How long the recorder waits on the upstream model server (connect, each read and write).
UPSTREAM_TIMEOUT_S = 120.0
#: The cookie that carries the rollout id from `/seed_session` to each tool call (and back).
_COOKIE = "compactsim_rollout"
#: What NeMo-Gym 0.7.0's VLLMModelWithCompaction reads from a chat completion (reference "Wire facts"),
#: as (path, required). A required field the server omits fails the call inside Gym.
GYM_READS: tuple[tuple[str, bool], ...] = (
    ("prompt_token_ids", True),
    ("choices[].token_ids", True),
    ("choices[].logprobs.content[].token", True),
    ("choices[].logprobs.content[].logprob", True),
    ("choices[].finish_reason", True),
    ("choices[].message.content", False),
    ("choices[].message.reasoning_content", False),
    ("choices[].message.tool_calls", False),
    ("choices[].message.routed_experts", False),
    ("usage", False),
)


class WireRecorder:
    """A forwarding proxy that logs every exchange (request JSON, status, response JSON) in arrival order."""

    def __init__(self) -> None:
        self.upstream: str | None = None
        self._lock = threading.Lock()
        self._exchanges: list[dict[str, Any]] = []

    def reset(self, upstream: str) -> None:
        with self._lock:
            self.upstream = upstream
            self._exchanges = []

    def exchanges(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._exchanges)

    def unscripted(self) -> list[dict[str, Any]]:
        """Tool calls the script had no output for (a lost rollout cookie, or a model that calls too often)."""
        with self._lock:
            return [dict(c) for c in self.calls if not c["scripted"]]

    def app(self) -> Any:
        """The proxy; one HTTP client to the upstream for the app's lifetime (uvicorn's lifespan opens and closes it)."""
        from starlette.applications import Starlette  # noqa: PLC0415
        from starlette.requests import Request  # noqa: PLC0415
        from starlette.responses import Response  # noqa: PLC0415
        from starlette.routing import Route  # noqa: PLC0415

        async def forward(request: Request) -> Response:
            raw = await request.body()
            upstream = self.upstream
            if upstream is None:
                return Response(b'{"detail":"no upstream"}', status_code=503, media_type="application/json")
            headers = {"content-type": request.headers.get("content-type", "application/json")}
            client: httpx.AsyncClient = request.state.client
            answer = await client.request(request.method, f"{upstream}{request.url.path}", content=raw, headers=headers)
            entry = {"method": request.method, "path": request.url.path, "request": _json_or_none(raw),
                     "status": answer.status_code, "response": _json_or_none(answer.content)}
            with self._lock:
                entry["seq"] = len(self._exchanges)
                self._exchanges.append(entry)
            return Response(answer.content, status_code=answer.status_code,
                            media_type=answer.headers.get("content-type", "application/json"))

        return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])],
                         lifespan=_client_lifespan(lambda: httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT_S)))


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


class MockResources:
    """Gym's resources server, mocked: scripted tool outputs per rollout and compactsim's reward on `/verify`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tools: dict[str, list[str]] = {}
        self._next: Counter[str] = Counter()
        self._reward_app: Any = None
        self.calls: list[dict[str, Any]] = []

    def reset(self, tool_outputs: Mapping[str, Sequence[str]], reward_settings: Mapping[str, Any]) -> None:
        from compactsim.mock_servers.reward_server import RewardSettings  # noqa: PLC0415
        from compactsim.mock_servers.reward_server import create_app as reward_app  # noqa: PLC0415

        with self._lock:
            self._tools = {rid: list(outs) for rid, outs in tool_outputs.items()}
            self._next = Counter()
            self._reward_app = reward_app(RewardSettings.model_validate(dict(reward_settings)))
            self.calls = []

    def _tool_output(self, rollout: str, name: str) -> tuple[int, str]:
        with self._lock:
            k = self._next[rollout]
            self._next[rollout] += 1
            outs = self._tools.get(rollout, [])
            self.calls.append({"rollout_id": rollout, "tool": name, "index": k, "scripted": k < len(outs)})
        if k >= len(outs):
            return 404, json.dumps({"error": f"no scripted result #{k} for rollout {rollout!r}"})
        return 200, outs[k]

    def unscripted(self) -> list[dict[str, Any]]:
        """Tool calls the script had no output for (a lost rollout cookie, or a model that calls too often)."""
        with self._lock:
            return [dict(c) for c in self.calls if not c["scripted"]]

    def app(self) -> Any:
        from starlette.applications import Starlette  # noqa: PLC0415
        from starlette.requests import Request  # noqa: PLC0415
        from starlette.responses import JSONResponse, Response  # noqa: PLC0415
        from starlette.routing import Route  # noqa: PLC0415

        async def seed_session(request: Request) -> Response:
            body = await request.json()
            params = body.get("responses_create_params") or {}
            rollout = str((params.get("metadata") or {}).get(ROLLOUT_KEY, ""))
            response = JSONResponse({})
            response.set_cookie(_COOKIE, rollout)
            return response

        async def verify(request: Request) -> Response:
            body = await request.json()
            params = body.get("responses_create_params") or {}
            ask = {"responses_create_params": params, "response": body.get("response"),
                   "rollout_id": (params.get("metadata") or {}).get(ROLLOUT_KEY),
                   "rollout_index": body.get("context_compaction_rollout_index")}
            client: httpx.AsyncClient = request.state.client
            answer = await client.post("/verify", json=ask)
            if answer.status_code != 200:
                return Response(answer.content, status_code=answer.status_code, media_type="application/json")
            data = answer.json()
            out = {**body, "reward": float(data["reward"])}
            if data.get("instance_config") is not None:
                out["instance_config"] = data["instance_config"]
            return JSONResponse(out)

        async def tool(request: Request) -> Response:
            rollout = request.cookies.get(_COOKIE, "")
            status, text = self._tool_output(rollout, request.path_params["name"])
            response = Response(text.encode("utf-8"), status_code=status, media_type="text/plain")
            # Gym's agent carries on with the cookies of the last answer (as a session middleware
            # re-sends them on every response): without this a turn's second tool call is anonymous
            response.set_cookie(_COOKIE, rollout)
            return response

        async def reward(scope: Any, receive: Any, send: Any) -> None:  # the reward app of the current scenario
            await self._reward_app(scope, receive, send)

        def reward_client() -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=reward), base_url="http://reward")

        return Starlette(routes=[
            Route("/seed_session", seed_session, methods=["POST"]),
            Route("/verify", verify, methods=["POST"]),
            Route("/{name}", tool, methods=["POST"]),
        ], lifespan=_client_lifespan(reward_client))


def _client_lifespan(make: Callable[[], httpx.AsyncClient]) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """A Starlette lifespan holding one HTTP client for every request of the app (`request.state.client`)."""

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[dict[str, Any]]:
        async with make() as client:
            yield {"client": client}

    return lifespan


# ---------------------------------------------------------------------------------------------
# the wire section


def _leaf_paths(value: Any, prefix: str = "") -> set[str]:
    """Dotted key paths in `value`; list elements collapse to ``[]``; leaves and containers both listed."""
    out: set[str] = set()
    if isinstance(value, Mapping):
        for key, sub in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            out |= _leaf_paths(sub, path)
    elif isinstance(value, list):
        for sub in value:
            out |= _leaf_paths(sub, f"{prefix}[]")
    return out


def _has_path(response: Any, path: str) -> bool:
    nodes = [response]
    for part in path.split("."):
        name, many = (part[:-2], True) if part.endswith("[]") else (part, False)
        nxt = []
        for node in nodes:
            if not isinstance(node, Mapping) or name not in node:
                continue
            value = node[name]
            if many:
                if not isinstance(value, list):
                    continue
                nxt.extend(value)
            else:
                nxt.append(value)
        if not nxt:
            return False
        nodes = nxt
    return True


def _message_paths(request: Mapping[str, Any]) -> set[str]:
    """`messages[]` part shapes: role, content kinds (`content[].type=image_url`), assistant fields."""
    out: set[str] = set()
    for msg in request.get("messages") or []:
        if not isinstance(msg, Mapping):
            continue
        role = msg.get("role")
        for key in msg:
            out.add(f"messages[role={role}].{key}")
        content = msg.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping):
                    out.add(f"messages[role={role}].content[].type={part.get('type')}")
    return out


def wire_summary(exchanges: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Request fields the revision sent, response fields it reads, required ones the server omitted."""
    by_path: dict[str, list[Mapping[str, Any]]] = {}
    for ex in exchanges:
        by_path.setdefault(str(ex["path"]), []).append(ex)
    endpoints = []
    for path in sorted(by_path):
        group = by_path[path]
        requests = [ex["request"] for ex in group if isinstance(ex.get("request"), Mapping)]
        top = sorted(set().union(*(set(r) for r in requests))) if requests else []
        messages = sorted(set().union(*(_message_paths(r) for r in requests))) if requests else []
        ok = [ex["response"] for ex in group if ex.get("status") == 200 and isinstance(ex.get("response"), Mapping)]
        served = sorted(set().union(*(_leaf_paths(r) for r in ok))) if ok else []
        entry: dict[str, Any] = {
            "path": path,
            "calls": len(group),
            "statuses": dict(sorted(Counter(str(ex.get("status")) for ex in group).items())),
            "request_fields": top,
            "request_message_fields": messages,
            "response_fields": served,
        }
        if path.endswith("/chat/completions") and ok:
            entry["revision_reads"] = [
                {"field": f, "required": req, "served": all(_has_path(r, f) for r in ok)} for f, req in GYM_READS
            ]
            entry["missing_required"] = [f for f, req in GYM_READS if req and not all(_has_path(r, f) for r in ok)]
            metadata = [r.get("metadata") for r in requests]
            entry["metadata_constant_per_rollout"] = _metadata_constant(metadata)
            entry["calls_without_required_prefix"] = sum(1 for r in requests if r.get("required_prefix_token_ids") is None)
        endpoints.append(entry)
    return {"endpoints": endpoints, "exchanges": len(exchanges),
            "mocked": ["resources server (/seed_session, tools, /verify)"]}


def _metadata_constant(metadata: Sequence[Any]) -> bool:
    seen: dict[str, str] = {}
    for md in metadata:
        if not isinstance(md, Mapping):
            continue
        key = str(md.get(ROLLOUT_KEY))
        text = json.dumps(md, sort_keys=True)
        if seen.setdefault(key, text) != text:
            return False
    return True


__all__ = ["GYM_READS", "ROLLOUT_KEY", "MockResources", "WireRecorder", "wire_summary"]
