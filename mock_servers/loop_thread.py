"""An event loop running forever in a daemon thread, started on first use: where off-thread ASGI work runs.

Shared by the servers' handler worker (`limits.run_off_loop`) and the in-process client transport
(`inprocess.InProcessTransport`): both hand coroutines over with `asyncio.run_coroutine_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading


class LoopThread:
    """One event loop in one daemon thread named `name`; `stop()` ends it (the next `loop()` starts a new one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=timeout_s)
            if not thread.is_alive():
                loop.close()


__all__ = ["LoopThread"]
