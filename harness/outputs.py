"""A run's output folder is complete or visibly incomplete, never stale.

Protocol (what `compactsim run` does; the README's "Output folder" section says the same):

1. `prepare_output_dir` (before any scenario runs): a folder that looks like a compactsim output
   (it has ``run-state.json``, or a ``summary.json`` whose format is ``compactsim-summary/…``) loses compactsim's
   own entries (`OWNED`); an empty or new folder is created; a non-empty folder that does not
   look like one is refused (exit 2) unless ``--force``, and then too only compactsim's own
   entries are replaced. The folder is locked (flock) until the run ends: a second run into it
   exits 2. ``run-state.json`` = ``{"status": "running"}`` is written *before* the old entries
   are deleted, so a run stopped or failing while it clears them never leaves the old
   ``"complete"`` beside a half-deleted folder. A SIGTERM or SIGINT (or any exit before step 3)
   rewrites it to ``"interrupted"``; a SIGKILL leaves ``"running"``. Either way there is no
   ``summary.json``: the old one went in this step.
2. `write_outputs`: every file is written into a staging folder inside the output folder
   (``.compactsim-staging``: the same filesystem, so the renames work on a mount point or a link
   to another disk too) and renamed into place, ``summary.json`` last, so a ``summary.json`` in
   the folder always belongs to a set of files that was written completely.
3. `finish_output_dir`: ``run-state.json`` = ``{"status": "complete", "passed": ...}``.

Nothing here reads a clock: the state file's bytes depend only on how the run ended.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError

RUN_STATE = "run-state.json"
RUN_STATE_FORMAT = "compactsim-run-state/1"
#: Where `write_outputs` stages the files inside the output folder before renaming them into place.
STAGING = ".compactsim-staging"
#: Top-level entries a run writes; the only ones it ever deletes.
OWNED: tuple[str, ...] = ("summary.json", "timings.json", "report.html", "scenarios", "wandb", STAGING, RUN_STATE)
#: `summary.json`'s "format" prefix (marks an output folder written before run-state.json existed)
_SUMMARY_FORMAT_PREFIX = "compactsim-summary/"

_active: dict[str, Any] = {}
_active_lock = threading.Lock()


def staging_dir(out: Path) -> Path:
    """The folder `write_outputs` fills before renaming its entries into `out`.

    Inside `out`, not beside it: a rename cannot cross filesystems, and `--out` is often a mount
    point (a CI volume) or a link to another disk, whose parent is elsewhere.
    """
    return out / STAGING


def read_run_state(out: Path) -> dict[str, Any] | None:
    """``run-state.json`` of `out` (None when absent or unreadable)."""
    try:
        data = json.loads((out / RUN_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def looks_like_output(out: Path) -> bool:
    """True for a folder a compactsim run wrote (now, or before run-state.json existed)."""
    state = read_run_state(out)
    if state is not None and state.get("format") == RUN_STATE_FORMAT:
        return True
    try:
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and str(summary.get("format", "")).startswith(_SUMMARY_FORMAT_PREFIX)


def _listed(names: Sequence[str]) -> str:
    """The first five of `names` for a refusal message (an ellipsis for the rest)."""
    return ", ".join(names[:5]) + (", …" if len(names) > 5 else "")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary name next to `path`, then rename it over `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_run_state(out: Path, status: str, **extra: Any) -> None:
    """Replace ``run-state.json`` atomically (sorted keys, no timestamps)."""
    state = {"format": RUN_STATE_FORMAT, "status": status, **extra}
    _write_atomic(out / RUN_STATE, json.dumps(state, sort_keys=True, indent=2) + "\n")


def _os_reason(exc: OSError) -> str:
    """`exc` without the repeated path: "Not a directory", "Permission denied", ..."""
    return exc.strerror or type(exc).__name__


def check_output_dir(out: Path, *, option: str = "--out") -> Path:
    """Refuse (`ConfigError`, one line) a folder path that could not be created, without creating anything.

    For an output written after another one that may contain it (`export --reference-dump` inside
    `--out`): the path is not a file, and its nearest existing ancestor is a writable folder.
    """
    if out.exists():
        if not out.is_dir():
            raise ConfigError("invalid_argument", f"{option} {out}: exists and is not a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise ConfigError("invalid_argument", f"{option} {out}: the folder is not writable")
        return out
    parent = out.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError("invalid_argument", f"{option} {out}: cannot create the folder under {parent}")
    return out


def ensure_output_dir(out: Path, *, option: str = "--out") -> Path:
    """Create the folder `out` (and its parents) before a command does any work, or raise a `ConfigError`.

    Commands write their files at the end; an `--out` that is a file, lies under a file, or sits
    where nothing can be created (``/proc``, a read-only mount) would otherwise end a long run
    with an OSError traceback. The error names `option` and the path on one line (exit 2).
    """
    try:
        if out.exists() and not out.is_dir():
            raise ConfigError("invalid_argument", f"{option} {out}: exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        if not os.access(out, os.W_OK | os.X_OK):
            raise ConfigError("invalid_argument", f"{option} {out}: the folder is not writable")
    except OSError as exc:
        raise ConfigError("invalid_argument", f"{option} {out}: cannot create the folder: {_os_reason(exc)}") from None
    return out


def claim_output_dir(out: Path, *, owns: Callable[[Path], bool], command: str, force: bool = False) -> None:
    """Give `command` (``train``, ``rollout``) a folder holding nothing of an earlier run: its own entries
    (``owns(path)``) are deleted; any other entry refuses the folder (exit 2) unless `force`, which keeps it.

    Those commands write one file per step or rollout into `out`: a rerun with fewer steps or rollouts left the
    older run's files beside the new ones, indistinguishable but for their times, and a user's own file of
    the same name was overwritten without a word.
    """
    ensure_output_dir(out)
    try:
        entries = sorted(out.iterdir())
        foreign = [p.name for p in entries if not owns(p)]
        if foreign and not force:
            raise ConfigError("invalid_argument", f"--out {out}: the folder holds files `compactsim {command}` does not "
                                                  f"write ({_listed(foreign)}); choose a new or empty folder, or pass --force "
                                                  f"(only its own files are replaced)")
        for path in entries:
            if owns(path):
                _remove(path)
    except OSError as exc:
        raise ConfigError("invalid_argument", f"--out {out}: cannot prepare the folder: {_os_reason(exc)}") from None


def _json_of(path: Path) -> Any:
    """A small JSON file's content, or None (unreadable, not JSON, or a folder)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def train_owns(path: Path) -> bool:
    """An entry `compactsim train` writes (its ``config.json`` recognised by its keys, not by its name alone)."""
    if path.name == "config.json":
        config = _json_of(path)
        return isinstance(config, dict) and {"run", "trainer", "backend"} <= set(config)
    return path.name in ("metrics.jsonl", "timings.jsonl", "train_summary.json", "artifacts", "rollouts", "wandb")


