"""report.html loads cleanly in headless Chromium: no console error, no failed request, every image decodes.

Driven over the DevTools protocol (`tests.unit.report.browser`), on a report with a failing and a
passing scenario and on one with only a passing scenario; broken pages prove the checks can fail.
`make test` installs Chromium when apt is available (`scripts/ensure-chromium.sh`); without it these
tests skip, or fail when ``COMPACTSIM_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from compactsim.harness.report import format_report_html
from tests.unit.report.browser import check_page, find_chromium, write_page
from tests.unit.report.report_builders import mixed_suite, suite

CHROMIUM = find_chromium()
_MISSING = ("headless Chromium is not on PATH (looked for chromium, chromium-browser, google-chrome): `make test` "
            "installs it with apt-get when it can (scripts/ensure-chromium.sh)")

if CHROMIUM is None and os.environ.get("COMPACTSIM_REQUIRE_BROWSER") == "1":
    pytestmark = [pytest.mark.browser]

    def test_chromium_is_installed() -> None:
        pytest.fail(_MISSING + "; COMPACTSIM_REQUIRE_BROWSER=1 forbids skipping")
else:
    pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason=_MISSING)]


def _load(tmp_path: Path, html: str):
    assert CHROMIUM is not None
    return check_page(write_page(tmp_path, "report.html", html), chromium=CHROMIUM)


def test_report_with_a_failing_and_a_passing_scenario_loads_cleanly(tmp_path: Path):
    page = _load(tmp_path, format_report_html(mixed_suite()))
    assert page.problems == []
    # failing two-step scenario: 1 plot + 2 thumbnails; passing one-step scenario: a value table + 2 thumbnails
    assert page.images == 5
    assert page.details == 4  # two scenario sections, each with a trace view
    assert page.open_sections == ["scenario-failing-two-steps"]
    assert page.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and len(page.screenshot) > 10_000


def test_report_of_a_passing_suite_loads_cleanly_with_every_section_closed(tmp_path: Path):
    page = _load(tmp_path, format_report_html(suite(broken=False)))
    assert (page.problems, page.images, page.details, page.open_sections) == ([], 3, 2, [])


def test_a_thumbnail_that_does_not_decode_is_caught(tmp_path: Path):
    s = mixed_suite()
    broken = replace(s.scenarios[1], media_urls={"m1": "data:image/png;base64,iVBORw0KGgo="})  # PNG signature only
    page = _load(tmp_path, format_report_html(replace(s, scenarios=(s.scenarios[0], broken))))
    assert page.console_errors == [] and page.failed_requests == []
    assert page.undecoded_images == ["1 m1: EncodingError: The source image cannot be decoded.",
                                     "2 m1: EncodingError: The source image cannot be decoded."]


def test_console_errors_and_failed_requests_are_caught(tmp_path: Path):
    page = _load(tmp_path, "<!DOCTYPE html><html><body><img alt='gone' src='missing.png'>"
                           "<script>console.error('boom'); null.x</script></body></html>")
    missing = (tmp_path / "missing.png").as_uri()
    assert sorted(page.console_errors) == [  # the image's load error and the script's race: compare in sorted order
        "TypeError: Cannot read properties of null (reading 'x')\n"
        f"    at {(tmp_path / 'report.html').as_uri()}:1:98", "boom",
        f"network: Failed to load resource: net::ERR_FILE_NOT_FOUND {missing}"]
    assert [r.split(" (")[0] for r in page.failed_requests] == ["net::ERR_FILE_NOT_FOUND"]
    assert page.undecoded_images == ["0 gone: EncodingError: The source image cannot be decoded."]


def test_report_of_a_real_run_with_a_failing_and_a_passing_scenario_loads_cleanly(tmp_path: Path):
    from compactsim.harness.runner import RunOptions, resolve_scenarios, run_suite, suite_record

    scenarios = resolve_scenarios(["image-compaction-k2-rolling"])  # images: real thumbnails in the trace view
    ok = run_suite(scenarios, RunOptions(seed=1))
    bad = run_suite(scenarios, RunOptions(seed=1, backend="tests.quality.broadcast_first_advantage:Backend"))
    bad = [replace(bad[0], record=replace(bad[0].record, name="broadcast-first-advantage"))]
    assert [r.record.passed for r in ok + bad] == [True, False]
    page = _load(tmp_path, format_report_html(suite_record(ok + bad, RunOptions(seed=1), ["image-compaction"])))
    assert page.problems == []
    assert page.images == 24  # thumbnails only: one-step scenarios get value tables, no plots
    assert page.open_sections == ["scenario-broadcast-first-advantage"]
