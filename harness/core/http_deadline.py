"""An httpx client whose every answer must arrive within a whole-request deadline.

httpx's timeouts bound each connect, write and read on its own, not the request: a server that
trickles its status line, headers or body a few bytes per read timeout holds the call for as long
as it likes, and the caller (a rollout, gym-check's `/run`) hangs with it. `DeadlineTransport`
gives each request a deadline and its sockets a network backend that cuts every connect, write
and read timeout to what is left of it, from the request line to the last body byte; past the
deadline the request fails with `httpx.ReadTimeout` (`httpx.WriteTimeout` while sending), which
the callers already treat as a timeout (retried, then a typed failure).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

#: The whole answer must arrive within this many read timeouts (computing it, then sending it).
DEADLINE_READ_TIMEOUTS = 2.0

#: (monotonic deadline, total seconds) of the request this thread is sending or reading, if any.
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("compactsim_http_deadline", default=None)


def _left(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    """`timeout` cut to what is left of the current request's deadline; `expired` once nothing is left."""
    current = _DEADLINE.get()
    if current is None:
        return timeout
    left = current[0] - time.monotonic()
    if left <= 0:
        raise expired(f"the answer did not arrive within {current[1]:g} s in all")
    return left if timeout is None else min(timeout, left)


class _DeadlineNetworkStream(httpcore.NetworkStream):
    """A socket stream whose every read and write waits no longer than the request's deadline allows."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineNetworkStream(self._inner.start_tls(ssl_context, server_hostname,
                                                            _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each wrapped in `_DeadlineNetworkStream`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineNetworkStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                              local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineNetworkStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                                      socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _http_transport() -> httpx.HTTPTransport:
    """A plain `httpx.HTTPTransport` whose connection pool opens its sockets through `_DeadlineBackend`.

    httpx does not take a network backend, so it is set on the pool httpx built (httpcore's
    `ConnectionPool` keeps it as `_network_backend`); a version without that attribute fails here,
    loudly, instead of silently losing the deadline.
    """
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.ConnectionPool) or not hasattr(pool, "_network_backend"):
        raise RuntimeError(f"httpx {httpx.__version__} / httpcore {httpcore.__version__}: the connection pool no "
                           "longer holds its network backend where compactsim's request deadline sets it")
    pool._network_backend = _DeadlineBackend()
    return transport


def _timed_out(exc: httpx.TimeoutException, deadline: tuple[float, float], request: httpx.Request) -> Exception:
    """The deadline's own message once it has passed (a read cut short by it reads "timed out"), else `exc`."""
    if time.monotonic() < deadline[0] or isinstance(exc, httpx.PoolTimeout):
        return exc
    kind = httpx.WriteTimeout if isinstance(exc, httpx.WriteTimeout) else httpx.ReadTimeout
    return kind(f"the answer did not arrive within {deadline[1]:g} s in all", request=request)


class _DeadlineStream(httpx.SyncByteStream):
    """The response body, each chunk read under the request's deadline (the body is read after `handle_request`)."""

    def __init__(self, stream: Any, deadline: tuple[float, float], request: httpx.Request) -> None:
        self._stream = stream
        self._deadline = deadline
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._stream)
        while True:
            if time.monotonic() > self._deadline[0]:  # an `inner` without sockets: checked between chunks
                raise httpx.ReadTimeout(f"the answer did not arrive within {self._deadline[1]:g} s in all",
                                        request=self._request)
            token = _DEADLINE.set(self._deadline)
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx.TimeoutException as exc:
                raise _timed_out(exc, self._deadline, self._request) from None
            finally:
                _DEADLINE.reset(token)
            yield chunk  # the caller's own code runs outside the deadline

    def close(self) -> None:
        self._stream.close()


class DeadlineTransport(httpx.BaseTransport):
    """An HTTP transport with every whole answer (status line, headers, body) due `total_s` after its request starts.

    `inner` replaces the socket transport (tests; an ASGI app): then only its body chunks are
    bounded, checked between them, since the deadline reaches no socket.
    """

    def __init__(self, total_s: float, inner: httpx.BaseTransport | None = None) -> None:
        if not total_s > 0:
            raise ValueError(f"total_s={total_s}: expected > 0")
        self.total_s = total_s
        self._inner = inner if inner is not None else _http_transport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = (time.monotonic() + self.total_s, self.total_s)
        token = _DEADLINE.set(deadline)
        try:
            response = self._inner.handle_request(request)
        except httpx.TimeoutException as exc:
            raise _timed_out(exc, deadline, request) from None
        finally:
            _DEADLINE.reset(token)
        response.stream = _DeadlineStream(response.stream, deadline, request)
        return response

    def close(self) -> None:
        self._inner.close()


def deadline_client(timeout_s: float, *, base_url: str = "") -> httpx.Client:
    """An `httpx.Client` with `timeout_s` per read and `DEADLINE_READ_TIMEOUTS` × `timeout_s` per request."""
    return httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout_s),
                        transport=DeadlineTransport(DEADLINE_READ_TIMEOUTS * timeout_s))


__all__ = ["DEADLINE_READ_TIMEOUTS", "DeadlineTransport", "deadline_client"]
