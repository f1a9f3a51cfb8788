"""report.html renders in headless Chromium (skipped when Chromium is absent)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.report import format_report_html
from tests.unit.report.report_builders import suite

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")]


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",  # type: ignore[list-item]
                           "--disable-dev-shm-usage", *args], capture_output=True, text=True, timeout=120, check=False)


def test_report_renders_in_headless_chromium(tmp_path: Path):
    page = tmp_path / "report.html"
    page.write_text(format_report_html(suite()), encoding="utf-8")
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "compactsim report" in dom.stdout
    assert "row.tokens" in dom.stdout and "tok sampled boundary sentinel" in dom.stdout
    shot = tmp_path / "report.png"
    done = _chromium("--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
