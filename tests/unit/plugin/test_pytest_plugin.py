"""The compactsim pytest plugin, exercised through `pytester` on generated test files."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BROKEN = "tests.quality.broadcast_first_advantage:Backend"
QUIET = ("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def _import_everything_once():
    """Run both backends once out here: in-process pytester restores sys.modules after each inner run,
    and C extensions (numpy, torch) cannot be imported twice in one process."""
    from compactsim.harness.runner import RunOptions, resolve_scenarios, run_scenario

    scenario = resolve_scenarios(["explicit-logprobs"])[0]
    run_scenario(scenario, RunOptions())
    run_scenario(scenario, RunOptions(backend=BROKEN))


def test_marker_passes_when_the_audit_passes(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.compactsim(scenario="explicit-logprobs", seed=5)
        def test_rows(compactsim_run):
            run = compactsim_run()
            assert run.record.seed == 5
            assert run.record.rows == 2
        """
    )
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(passed=1)


def test_marker_fails_with_the_finding_and_the_reproduction_command(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.compactsim(scenario="explicit-logprobs", seed=5)
        def test_rows():
            raise RuntimeError("the body must not run when the audit fails")
        """
    )
    result = pytester.runpytest_inprocess(*QUIET, f"--compactsim-backend={BROKEN}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*CompactsimAuditFailure: compactsim scenario 'explicit-logprobs' (seed 5): expected success, observed success*",
        "*[[]row.advantage[]] explicit-logprobs step 0 row s0-g0-r1/trace-0 token *",
        f"*reproduce: compactsim run explicit-logprobs --seed 5 --backend {BROKEN}*",
    ])
    assert "the body must not run" not in result.stdout.str()


def test_failing_assertion_shows_the_audit_section(pytester: pytest.Pytester):
    pytester.makepyfile(
        f"""
        def test_rows(compactsim_run):
            run = compactsim_run("explicit-logprobs", seed=5, backend="{BROKEN}")
            assert run.record.passed
        """
    )
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- compactsim audit -*", "*[[]row.advantage[]]*", "reproduce: compactsim run *"])


def test_runs_are_cached_per_session(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        SEEN = []

        def test_one(compactsim_run):
            SEEN.append(compactsim_run("explicit-logprobs", seed=2))

        def test_two(compactsim_run):
            again = compactsim_run("explicit-logprobs", seed=2)
            assert again is SEEN[0]
            assert again.record.passed
        """
    )
    pytester.runpytest_inprocess(*QUIET).assert_outcomes(passed=2)


def test_seed_option_sets_the_seed_and_the_header_shows_it(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        def test_seed(compactsim_run):
            assert compactsim_run("explicit-logprobs").record.seed == 11
        """
    )
    result = pytester.runpytest_inprocess(*QUIET, "--compactsim-seed=11")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["compactsim: seed=11, backend=compactsim.harness.pipeline:ReferenceBackend"])


def test_header_says_scenario_default_without_a_seed(pytester: pytest.Pytester):
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_inprocess(*QUIET)
    result.stdout.fnmatch_lines(["compactsim: seed=scenario default, backend=compactsim.harness.pipeline:ReferenceBackend"])


def test_marker_is_registered_with_an_example(pytester: pytest.Pytester):
    result = pytester.runpytest_inprocess(*QUIET, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.compactsim(scenario, seed=None, backend=None, steps=None): *"
                                 "@pytest.mark.compactsim(scenario='image-compaction-k2-rolling', seed=3)"])


def test_flags_live_in_the_compactsim_group(pytester: pytest.Pytester):
    result = pytester.runpytest_inprocess(*QUIET, "--help")
    result.stdout.fnmatch_lines(["compactsim scenario runs:", "*--compactsim-seed=N*", "*--compactsim-backend=MODULE:ATTR*",
                                 "*--compactsim-out=DIR*"])


def test_out_option_keeps_each_runs_artifacts(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        def test_keep(compactsim_run):
            assert compactsim_run("explicit-logprobs", seed=3).record.passed
        """
    )
    out = pytester.path / "kept"
    pytester.runpytest_inprocess(*QUIET, f"--compactsim-out={out}").assert_outcomes(passed=1)
    assert (out / "explicit-logprobs-seed3" / "summary.json").is_file()
    assert (out / "explicit-logprobs-seed3" / "scenarios" / "explicit-logprobs" / "artifacts" / "step-0000.npz").is_file()


def test_out_option_keeps_one_folder_per_backend_and_cap(pytester: pytest.Pytester):
    """Two backends of one scenario and seed wrote the same folder, the last one overwriting the first."""
    pytester.makepyfile(
        """
        def test_keep(compactsim_run):
            assert compactsim_run("explicit-logprobs", seed=3).record.passed
            broken = compactsim_run("explicit-logprobs", seed=3, backend="tests.quality.routes_dropped:Backend")
            assert broken.record.name == "explicit-logprobs"
        """
    )
    out = pytester.path / "kept"
    pytester.runpytest_inprocess(*QUIET, f"--compactsim-out={out}").assert_outcomes(passed=1)
    assert sorted(p.name for p in out.iterdir()) == [
        "explicit-logprobs-seed3", "explicit-logprobs-seed3-tests.quality.routes_dropped-Backend"]


def test_marker_without_a_scenario_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.compactsim(seed=1)
        def test_bad():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TypeError: @pytest.mark.compactsim needs scenario='<name>'*"])


def test_fixture_without_marker_needs_a_scenario(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        def test_bad(compactsim_run):
            with pytest.raises(TypeError, match="needs a scenario outside a test marked"):
                compactsim_run()
        """
    )
    pytester.runpytest_inprocess(*QUIET).assert_outcomes(passed=1)


def test_compactsim_run_result_exposes_passed_findings_and_the_run(pytester: pytest.Pytester):
    pytester.makepyfile(
        f"""
        from compactsim.harness.pytest_plugin import ScenarioResult

        def test_good(compactsim_run):
            result = compactsim_run("explicit-logprobs", seed=1)
            assert isinstance(result, ScenarioResult)
            assert result.passed is True and result.findings == ()
            assert result.reproduce == result.record.reproduce == "compactsim run explicit-logprobs --seed 1"
            assert result.files is result.run.files and result.audit is result.run.audit

        def test_broken(compactsim_run):
            result = compactsim_run("explicit-logprobs", seed=1, backend="{BROKEN}")
            assert result.passed is False
            assert result.findings == result.record.findings and len(result.findings) > 0
            assert repr(result).startswith("ScenarioResult('explicit-logprobs', seed=1, passed=False, findings=")
        """
    )
    pytester.runpytest_inprocess(*QUIET).assert_outcomes(passed=2)
