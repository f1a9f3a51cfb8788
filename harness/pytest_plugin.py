"""pytest plugin: run compactsim scenarios inside a test suite and fail tests with the audit's findings.

Registered as the ``compactsim`` entry point (``[project.entry-points.pytest11]``), so it is
active wherever compactsim is installed. Two ways to use it::

    @pytest.mark.compactsim(scenario="image-compaction-k2-rolling", seed=3)
    def test_k2_rows_are_exact():               # fails with the findings when the audit does
        ...

    def test_two_seeds(compactsim_run):
        assert compactsim_run("no-compaction", seed=1).passed

``compactsim_run`` returns a `ScenarioResult`: ``.passed``, ``.findings`` and ``.reproduce`` at
hand, the full record as ``.record`` and every other attribute of the underlying
`compactsim.harness.runner.ScenarioRun` (``.files``, ``.audit``, ...) passed through.

Flags (group ``compactsim``): ``--compactsim-seed N`` overrides every scenario's seed,
``--compactsim-backend module:attr`` selects the backend under test, ``--compactsim-out DIR``
keeps each run's artifacts. A failing test prints each finding (scenario, step, row, token,
expected, actual) and the one-line reproduction command.
"""

from __future__ import annotations

import re

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SEED_OPTION = "--compactsim-seed"
BACKEND_OPTION = "--compactsim-backend"
OUT_OPTION = "--compactsim-out"
MARKER = "compactsim"
#: Findings printed per failing run (the rest are in the run's audit.json).
MAX_FINDINGS_SHOWN = 10

_runs_key = pytest.StashKey[list[Any]]()


class ScenarioResult:
    """One scenario run as a test sees it: what a test asserts on first (`passed`), then everything else.

    A thin view of `compactsim.harness.runner.ScenarioRun` (kept as `.run`); unknown attributes are read from
    it, so ``result.record``, ``result.files`` and ``result.audit`` work as on the run itself.
    """

    __slots__ = ("run",)

    def __init__(self, run: Any) -> None:
        self.run = run

    @property
    def record(self) -> Any:
        return self.run.record

    @property
    def passed(self) -> bool:
        """The scenario met its expected verdict with no audit finding."""
        return bool(self.run.record.passed)

    @property
    def findings(self) -> tuple[Any, ...]:
        return tuple(self.run.record.findings)

    @property
    def reproduce(self) -> str:
        """The one-line command that re-runs the scenario."""
        return str(self.run.record.reproduce)

    def __getattr__(self, name: str) -> Any:
        if name == "run":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.run, name)

    def __repr__(self) -> str:
        rec = self.run.record
        return f"ScenarioResult({rec.name!r}, seed={rec.seed}, passed={rec.passed}, findings={len(rec.findings)})"


class CompactsimAuditFailure(AssertionError):
    """A scenario did not meet its expected verdict; the message lists findings and the reproduction command."""


def format_audit_failure(run: Any) -> str:
    """Findings of a failed run (first `MAX_FINDINGS_SHOWN`) and its reproduction command, as plain text."""
    rec = run.record
    lines = [f"compactsim scenario {rec.name!r} (seed {rec.seed}): {rec.outcome}"]
    for f in rec.findings[:MAX_FINDINGS_SHOWN]:
        lines.append("  " + str(f).splitlines()[0])
    if len(rec.findings) > MAX_FINDINGS_SHOWN:
        lines.append(f"  ... {len(rec.findings) - MAX_FINDINGS_SHOWN} more")
    lines.append(f"reproduce: {rec.reproduce}")
    return "\n".join(lines)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compactsim", "compactsim scenario runs")
    group.addoption(SEED_OPTION, action="store", type=int, default=None, metavar="N",
                    help="seed for every compactsim scenario run (default: each scenario's own seed)")
    group.addoption(BACKEND_OPTION, action="store", default=None, metavar="MODULE:ATTR",
                    help="backend under test for compactsim runs (default: compactsim.harness.pipeline:ReferenceBackend)")
    group.addoption(OUT_OPTION, action="store", default=None, metavar="DIR",
                    help="keep each compactsim run's artifacts under DIR/<scenario>-seed<N>[-<backend>][-steps<K>]/")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(scenario, seed=None, backend=None, steps=None): run a compactsim scenario before the test and fail "
        "it with the audit's findings and reproduction command; e.g. "
        "@pytest.mark.compactsim(scenario='image-compaction-k2-rolling', seed=3)",
    )


def _backend(config: pytest.Config) -> str:
    return config.getoption(BACKEND_OPTION) or "compactsim.harness.pipeline:ReferenceBackend"


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption(SEED_OPTION)
    return f"compactsim: seed={'scenario default' if seed is None else seed}, backend={_backend(config)}"


