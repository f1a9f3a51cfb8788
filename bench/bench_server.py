"""Mock model server throughput against a bare FastAPI endpoint, measured side by side in one run.

Both servers run as uvicorn subprocesses on 127.0.0.1 (one worker each, the same HTTP stack);
this process drives 32 concurrent keep-alive connections against each in interleaved rounds
after a burn-in. The load generator writes pre-built HTTP/1.1 requests on raw asyncio streams and
reads each answer by its Content-Length: an httpx client costs about 3 ms of this process's CPU
per request at this concurrency, which capped both servers near 340 req/s and showed a ratio of
~1 that measured the client, not the servers. The bare endpoint returns a fixed body of the same
size as a scripted answer, so the ratio measures what the mock costs on top of FastAPI: parsing,
digesting, rendering, scripted logprobs/routes and serialisation. The in-process ASGI comparison
(no sockets) isolates the handler cost; target: scripted mock >= 0.5x the bare handler's requests/s.
Two bounds are timed in the same rounds and reported beside it (no target): the mock app with its
chat handler answering at once (the ceiling any handler could reach behind the mock's middlewares
and routing) and a plain FastAPI endpoint that validates the body into the same pydantic model and
returns the same answer as a `JSONResponse` (the least work this endpoint's contract implies).

Policy-mode generation speed is measured in-process (no HTTP), side by side against the
module-path cached decoding the issue measured (`ModulePathDecoding`: a torch KV cache run through
`_Block.forward` and module calls); the candidate samples with `numpy_decoding` on the CPU (compiled one-position steps). Both
must sample the same tokens with the same logprobs and routes (the authoritative full forward is
shared, so the ceiling is baseline / that forward). Target: >= 4x generated tokens/s. The 16
prompts share their first 69 of 75 tokens, as a GRPO group's do: after the burn-in the candidate
takes their first two 32-position chunks from its prefix cache; the same run with the cache
emptied before every request is reported too.

    .venv/bin/python bench/bench_server.py [--rounds 5] [--per-client 10]

Figures also go to `bench/results/server.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from starlette.requests import Request  # module level: the bare app's annotations resolve here
from starlette.responses import Response

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_io import Metric, write_result  # noqa: E402
from compactsim.mock_servers.model_server.schemas import ChatCompletionRequest  # noqa: E402  (resolves `validated`'s body)

CLIENTS = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Scripted turns per client: every request of a run is a call of its own (see `_bodies`), never a retry.
TURNS = 128


def _bodies(turn: int = 1) -> list[dict]:
    """One request per client: a short computer-use style conversation with metadata, as call `turn` of its rollout.

    The turn hint makes each (client, turn) a distinct call with its own scripted logprobs and routes, as a
    collection sends them; re-sending one body would measure retries of a single call instead.
    """
    if not 1 <= turn <= TURNS:
        raise ValueError(f"turn {turn}: the bench script has turns 1..{TURNS}")
    out = []
    for i in range(CLIENTS):
        out.append({
            "model": "m",
            "messages": [
                {"role": "system", "content": "You operate a desktop. Use tools."},
                {"role": "user", "content": f"Open the settings panel (task {i})."},
            ],
            "logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True, "return_token_ids": True,
            "metadata": {"compactsim_rollout_id": f"bench-{i}", "compactsim_turn": str(turn)},
        })
    return out


def _settings_json() -> str:
    """Every turn answers the same step (reasoning and one tool call), so every answer has the bare body's shape."""
    step = {"reasoning": "I should open the settings first.", "tool_calls": [{"name": "click", "arguments": {"x": 120, "y": 48}}]}
    script = {f"bench-{i}": [step] * TURNS for i in range(CLIENTS)}
    return json.dumps({"mode": "scripted", "seed": 1, "script": script})


def _serve(kind: str, port: int, fixed_path: Path | None) -> subprocess.Popen:
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import bench.bench_server as b; b._run_server({kind!r}, {port}, {str(fixed_path)!r})"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _run_server(kind: str, port: int, fixed_path: str) -> None:
    import uvicorn
    from fastapi import FastAPI

    if kind == "bare":
        body = Path(fixed_path).read_bytes()
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def fixed(request: Request) -> Response:
            await request.body()
            return Response(content=body, media_type="application/json")

        @app.get("/health")
        async def health() -> Response:
            return Response(content=b'{"status":"ok"}', media_type="application/json")
    else:
        from compactsim.harness.core.policy import configure_determinism
        from compactsim.mock_servers.model_server import ServerSettings, create_app

        configure_determinism()
        app = create_app(ServerSettings.model_validate_json(Path(fixed_path).read_text()))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


