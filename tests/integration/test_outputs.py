"""A run's output folder is complete or visibly incomplete: never a stale summary, never stale files.

The kill tests start `compactsim run` as a subprocess on a small scenario whose calls are slowed
(a `slow` fault), wait until it has marked the folder running, then SIGTERM or SIGKILL it, over a
folder that holds a previous complete, passing run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.outputs import (
    OWNED,
    finish_output_dir,
    looks_like_output,
    prepare_output_dir,
    read_run_state,
    staging_dir,
    write_outputs,
)
from compactsim.harness.runner import RunOptions, gym_record, resolve_scenarios, run_suite, suite_record
from compactsim.harness.runner import write_outputs as runner_write_outputs

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

COMPACTSIM = str(Path(sys.executable).parent / "compactsim")
SLOW_SCENARIO = """\
scenarios:
  - name: slow-two-steps
    purpose: "Two steps of two rollouts whose every call is delayed 0.2 s: a run that is still going when it is killed."
    tags: [outputs]
    steps: 2
    script: {generate: {turns: 4}}
    faults:
      - {kind: slow, delay_s: 0.2}
"""


@pytest.fixture(scope="module")
def finished():
    """A real finished run of `no-compaction` (runs + suite record), written once per module."""
    options = RunOptions()
    selected = resolve_scenarios(["no-compaction"])
    runs = run_suite(selected, options)
    suite = suite_record(runs, options, [s.name for s in selected], gym=gym_record(runs))
    assert suite.passed
    return runs, suite


def _previous_run(out: Path, finished, *, extra_steps: bool = True) -> None:
    """Leave in `out` what a complete, passing earlier run leaves, with one more step and one more scenario."""
    runs, suite = finished
    old = runs[0]
    files = dict(old.files)
    if extra_steps:
        files["artifacts/step-0099.json"] = b"{}"
        files["results/step-0099.jsonl"] = b"\n"
    stale_record = dataclasses.replace(old.record, name="old-scenario")
    prepare_output_dir(out, handle_signals=False)
    write_outputs(out, [dataclasses.replace(old, files=files), dataclasses.replace(old, record=stale_record)], suite)
    finish_output_dir(out, passed=True)
    assert json.loads((out / "summary.json").read_text())["passed"] is True


def _tree(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------- the protocol


def test_runner_reexports_write_outputs_under_the_same_name(tmp_path, finished):
    runs, suite = finished
    paths = runner_write_outputs(tmp_path / "out", runs, suite, total_seconds=1.0, executor="local")
    assert paths == {"summary": tmp_path / "out" / "summary.json", "timings": tmp_path / "out" / "timings.json",
                     "report": tmp_path / "out" / "report.html"}
    assert not staging_dir(tmp_path / "out").exists()


def test_a_new_run_replaces_every_entry_of_the_previous_one(tmp_path, finished):
    out = tmp_path / "out"
    _previous_run(out, finished)
    (out / "wandb").mkdir()
    (out / "notes.txt").write_text("mine")
    assert "scenarios/old-scenario/run.json" in _tree(out)
    prepare_output_dir(out, handle_signals=False)
    assert _tree(out) == ["notes.txt", "run-state.json"]
    assert read_run_state(out) == {"format": "compactsim-run-state/1", "status": "running"}
    runs, suite = finished
    write_outputs(out, runs, suite)
    finish_output_dir(out, passed=suite.passed)
    tree = _tree(out)
    assert not [p for p in tree if "old-scenario" in p or "step-0099" in p]
    assert {"summary.json", "timings.json", "report.html", "scenarios/no-compaction/run.json"} <= set(tree)
    assert read_run_state(out) == {"format": "compactsim-run-state/1", "passed": True, "status": "complete"}


def test_write_outputs_alone_never_leaves_stale_files_beside_new_ones(tmp_path, finished):
    """Without the command's start hook (the Python API) the renames still replace whole entries."""
    out = tmp_path / "out"
    _previous_run(out, finished)
    runs, suite = finished
    write_outputs(out, runs, suite)
    assert sorted(p.name for p in (out / "scenarios").iterdir()) == ["no-compaction"]
    assert not (out / "scenarios/no-compaction/artifacts/step-0099.json").exists()


