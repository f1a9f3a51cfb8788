"""Answers are a pure function of (seed, body, policy version): concurrency and order change nothing."""

from __future__ import annotations

import asyncio
import hashlib

import httpx
import pytest

from compactsim.harness.core.seeds import rng
from compactsim.mock_servers.model_server import ServerSettings, create_app
from tests.unit.mock_servers.model_server.server_builders import SCRIPT, chat_body, meta, run_async, user_items


def _bodies(n: int) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    for i in range(n):
        turn = i % 3 + 1
        if i % 2:
            out.append(("/v1/responses", {"input": user_items(f"task {i}", image=i % 4 == 1), "metadata": meta("r1", turn),
                                          "max_output_tokens": 24}))
        else:
            out.append(("/v1/chat/completions", chat_body([{"role": "user", "content": f"task {i}"}], metadata=meta(f"g{i}", turn),
                                                          max_tokens=24)))
    return out


async def _digests(settings: ServerSettings, requests: list[tuple[str, dict]], order: list[int], *, concurrent: bool) -> dict[int, str]:
    app = create_app(settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://model") as client:
        async def one(i: int) -> tuple[int, str]:
            path, body = requests[i]
            r = await client.post(path, json=body)
            assert r.status_code == 200, r.text
            return i, hashlib.sha256(r.content).hexdigest()

        if concurrent:
            pairs = await asyncio.gather(*(one(i) for i in order))
        else:
            pairs = [await one(i) for i in order]
    return dict(pairs)


@pytest.mark.parametrize("mode", ["scripted", "policy"])
def test_32_concurrent_clients_in_shuffled_order_get_identical_bytes(mode):
    settings = ServerSettings(mode=mode, seed=5, script=SCRIPT)
    requests = _bodies(32)
    sequential = run_async(_digests(settings, requests, list(range(32)), concurrent=False))
    order = [int(i) for i in rng(5, "test_shuffle").permutation(32)]
    shuffled = run_async(_digests(settings, requests, order, concurrent=True))
    assert shuffled == sequential
    assert len(set(sequential.values())) == 32


def test_another_seed_gives_different_answers():
    requests = _bodies(4)
    a = run_async(_digests(ServerSettings(seed=1, script=SCRIPT), requests, [0, 1, 2, 3], concurrent=False))
    b = run_async(_digests(ServerSettings(seed=2, script=SCRIPT), requests, [0, 1, 2, 3], concurrent=False))
    assert all(a[i] != b[i] for i in range(4))