async def _wait(url: str) -> None:
    async with httpx.AsyncClient() as c:
        for _ in range(400):
            try:
                if (await c.get(url + "/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"server at {url} did not start")


def _request_bytes(body: dict) -> bytes:
    """One pre-built HTTP/1.1 POST of `body` to the chat endpoint (keep-alive is HTTP/1.1's default)."""
    payload = json.dumps(body).encode("utf-8")
    head = ("POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n")
    return head.encode("ascii") + payload


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one answer; uvicorn sends a Content-Length for a plain `Response`."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = next((int(v) for k, _, v in (line.partition(b":") for line in lines[1:]) if k.strip().lower() == b"content-length"), None)
    if length is None:
        raise RuntimeError(f"answer without content-length: {head[:200]!r}")
    return status, await reader.readexactly(length)


async def _round(port: int, requests: list[list[bytes]]) -> tuple[float, list[float]]:
    """Requests/s and per-request latencies (s): one keep-alive connection per client, sending its requests in order."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in requests]
    lat: list[float] = []

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sequence: list[bytes]) -> None:
        for request in sequence:
            t0 = time.perf_counter()
            writer.write(request)
            status, body = await _read_answer(reader)
            lat.append(time.perf_counter() - t0)
            if status != 200:
                raise RuntimeError(f"port {port}: {status} {body[:200]!r}")

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(r, w, q) for (r, w), q in zip(conns, requests)))
        return sum(map(len, requests)) / (time.perf_counter() - t0), lat
    finally:
        for _, w in conns:
            w.close()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _http_bench(rounds: int, per_client: int, tmp: Path) -> dict:
    bodies = _bodies()
    settings_path = tmp / "bench_server_settings.json"
    settings_path.write_text(_settings_json())
    fixed_path = tmp / "bench_server_fixed.json"
    ports = {"bare": _free_port(), "mock": _free_port()}
    mock = _serve("mock", ports["mock"], settings_path)
    bare = None
    try:
        mock_url, bare_url = f"http://127.0.0.1:{ports['mock']}", f"http://127.0.0.1:{ports['bare']}"
        await _wait(mock_url)
        async with httpx.AsyncClient() as c:  # the fixed body = a real scripted answer
            fixed_path.write_bytes((await c.post(mock_url + "/v1/chat/completions", json=bodies[0])).content)
        bare = _serve("bare", ports["bare"], fixed_path)
        await _wait(bare_url)
        # per client, the calls of a round: turns after those of the burn-in and the earlier rounds (each server
        # sees every call once; the bare one ignores them)
        def calls(first_turn: int, count: int) -> list[list[bytes]]:
            turns = [[_request_bytes(b) for b in _bodies(first_turn + k)] for k in range(count)]
            return [list(client) for client in zip(*turns)]

        res: dict[str, list] = {"bare": [], "mock": [], "bare_lat": [], "mock_lat": []}
        for name in ("bare", "mock"):  # burn-in
            await _round(ports[name], calls(2, 2))
        for r in range(rounds):
            for name in ("bare", "mock"):
                rps, lat = await asyncio.wait_for(_round(ports[name], calls(4 + r * per_client, per_client)), timeout=120)
                res[name].append(rps)
                res[f"{name}_lat"] += lat
        return {
            "bare_rps": statistics.median(res["bare"]), "mock_rps": statistics.median(res["mock"]),
            "ratio": statistics.median(m / b for m, b in zip(res["mock"], res["bare"])),
            "bare_p50_ms": 1e3 * _pct(res["bare_lat"], 0.5), "bare_p99_ms": 1e3 * _pct(res["bare_lat"], 0.99),
            "mock_p50_ms": 1e3 * _pct(res["mock_lat"], 0.5), "mock_p99_ms": 1e3 * _pct(res["mock_lat"], 0.99),
            "ratios": [m / b for m, b in zip(res["mock"], res["bare"])], "n": rounds, "requests_per_round": CLIENTS * per_client, "response_bytes": fixed_path.stat().st_size,
        }
    finally:
        for p in (mock, bare):
            if p is not None:
                p.terminate()
                p.wait(timeout=10)


async def _asgi_bench(n: int) -> dict:
    """Same requests through httpx.ASGITransport (no sockets, one client): the handler cost alone.

    The handlers run inline, as compactsim's in-process transport serves them (`OFFLOAD_HANDLERS`
    off): no hop to the worker loop a socket server keeps for `/health`.

    Two more apps, timed in the same rounds, bound what any handler could reach (no target):
    ``boundary`` is the mock app itself with its chat handler answering the fixed body at once
    (its middlewares, routing and dependency, none of the pipeline): the ceiling of the ratio;
    ``idiomatic`` is the plain FastAPI way to do the least this endpoint must do, the request
    validated into the mock's own pydantic model and the same answer returned as a `JSONResponse`.
    """
    from fastapi import FastAPI
    from starlette.responses import JSONResponse

    from compactsim.mock_servers.limits import OFFLOAD_HANDLERS
    from compactsim.mock_servers.model_server import ServerSettings, create_app
    from compactsim.mock_servers.model_server.routes import chat as chat_route

    OFFLOAD_HANDLERS.set(False)

    mock = create_app(ServerSettings.model_validate_json(_settings_json()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=mock), base_url="http://m") as c:
        fixed = (await c.post("/v1/chat/completions", json=_bodies()[0])).content
    fixed_obj = json.loads(fixed)
    bare = FastAPI()

    @bare.post("/v1/chat/completions")
    async def fixed_body(request: Request) -> Response:
        await request.body()
        return Response(content=fixed, media_type="application/json")

    idiomatic = FastAPI()

    @idiomatic.post("/v1/chat/completions")
    async def validated(req: ChatCompletionRequest) -> JSONResponse:
        return JSONResponse(fixed_obj)

    async def answer_fixed(state, endpoint: str, raw: bytes) -> Response:  # the boundary app's whole pipeline
        return Response(content=fixed, media_type="application/json")

    boundary = create_app(ServerSettings.model_validate_json(_settings_json()))
    pipeline = chat_route.handle  # the route calls `handle` from its module: swapped only while `boundary` is timed

    apps = (("bare", bare), ("mock", mock), ("boundary", boundary), ("idiomatic", idiomatic))
    out: dict[str, list[float]] = {name: [] for name, _ in apps}
    clients = {name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") for name, app in apps}
    per_round = -(-n // CLIENTS)  # turns a round takes from each client
    try:
        for rnd in range(6):  # round 0 is burn-in
            round_bodies = [_bodies(2 + rnd * per_round + k) for k in range(per_round)]  # turn 1 made `fixed`
            for name, c in clients.items():
                chat_route.handle = answer_fixed if name == "boundary" else pipeline
                try:
                    t0 = time.perf_counter()
                    for i in range(n):
                        answer = await c.post("/v1/chat/completions", json=round_bodies[i // CLIENTS][i % CLIENTS])
                        if answer.status_code != 200:
                            raise RuntimeError(f"{name}: {answer.status_code} {answer.text[:200]}")
                finally:
                    chat_route.handle = pipeline
                if rnd:
                    out[name].append(n / (time.perf_counter() - t0))
    finally:
        for c in clients.values():
            await c.aclose()

    def ratio(name: str) -> float:
        return statistics.median(m / b for m, b in zip(out[name], out["bare"]))

    return {"bare_rps": statistics.median(out["bare"]), "mock_rps": statistics.median(out["mock"]),
            "boundary_rps": statistics.median(out["boundary"]), "idiomatic_rps": statistics.median(out["idiomatic"]),
            "ratio": ratio("mock"), "boundary_ratio": ratio("boundary"), "idiomatic_ratio": ratio("idiomatic"),
            "n": len(out["mock"]), "requests": n}


class ModulePathDecoding:
    """The policy decoding through its blocks' own `forward` with a torch KV cache (`start_decoding(numpy=False)`):
    the baseline of the numpy decoding, as decoding ran when the issue was filed. Extensions follow the
    state's choice; every other attribute (config, `sequence_logprobs`) is the wrapped policy's.
    """

    def __init__(self, policy) -> None:
        self._policy = policy

    def __getattr__(self, name: str):
        return getattr(self._policy, name)

    def start_decoding(self, input_ids, images=()):
        return self._policy.start_decoding(input_ids, images, numpy=False)


def _policy_bench(requests: int, dtype: str, rounds: int = 5) -> dict:
    """Policy-mode generation in-process, fast path vs module path, interleaved: generated tokens per second."""
    from compactsim.harness.core.chat_template import render_chat
    from compactsim.harness.core.policy import configure_determinism
    from compactsim.harness.core.prefix_cache import PrefixCache
    from compactsim.mock_servers.model_server.engine import CallKey, Engine
    from compactsim.mock_servers.model_server.settings import PolicySettings, ServerSettings

    configure_determinism()
    settings = ServerSettings(mode="policy", seed=1, policy=PolicySettings(dtype=dtype, default_reasoning_bytes=8,
                                                                            default_text_bytes=16))
    fast, slow = Engine(settings), Engine(settings)
    slow._policy = ModulePathDecoding(slow.policy)  # same weights, the earlier decoding
    prompts = [render_chat(b["messages"]) for b in _bodies()[:requests]]

    def run(engine: Engine, empty_prefix_cache: bool = False) -> list:
        out = []
        for i, p in enumerate(prompts):
            if empty_prefix_cache:
                decoder.prefixes = PrefixCache()
            out.append(engine.generate(p, request_digest=f"bench-{i}", key=CallKey("b", 0, False), max_tokens=None))
        return out

    decoder = fast.policy.start_decoding([1]).decoder  # the candidate's numpy weights and their prefix cache
    a, b = run(slow), run(fast)  # burn-in, and both must produce the same evidence
    for x, y in zip(a, b, strict=True):
        assert x.sampled_ids == y.sampled_ids and x.logprobs == y.logprobs, "decode fast path changed the sampled tokens"
        assert x.routes is None and y.routes is None or (x.routes == y.routes).all()
    tokens = sum(len(g.sampled_ids) for g in b)
    t_fast, t_slow, t_cold = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run(slow)
        t_slow.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run(fast)
        t_fast.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run(fast, empty_prefix_cache=True)
        t_cold.append(time.perf_counter() - t0)
    return {"tokens_per_s": tokens / statistics.median(t_fast), "baseline_tokens_per_s": tokens / statistics.median(t_slow),
            "speedup": statistics.median(s_ / f for s_, f in zip(t_slow, t_fast)),
            "cold_speedup": statistics.median(s_ / c for s_, c in zip(t_slow, t_cold)), "tokens": tokens, "requests": requests,
            "dtype": dtype, "prompt_tokens": len(prompts[0].token_ids), "rounds": rounds,
            "fast_s": t_fast, "baseline_s": t_slow, "cold_s": t_cold}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-client", type=int, default=10)
    ap.add_argument("--policy-requests", type=int, default=16)
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        h = asyncio.run(_http_bench(args.rounds, args.per_client, Path(tmp)))
    print(f"scripted mock/bare FastAPI: median {h['ratio']:.2f}x (n={h['n']} rounds, {CLIENTS} concurrent clients, "
          f"{h['requests_per_round']} requests/round, {h['response_bytes']} B responses)")
    print("  per-round ratios: " + " ".join(f"{r:.2f}" for r in h["ratios"]))
    print(f"  bare:     {h['bare_rps']:8.1f} req/s  p50 {h['bare_p50_ms']:6.2f} ms  p99 {h['bare_p99_ms']:6.2f} ms")
    print(f"  scripted: {h['mock_rps']:8.1f} req/s  p50 {h['mock_p50_ms']:6.2f} ms  p99 {h['mock_p99_ms']:6.2f} ms")
    a = asyncio.run(_asgi_bench(200))
    print(f"in-process ASGI handler cost, scripted mock/bare: median {a['ratio']:.2f}x (n={a['n']} rounds of {a['requests']} "
          f"sequential requests; bare {a['bare_rps']:.0f} req/s, scripted {a['mock_rps']:.0f} req/s; target >= 0.5x)")
    print(f"  bounds, same rounds: the mock app with a no-op chat handler {a['boundary_ratio']:.2f}x (the ceiling: "
          f"middlewares, routing, dependency); a plain FastAPI endpoint validating the body into the same pydantic "
          f"model and returning the same answer as a JSONResponse {a['idiomatic_ratio']:.2f}x")
    policy = {}
    for dtype in ("float64", "float32"):
        p = policy[dtype] = _policy_bench(args.policy_requests, dtype)
        print(f"policy mode ({p['dtype']}, CPU, 1 thread): {p['tokens_per_s']:.0f} generated tokens/s vs "
              f"{p['baseline_tokens_per_s']:.0f} module-path decoding: median {p['speedup']:.2f}x (n={p['rounds']}; "
              f"{p['tokens']} tokens over {p['requests']} requests, prompts of {p['prompt_tokens']} tokens; target >= 4x); "
              f"prefix cache emptied before every request: {p['cold_speedup']:.2f}x")
    write_result(
        "server",
        workload={"clients": CLIENTS, "rounds": args.rounds, "per_client": args.per_client,
                  "response_bytes": h["response_bytes"], "asgi_requests": a["requests"],
                  "policy_requests": args.policy_requests},
        metrics=[Metric("scripted mock / bare FastAPI, in-process handler", a["ratio"], "x", ">= 0.5"),
                 Metric("mock app, no-op chat handler / bare FastAPI, in-process (the ceiling)", a["boundary_ratio"], "x"),
                 Metric("FastAPI pydantic body + JSONResponse / bare FastAPI, in-process", a["idiomatic_ratio"], "x"),
                 Metric("scripted mock / bare FastAPI, HTTP", h["ratio"], "x"),
                 Metric("policy decode (float64) / module-path decode", policy["float64"]["speedup"], "x", ">= 4"),
                 Metric("policy decode (float32) / module-path decode", policy["float32"]["speedup"], "x", ">= 4"),
                 Metric("policy decode (float64), prefix cache emptied per request", policy["float64"]["cold_speedup"], "x"),
                 Metric("policy generation float64", policy["float64"]["tokens_per_s"], "tokens/s"),
                 Metric("scripted mock in-process", a["mock_rps"], "req/s")],
        figures={"http": h, "asgi": a, "policy": policy},
    )


if __name__ == "__main__":
    main()