def rollout_owns(path: Path) -> bool:
    """An entry `compactsim rollout` writes: per-rollout result and ground-truth files, and its list-shaped summary."""
    if path.name == "summary.json":
        return isinstance(_json_of(path), list)
    return path.is_file() and path.name.endswith((".result.json", ".ground_truth.json"))


def prepare_output_dir(out: Path, *, force: bool = False, handle_signals: bool = True) -> None:
    """Clear compactsim's entries from `out` (or refuse a foreign non-empty folder) and mark the run running.

    `handle_signals`: turn SIGTERM and SIGINT into `SystemExit(143 / 130)` (so ``finally`` blocks run) and mark
    the run ``"interrupted"`` if the process exits before `finish_output_dir`. A folder that
    cannot be created, read or written is a `ConfigError` naming ``--out`` (see `ensure_output_dir`).
    """
    ensure_output_dir(out)  # a new folder is created empty; a file or an uncreatable path is refused
    try:
        entries = sorted(p.name for p in out.iterdir())
        if entries and not looks_like_output(out) and not force:
            raise ConfigError(
                "invalid_argument",
                f"--out {out}: the folder is not empty ({_listed(entries)}) and is not a compactsim output folder; "
                f"choose a new or empty folder, or pass --force (only {', '.join(OWNED)} are replaced)")
        _lock(out)
        write_run_state(out, "running")  # before anything is deleted: the old "complete" never outlives the old files
    except OSError as exc:
        raise ConfigError("invalid_argument", f"--out {out}: cannot prepare the folder: {_os_reason(exc)}") from None
    if handle_signals:
        _watch(out)
    try:
        for name in OWNED:
            if name != RUN_STATE:
                _remove(out / name)
    except OSError as exc:
        reason = f"the run could not clear the folder's earlier entries: {_os_reason(exc)}"
        _mark_interrupted(out, reason)
        raise ConfigError("invalid_argument", f"--out {out}: {reason}") from None


def finish_output_dir(out: Path, *, passed: bool) -> None:
    """Mark the run complete (after `write_outputs`), stop watching for an early exit and let another run in."""
    raise_if_terminated()
    write_run_state(out, "complete", passed=bool(passed))
    _unwatch(out)
    release_output_dir(out)


#: Output folders this process holds (`_lock`): resolved path -> the open descriptor its lock lives on.
_locks: dict[str, int] = {}


def _lock(out: Path) -> None:
    """Hold an exclusive lock on the folder itself (flock on its descriptor) for as long as this run writes it.

    Two runs into one folder would delete and overwrite each other's files and leave a run-state.json
    that describes neither. The lock is the kernel's: it goes with the process, SIGKILL included, so
    no stale lock file can outlive a run. Taken before anything in the folder changes.
    """
    import fcntl

    key = str(out.resolve())
    if key in _locks:
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError("invalid_argument", f"--out {out}: another compactsim run is writing this folder now; "
                                              "wait for it, or choose another folder") from None
    _locks[key] = fd


def release_output_dir(out: Path) -> None:
    """Let another run write `out` (the lock `prepare_output_dir` took); nothing when this process holds none."""
    fd = _locks.pop(str(out.resolve()), None)
    if fd is not None:
        os.close(fd)