def test_write_outputs_interrupted_before_the_summary_leaves_no_summary(tmp_path, finished, monkeypatch):
    import compactsim.harness.outputs as outputs

    out = tmp_path / "out"
    _previous_run(out, finished)
    prepare_output_dir(out, handle_signals=False)
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst).name == "summary.json":
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(outputs.os, "replace", replace)
    runs, suite = finished
    with pytest.raises(KeyboardInterrupt):
        write_outputs(out, runs, suite)
    assert not (out / "summary.json").exists()
    assert (out / "scenarios/no-compaction/run.json").exists()
    assert read_run_state(out)["status"] == "running"


def test_write_outputs_removes_the_old_summary_before_moving_anything(tmp_path, finished, monkeypatch):
    import compactsim.harness.outputs as outputs

    out = tmp_path / "out"
    _previous_run(out, finished)
    monkeypatch.setattr(outputs.os, "replace", lambda src, dst: (_ for _ in ()).throw(KeyboardInterrupt()))
    runs, suite = finished
    with pytest.raises(KeyboardInterrupt):
        write_outputs(out, runs, suite)
    assert not (out / "summary.json").exists()


def test_a_foreign_non_empty_folder_is_refused_without_force(tmp_path):
    out = tmp_path / "project"
    (out / "scenarios").mkdir(parents=True)
    (out / "scenarios" / "keep.yaml").write_text("x")
    (out / "README.md").write_text("x")
    with pytest.raises(ConfigError) as info:
        prepare_output_dir(out, handle_signals=False)
    assert info.value.code == "invalid_argument"
    assert "not a compactsim output folder" in info.value.detail and "--force" in info.value.detail
    assert _tree(out) == ["README.md", "scenarios/keep.yaml"]
    prepare_output_dir(out, force=True, handle_signals=False)
    assert _tree(out) == ["README.md", "run-state.json"]


def test_an_output_folder_from_before_run_state_is_recognised_by_its_summary(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"format": "compactsim-summary/1", "passed": True}))
    (out / "scenarios" / "x").mkdir(parents=True)
    assert looks_like_output(out)
    prepare_output_dir(out, handle_signals=False)
    assert _tree(out) == ["run-state.json"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "summary.json").write_text(json.dumps({"format": "someone-else"}))
    assert not looks_like_output(tmp_path / "other")


def test_an_out_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        prepare_output_dir(tmp_path / "f", handle_signals=False)


def test_owned_entries_are_what_a_run_writes(tmp_path, finished):
    out = tmp_path / "out"
    _previous_run(out, finished, extra_steps=False)
    assert {p.name for p in out.iterdir()} <= set(OWNED)


# ---------------------------------------------------------------------------------------------- killed runs