class ScenarioRunner:
    """Runs scenarios for a whole session, once per (scenario, seed, backend, steps)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._cache: dict[tuple[Any, ...], Any] = {}

    def __call__(self, scenario: str, *, seed: int | None = None, backend: str | None = None,
                 steps: int | None = None) -> Any:
        """The `ScenarioResult` of `scenario` (catalogue name or YAML path), run once per key; `seed` beats the flag."""
        from compactsim.harness.runner import RunOptions, resolve_scenarios, run_scenario, write_outputs

        seed = seed if seed is not None else self.config.getoption(SEED_OPTION)
        backend = backend or _backend(self.config)
        key = (scenario, seed, backend, steps)
        if key not in self._cache:
            found = resolve_scenarios([scenario])
            run = run_scenario(found[0], RunOptions(seed=seed, backend=backend, max_steps=steps))
            out = self.config.getoption(OUT_OPTION)
            if out:
                from compactsim.harness.runner import suite_record

                target = Path(out) / _run_folder(run.record.name, run.record.seed, backend, steps)
                write_outputs(target, [run], suite_record([run], RunOptions(seed=seed, backend=backend), [scenario]))
            self._cache[key] = ScenarioResult(run)
        return self._cache[key]


def _run_folder(name: str, seed: int, backend: str | None, steps: int | None) -> str:
    """``<scenario>-seed<N>``, then ``-<backend>`` and ``-steps<K>`` when given: one folder per cached run, so two
    backends (or caps) of one scenario and seed never overwrite each other's artifacts."""
    from compactsim.harness.runner import DEFAULT_BACKEND

    folder = f"{name}-seed{seed}"
    if backend and backend != DEFAULT_BACKEND:
        folder += "-" + re.sub(r"[^A-Za-z0-9_.]+", "-", backend).strip("-")
    return folder if steps is None else f"{folder}-steps{steps}"


@pytest.fixture(scope="session")
def compactsim_runner(pytestconfig: pytest.Config) -> ScenarioRunner:
    """Session-scoped factory: ``compactsim_runner(scenario, seed=...)`` returns a cached `ScenarioResult`."""
    return ScenarioRunner(pytestconfig)


@pytest.fixture
def compactsim_run(request: pytest.FixtureRequest, compactsim_runner: ScenarioRunner) -> Callable[..., Any]:
    """Per-test: ``compactsim_run(scenario, seed=...)`` returns a `ScenarioResult` (`.passed`, `.findings`, `.record`).

    Called without a scenario inside a test marked ``@pytest.mark.compactsim``, it returns the
    marker's run. Every run it returns is listed in the test's failure output.
    """
    runs = request.node.stash.setdefault(_runs_key, [])

    def run(scenario: str | None = None, *, seed: int | None = None, backend: str | None = None,
            steps: int | None = None) -> Any:
        if scenario is None:
            marker = request.node.get_closest_marker(MARKER)
            if marker is None:
                raise TypeError("compactsim_run() needs a scenario outside a test marked @pytest.mark.compactsim")
            scenario, seed, backend, steps = _marker_args(marker)
        result = compactsim_runner(scenario, seed=seed, backend=backend, steps=steps)
        if result not in runs:
            runs.append(result)
        return result

    return run


def _marker_args(marker: pytest.Mark) -> tuple[str, int | None, str | None, int | None]:
    kwargs = dict(marker.kwargs)
    scenario = kwargs.pop("scenario", marker.args[0] if marker.args else None)
    if not isinstance(scenario, str):
        raise TypeError(f"@pytest.mark.{MARKER} needs scenario='<name>'; got args={marker.args} kwargs={marker.kwargs}")
    seed, backend, steps = kwargs.pop("seed", None), kwargs.pop("backend", None), kwargs.pop("steps", None)
    if kwargs:
        raise TypeError(f"@pytest.mark.{MARKER}: unknown argument(s) {sorted(kwargs)}")
    return scenario, seed, backend, steps


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marked tests request the session runner, so their scenario can run before the test body."""
    for item in items:
        names = getattr(item, "fixturenames", None)
        if item.get_closest_marker(MARKER) is not None and names is not None and "compactsim_runner" not in names:
            names.append("compactsim_runner")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """A marked test first runs its scenario; an audit failure fails the test before its body runs."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return
    scenario, seed, backend, steps = _marker_args(marker)
    runner: ScenarioRunner = item.funcargs["compactsim_runner"]  # type: ignore[attr-defined]
    run = runner(scenario, seed=seed, backend=backend, steps=steps)
    runs = item.stash.setdefault(_runs_key, [])
    if run not in runs:
        runs.append(run)
    if not run.record.passed:
        raise CompactsimAuditFailure(format_audit_failure(run))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Failed tests that ran scenarios get a "compactsim audit" section: findings and reproduction commands."""
    report = yield
    if report.when == "call" and report.failed:
        runs = item.stash.get(_runs_key, [])
        text = "\n\n".join(format_audit_failure(r) for r in runs if not r.record.passed)
        if text:
            report.sections.append(("compactsim audit", text))
    return report


__all__ = [
    "BACKEND_OPTION",
    "CompactsimAuditFailure",
    "MARKER",
    "OUT_OPTION",
    "SEED_OPTION",
    "ScenarioResult",
    "ScenarioRunner",
    "compactsim_run",
    "compactsim_runner",
    "format_audit_failure",
]
