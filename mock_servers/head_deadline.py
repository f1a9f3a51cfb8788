"""uvicorn's h11 protocol with a deadline on every request's line and headers.

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) and the mock servers bound a
body (`BodyLimitMiddleware`, `body_timeout_s`), but nothing bounds the request line and headers: a
client that opens a connection and sends nothing, or a few header bytes and then nothing (or one
byte now and then), holds the connection open for good. Here each connection gets `timeout_s` for
its request's line and headers, counted from the connection opening or from the previous answer;
past it the server answers a JSON 408 ``{"detail", "limit", "field": "headers"}`` and closes the
connection. Only the head is timed: a complete request's handler and body are not.

Built on uvicorn's `H11Protocol` (its `cycle` is the request being served, `on_response_complete` is
called once an answer is sent); `tests/unit/mock_servers/test_head_deadline.py` keeps it honest.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from compactsim.mock_servers.limits import LimitExceeded

#: The head deadline of an app that does not state one (`app.state.head_timeout_s`).
DEFAULT_HEAD_TIMEOUT_S = 10.0


class HeadDeadlineProtocol(H11Protocol):
    """`H11Protocol` whose connections must complete each request line and headers within `timeout_s`."""

    timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    limit_name: str = "body_timeout_s"

    _head_timer: asyncio.TimerHandle | None = None
    _waiting_after: Any = None  # the cycle (request) that was current when the timer was armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer is not None and self.cycle is not self._waiting_after:
            self._cancel_head_timer()  # a request's line and headers arrived: its cycle started

    def on_response_complete(self) -> None:
        self._arm_head_timer()  # first: a pipelined request that the call below starts disarms it
        super().on_response_complete()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._waiting_after = self.cycle
        self._head_timer = self.loop.call_later(self.timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.cycle is not self._waiting_after:
            return
        answer = LimitExceeded(408, self.limit_name, "headers", f"the request line and headers did not arrive within the "
                               f"limit of {self.timeout_s:g} s").body()
        body = json.dumps(answer, separators=(",", ":")).encode("utf-8")
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
        self.transport.close()


def head_deadline_protocol(timeout_s: float, limit_name: str = "body_timeout_s") -> type[HeadDeadlineProtocol]:
    """A `HeadDeadlineProtocol` class for uvicorn's `Config(http=...)` with this deadline and setting name."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s}: expected > 0")
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"timeout_s": float(timeout_s), "limit_name": limit_name})


def uvicorn_config(app: Any, *, host: str, port: int, lifespan: str = "off") -> Any:
    """uvicorn's `Config` for a compactsim server: quiet, and each head due within the app's
    `state.head_timeout_s` (the mock servers set their `body_timeout_s` there; other apps get the default)."""
    import uvicorn

    state = getattr(app, "state", None)
    timeout_s = getattr(state, "head_timeout_s", None) or DEFAULT_HEAD_TIMEOUT_S
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan=lifespan,
                          http=head_deadline_protocol(timeout_s))


__all__ = ["DEFAULT_HEAD_TIMEOUT_S", "HeadDeadlineProtocol", "head_deadline_protocol", "uvicorn_config"]