def _start_and_kill(tmp_path: Path, finished, sig: int) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "out"
    _previous_run(out, finished)
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SLOW_SCENARIO)
    proc = subprocess.Popen([COMPACTSIM, "run", str(scenario), "--out", str(out), "--json"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while (read_run_state(out) or {}).get("status") != "running":
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the run never marked its folder running"
        time.sleep(0.02)
    time.sleep(1.0)  # mid-run: imports done or under way, no step can have finished writing outputs
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(sig)
    proc.wait(timeout=60)
    return proc, out


def _assert_not_a_finished_run(out: Path) -> None:
    tree = _tree(out)
    assert "summary.json" not in tree
    assert not [p for p in tree if "old-scenario" in p or "step-0099" in p or p.startswith("scenarios/")]
    assert not staging_dir(out).exists() or not (staging_dir(out) / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_leaves_an_interrupted_folder_naming_it_and_no_summary(tmp_path, finished, sig, code):
    """Ctrl-C is named like a CI runner's SIGTERM (it used to read "the process exited before the run finished")."""
    proc, out = _start_and_kill(tmp_path, finished, sig)
    name = signal.Signals(sig).name
    assert proc.returncode == code
    assert read_run_state(out) == {"format": "compactsim-run-state/1", "reason": name, "status": "interrupted"}
    assert f"compactsim: {name} received: {out / 'run-state.json'} says interrupted; exiting {code}" in \
        proc.stderr.read().decode()
    _assert_not_a_finished_run(out)


def test_a_second_run_into_a_folder_another_run_is_writing_exits_2_and_touches_nothing(tmp_path):
    """The folder is flock'ed from prepare to finish: two runs into it used to delete each other's files and both
    exit 0 over a folder describing neither. The kernel drops the lock with its holder, SIGKILL included."""
    import fcntl
    import os

    from compactsim.harness.core.errors import ConfigError
    from compactsim.harness.outputs import release_output_dir

    out = tmp_path / "out"
    out.mkdir()
    (out / "run-state.json").write_text('{"format": "compactsim-run-state/1", "status": "running"}')
    held = os.open(out, os.O_RDONLY)  # what the other run's process holds
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ConfigError, match="another compactsim run is writing this folder now"):
            prepare_output_dir(out, handle_signals=False)
        assert (out / "run-state.json").read_text() == '{"format": "compactsim-run-state/1", "status": "running"}'
    finally:
        os.close(held)
    prepare_output_dir(out, handle_signals=False)  # the holder is gone: this run takes the folder
    assert read_run_state(out)["status"] == "running"
    release_output_dir(out)


def test_the_files_are_staged_inside_the_folder():
    """Beside it, a rename into a mount point (a CI volume) crossed filesystems: EXDEV after the whole run."""
    out = Path("some/out")
    assert staging_dir(out).parent == out and staging_dir(out).name in OWNED


def test_a_folder_on_another_filesystem_gets_the_whole_run(tmp_path, finished):
    """`--out` as a link to a folder on another disk (here /dev/shm): the run's files are renamed into place."""
    import tempfile

    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second writable filesystem here")
    with tempfile.TemporaryDirectory(dir=shm) as elsewhere:
        out = tmp_path / "out"
        out.symlink_to(elsewhere, target_is_directory=True)
        runs, suite = finished
        prepare_output_dir(out, handle_signals=False)
        write_outputs(out, runs, suite)
        finish_output_dir(out, passed=suite.passed)
        assert {"summary.json", "report.html", "run-state.json", "scenarios/no-compaction/run.json"} <= set(_tree(out))
        assert not staging_dir(out).exists() and read_run_state(out)["status"] == "complete"


def test_the_folder_says_running_before_its_old_entries_are_deleted(tmp_path, finished, monkeypatch):
    """A run stopped or failing while it clears an old folder used to leave the old "complete" (passed: true) beside
    a half-deleted folder without its summary; now the state is written first and says interrupted."""
    from compactsim.harness import outputs

    out = tmp_path / "out"
    _previous_run(out, finished)
    seen: list[str] = []

    def failing_remove(path: Path) -> None:
        seen.append(read_run_state(out)["status"])
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(outputs, "_remove", failing_remove)
    with pytest.raises(ConfigError, match=r"--out .*out: the run could not clear the folder's earlier entries: "
                                          r"Operation not permitted"):
        prepare_output_dir(out, handle_signals=False)
    outputs.release_output_dir(out)
    assert seen == ["running"]
    assert read_run_state(out) == {"format": "compactsim-run-state/1", "status": "interrupted",
                                   "reason": "the run could not clear the folder's earlier entries: Operation not permitted"}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sigkill_mid_run_leaves_a_running_folder_and_no_summary(tmp_path, finished):
    proc, out = _start_and_kill(tmp_path, finished, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert read_run_state(out) == {"format": "compactsim-run-state/1", "status": "running"}
    _assert_not_a_finished_run(out)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_run_into_a_foreign_folder_exits_2_and_touches_nothing(tmp_path):
    out = tmp_path / "src"
    out.mkdir()
    (out / "main.py").write_text("print('hi')")
    proc = subprocess.run([COMPACTSIM, "run", "no-compaction", "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--force" in proc.stdout + proc.stderr
    assert _tree(out) == ["main.py"]


def test_a_sigterm_whose_exit_was_swallowed_still_ends_the_run_before_it_writes(tmp_path, finished, monkeypatch):
    """A library's bare ``except:`` (around an import, say) can swallow the handler's SystemExit; the run then must
    not write outputs or call itself complete: it exits 143 at the next of those, its folder still interrupted."""
    from compactsim.harness import outputs

    out = tmp_path / "out"
    monkeypatch.setattr(outputs, "_received", [])
    outputs.prepare_output_dir(out)
    try:
        try:
            outputs._on_signal(signal.SIGTERM, None)
        except BaseException:  # noqa: BLE001 - what the swallowing library does
            pass
        assert outputs.terminated()
        with pytest.raises(SystemExit) as info:
            outputs.write_outputs(out, list(finished), None)
        assert info.value.code == 143
        with pytest.raises(SystemExit):
            outputs.finish_output_dir(out, passed=True)
        assert read_run_state(out) == {"format": "compactsim-run-state/1", "reason": "SIGTERM", "status": "interrupted"}
        assert "summary.json" not in _tree(out)
    finally:
        outputs._unwatch(out)
        outputs.release_output_dir(out)
