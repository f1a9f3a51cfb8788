"""Load a page in headless Chromium over the DevTools protocol and report what went wrong on it.

No websocket library: Chromium's ``--remote-debugging-pipe`` speaks the protocol over file
descriptors 3 (commands in) and 4 (replies and events out), each message JSON ended by a NUL
byte. `check_page` opens one tab, loads the page, waits for the load event, then collects console
errors, uncaught exceptions, log errors, failed or HTTP-error requests, and every ``<img>`` that
did not decode (`HTMLImageElement.decode()` rejects, or its natural width is 0).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Chromium executables looked up on PATH, in order.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

#: Headless flags: no GPU, no sandbox (containers), no network chatter of its own.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe")

_IMAGES_JS = """Promise.all(Array.from(document.images).map((img, k) =>
  img.decode().then(() => (img.naturalWidth > 0 ? null : `${k} ${img.alt}: natural width 0`),
                    (err) => `${k} ${img.alt}: ${err.name}: ${err.message}`)))
  .then((bad) => ({images: document.images.length, undecoded: bad.filter((b) => b !== null),
                   details: document.querySelectorAll('details').length,
                   open: Array.from(document.querySelectorAll('details.scenario[open]')).map((d) => d.id)}))"""


def find_chromium() -> str | None:
    """The first Chromium on PATH, or None."""
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


@dataclass
class PageCheck:
    """What loading one page produced."""

    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    undecoded_images: list[str] = field(default_factory=list)
    images: int = 0
    details: int = 0
    open_sections: list[str] = field(default_factory=list)
    screenshot: bytes = b""

    @property
    def problems(self) -> list[str]:
        """Every console error, failed request and undecoded image, one line each."""
        return ([f"console: {m}" for m in self.console_errors] + [f"request: {m}" for m in self.failed_requests]
                + [f"image: {m}" for m in self.undecoded_images])


class _Pipe:
    """One DevTools session over Chromium's debugging pipe (flattened target sessions)."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        self.proc = proc
        self.deadline = deadline
        self.next_id = 0
        self.buffer = b""
        self.events: list[dict[str, Any]] = []

    def _read_message(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while b"\0" not in self.buffer:
            if time.monotonic() > self.deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the debugging pipe (exit {self.proc.poll()})")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        assert self.proc.stdin is not None
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        self.proc.stdin.write(json.dumps(msg).encode("utf-8") + b"\0")
        self.proc.stdin.flush()
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        """Read until the event `method` has arrived."""
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read_message())


def check_page(url: str, *, chromium: str, timeout_s: float = 90.0, width: int = 1280, height: int = 1600) -> PageCheck:
    """Load `url` in a fresh headless Chromium and return its console errors, failed requests and undecoded images."""
    profile = tempfile.mkdtemp(prefix="compactsim-chromium-")
    # fd 3 = our stdin pipe (commands), fd 4 = our stdout pipe (replies); Chromium's own output to stderr
    argv = ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2', chromium, *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = PageCheck()
    try:
        pipe = _Pipe(proc, time.monotonic() + timeout_s)
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Page.navigate", {"url": url}, session=session)
        pipe.wait_for("Page.loadEventFired")
        result = pipe.send("Runtime.evaluate", {"expression": _IMAGES_JS, "awaitPromise": True, "returnByValue": True},
                           session=session)
        value = result["result"].get("value") or {}
        out.images, out.undecoded_images = int(value.get("images", 0)), list(value.get("undecoded", []))
        out.details, out.open_sections = int(value.get("details", 0)), list(value.get("open", []))
        shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
        out.screenshot = base64.b64decode(shot["data"])
        _collect(pipe.events, out)
        try:
            pipe.send("Browser.close")
        except (RuntimeError, TimeoutError):
            pass
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
    return out


def _collect(events: list[dict[str, Any]], out: PageCheck) -> None:
    """Console errors, exceptions, log errors and failed requests from the session's events."""
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.console_errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            out.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            out.failed_requests.append(f"{params.get('errorText')} ({params.get('requestId')})")
        elif method == "Network.responseReceived":
            response = params.get("response", {})
            if int(response.get("status") or 0) >= 400:
                out.failed_requests.append(f"HTTP {response['status']} {response.get('url', '')[:120]}")


def write_page(directory: Path, name: str, html: str) -> str:
    """Write `html` under `directory` and return its file:// URL."""
    path = directory / name
    path.write_text(html, encoding="utf-8")
    return path.resolve().as_uri()


__all__ = ["CHROMIUM_FLAGS", "CHROMIUM_NAMES", "PageCheck", "check_page", "find_chromium", "write_page"]