def _watch(out: Path) -> None:
    """Mark the run interrupted on SIGTERM or on any interpreter exit that comes before it finishes."""
    key = str(out.resolve())

    def at_exit() -> None:
        _mark_interrupted(out, "the process exited before the run finished")

    with _active_lock:
        _unwatch_locked(key)
        atexit.register(at_exit)
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in WATCHED_SIGNALS:
                previous[signum] = signal.getsignal(signum)
                signal.signal(signum, _on_signal)
        _active[key] = (at_exit, previous)


#: SIGTERM (a CI runner cancelling the job) and SIGINT (Ctrl-C) end a run the same way: marked interrupted, named.
WATCHED_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: Signals `_on_signal` received in this process: its `SystemExit` can be swallowed by code the signal lands in
#: (a library's bare ``except:`` around an import), so the run checks this before it writes or finishes.
_received: list[int] = []


def _on_signal(signum: int, frame: Any) -> None:
    """The signal unwinds the run (servers close, ``finally`` blocks run); exit status 128 + its number
    (143 for SIGTERM, 130 for SIGINT), the folder's run-state.json ``interrupted`` with the signal's name."""
    import sys

    _received.append(signum)
    name = signal.Signals(signum).name
    for key in list(_active):
        _mark_interrupted(Path(key), name)
        sys.stderr.write(f"compactsim: {name} received: {Path(key) / RUN_STATE} says interrupted; exiting "
                         f"{128 + signum}\n")
    raise SystemExit(128 + signum)


def terminated() -> bool:
    """Whether SIGTERM or SIGINT reached this process while a run watched its folder."""
    return bool(_received)


def stops_the_run(exc: BaseException) -> bool:
    """Whether `exc`, raised inside a backend call, ends the run rather than being the backend's failure: the user's
    Ctrl-C, or the `SystemExit` of a SIGTERM/SIGINT this process received. Anything else a backend raises
    (`sys.exit`, its own `BaseException`, a `GeneratorExit`) is its failure, a finding."""
    return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, SystemExit) and terminated())


def raise_if_terminated() -> None:
    """Exit 128 + the signal now if one arrived and its `SystemExit` was swallowed on the way: an interrupted run
    must never go on to write outputs or mark itself complete."""
    if _received:
        raise SystemExit(128 + _received[0])


def _mark_interrupted(out: Path, reason: str) -> None:
    """``running`` -> ``interrupted`` (best effort: the folder may be gone by now)."""
    state = read_run_state(out)
    if state is not None and state.get("status") == "running":
        try:
            write_run_state(out, "interrupted", reason=reason)
        except OSError:
            pass


def _unwatch(out: Path) -> None:
    with _active_lock:
        _unwatch_locked(str(out.resolve()))


def _unwatch_locked(key: str) -> None:
    entry = _active.pop(key, None)
    if entry is None:
        return
    at_exit, previous = entry
    atexit.unregister(at_exit)
    if not _active and threading.current_thread() is threading.main_thread():
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def write_outputs(out: Path, runs: Sequence[Any], suite: Any, *, total_seconds: float | None = None,
                  executor: str = "local") -> dict[str, Path]:
    """Write every scenario's files, `timings.json`, `report.html` and `summary.json` under `out`.

    All files go to `staging_dir(out)` first; then the old `summary.json` is removed, the other
    entries are renamed into place replacing the old ones (no stale scenario or step file stays
    beside new ones), and `summary.json` is renamed last.
    """
    from compactsim.harness.report.html import format_report_html
    from compactsim.harness.report.summary import format_summary_json, format_timings

    raise_if_terminated()
    stage = staging_dir(out)
    _remove(stage)
    stage.mkdir(parents=True)
    for run in runs:
        base = stage / "scenarios" / run.record.name
        for rel, data in sorted(run.files.items()):
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    (stage / "scenarios").mkdir(exist_ok=True)
    writers: list[tuple[str, Callable[[], str]]] = [
        ("timings.json", lambda: format_timings(suite, total_seconds=total_seconds, extra={"executor": executor})),
        ("report.html", lambda: format_report_html(suite)),
        ("summary.json", lambda: format_summary_json(suite)),
    ]
    for name, render in writers:
        (stage / name).write_text(render(), encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").unlink(missing_ok=True)
    for name in ("scenarios", "timings.json", "report.html", "summary.json"):
        _remove(out / name)
        os.replace(stage / name, out / name)
    _remove(stage)
    return {"summary": out / "summary.json", "timings": out / "timings.json", "report": out / "report.html"}


__all__ = [
    "OWNED",
    "RUN_STATE",
    "RUN_STATE_FORMAT",
    "STAGING",
    "claim_output_dir",
    "ensure_output_dir",
    "finish_output_dir",
    "looks_like_output",
    "prepare_output_dir",
    "raise_if_terminated",
    "read_run_state",
    "release_output_dir",
    "rollout_owns",
    "staging_dir",
    "terminated",
    "train_owns",
    "write_outputs",
    "write_run_state",
]
