"""Which declared fault switches fire for a request, and the transport-level faults themselves.

Selection is a pure function of (settings, call digest, endpoint, call key): a switch fires when
its selectors (rollout, turn, attempts, endpoint) match the call key, whether its values came
from metadata hints or were derived from the request, and a draw keyed by (seed, kind, index,
call digest, attempt) is below its `probability`. Keying on the attempt gives each retry of the
identical body a fresh draw, so a probabilistic transient fault can be retried away. Content
faults (`missing_logprobs`, route rows, `finish_length`, ...) change the answer in `engine`;
transport faults change how it is delivered (see `FaultKind` docs).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from compactsim.harness.core.seeds import uniform01
from compactsim.mock_servers.model_server.engine import CallKey
from compactsim.mock_servers.model_server.settings import TRANSPORT_FAULTS, FaultSpec, ServerSettings


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults that fire for one request."""

    content: frozenset[str]
    transport: FaultSpec | None  # at most one: the first matching transport switch
    delay_s: float  # total `slow` delay (transport `timeout` carries its own)

    @property
    def names(self) -> tuple[str, ...]:
        out = sorted(self.content)
        if self.transport is not None:
            out.append(self.transport.kind)
        if self.delay_s:
            out.append("slow")
        return tuple(out)


NO_FAULTS = FaultPlan(content=frozenset(), transport=None, delay_s=0.0)


def fault_draw(seed: int, *, kind: str, index: int, request_digest: str, attempt: int) -> float:
    """The uniform draw deciding switch `index` for one attempt of one call."""
    return uniform01(seed, "fault", kind=kind, index=index, request=request_digest, attempt=attempt)


def select_faults(settings: ServerSettings, *, request_digest: str, endpoint: str, key: CallKey) -> FaultPlan:
    """The switches of `settings.faults` that fire for this request (`request_digest`: its call digest)."""
    if not settings.faults:
        return NO_FAULTS
    content: set[str] = set()
    transport: FaultSpec | None = None
    delay = 0.0
    for index, f in enumerate(settings.faults):
        if f.endpoint != "any" and f.endpoint != endpoint:
            continue
        if f.rollout_id is not None and f.rollout_id != key.rollout_id:
            continue
        if f.turn is not None and f.turn != key.turn:
            continue
        if f.attempts is not None and key.attempt not in f.attempts:
            continue
        if f.probability < 1.0 and fault_draw(settings.seed, kind=f.kind, index=index, request_digest=request_digest,
                                               attempt=key.attempt) >= f.probability:
            continue
        if f.kind == "slow":
            delay += f.delay()
        elif f.kind in TRANSPORT_FAULTS:
            transport = transport or f
        else:
            content.add(f.kind)
    return FaultPlan(content=frozenset(content), transport=transport, delay_s=delay)


class TruncatedJSONResponse(Response):
    """Status 200 with a JSON content type whose body is cut to half its bytes."""

    def __init__(self, body: bytes) -> None:
        super().__init__(content=body[: len(body) // 2], status_code=200, media_type="application/json")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(self.body)).encode())]})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


class DroppedConnectionResponse(Response):
    """Announce the full length, send half the body, then stop: the server closes the connection."""

    def __init__(self, body: bytes) -> None:
        super().__init__(content=body, status_code=200, media_type="application/json")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(self.body)).encode())]})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True})
        # returning with the response incomplete makes the ASGI server close the connection


__all__ = ["NO_FAULTS", "DroppedConnectionResponse", "FaultPlan", "TruncatedJSONResponse", "fault_draw", "select_faults"]
