"""An httpx client whose every answer must arrive within a whole-request deadline.

httpx's timeouts bound each connect, write and read on its own, not the request: a server that
trickles its answer a few bytes per read timeout holds the call for as long as it likes, and the
caller (a rollout, gym-check's `/run`) hangs with it. `DeadlineTransport` checks the clock at every
chunk of the body and raises `httpx.ReadTimeout` once the request's deadline has passed, which the
callers already treat as a timeout (retried, then a typed failure). Waiting for the status line and
headers stays bounded per read only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

#: The whole answer must arrive within this many read timeouts (computing it, then sending it).
DEADLINE_READ_TIMEOUTS = 2.0


class _DeadlineStream(httpx.SyncByteStream):
    def __init__(self, stream: Any, deadline: float, total_s: float, request: httpx.Request) -> None:
        self._stream = stream
        self._deadline = deadline
        self._total_s = total_s
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout(f"the answer did not arrive within {self._total_s:g} s in all",
                                        request=self._request)
            yield chunk

    def close(self) -> None:
        self._stream.close()


class DeadlineTransport(httpx.BaseTransport):
    """`inner` (a plain `httpx.HTTPTransport` by default) with every response body due `total_s` after its request."""

    def __init__(self, total_s: float, inner: httpx.BaseTransport | None = None) -> None:
        if not total_s > 0:
            raise ValueError(f"total_s={total_s}: expected > 0")
        self.total_s = total_s
        self._inner = inner if inner is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.total_s
        response = self._inner.handle_request(request)
        response.stream = _DeadlineStream(response.stream, deadline, self.total_s, request)
        return response

    def close(self) -> None:
        self._inner.close()


def deadline_client(timeout_s: float, *, base_url: str = "") -> httpx.Client:
    """An `httpx.Client` with `timeout_s` per read and `DEADLINE_READ_TIMEOUTS` × `timeout_s` per request."""
    return httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout_s),
                        transport=DeadlineTransport(DEADLINE_READ_TIMEOUTS * timeout_s))


__all__ = ["DEADLINE_READ_TIMEOUTS", "DeadlineTransport", "deadline_client"]
