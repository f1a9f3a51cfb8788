"""Run scenarios end to end: mock servers, scripted agents, the backend under test, the oracle and the audit.

    compactsim run                                   # the default suite: the whole catalogue
    compactsim run image-compaction-k2 --seed 7 --backend tests.quality.broadcast_first_advantage:Backend

For each scenario, and each of its optimizer steps: the agents collect the step's rollouts from
the mock model and reward servers (served in this process, or on 127.0.0.1 ports); the backend
plans, materializes and trains (`compactsim.harness.pipeline.Backend`, loaded from ``module:attr``); in
policy mode the new weights go back to the model server. A contract error the backend raises
ends the run at that step. Then the oracle computes what every step must have shown from the
scenario and the agents' ground-truth logs, and the audit compares. A failed scenario still
returns (and the suite still writes) every artifact it produced.

Executors: ``local`` runs scenarios one after another in this process, or with ``parallel > 1``
on that many spawned worker processes (`compactsim.harness.local_pool`); ``ray`` runs each
scenario as a Ray task (a local Ray on 127.0.0.1, or an existing cluster with ``ray_address``).
A scenario's outcome is a pure function of the scenario, the seed and the code, so the
`summary.json` bytes do not depend on the executor or the worker count.

Output directory (`write_outputs`)::

    summary.json                          verdicts, findings, per-step metrics, seed, versions, Gym record
    timings.json                          seconds per scenario and stage (never in summary.json)
    report.html                           self-contained page: table, plots, trace views
    scenarios/<name>/scenario.json        the scenario as run (seed and step cap applied)
    scenarios/<name>/run.json             seed, backend, device, step cap (what `compactsim replay` reads)
    scenarios/<name>/audit.json           the audit report (findings with reproduction command)
    scenarios/<name>/metrics.jsonl        one line per trained step
    scenarios/<name>/artifacts/step-NNNN.{npz,json}   the step artifact (compactsim.harness.core.artifacts)
    scenarios/<name>/results/step-NNNN.jsonl          the Gym results the backend received
    scenarios/<name>/rollouts/step-NNNN.jsonl         the agents' ground-truth logs (the oracle's input)

The per-step results, ground-truth logs and metrics are also on `ScenarioRun` as plain data
(`results_by_step`, `rollouts_by_step`, `metrics_by_step`, equal to those files read back), so
consumers such as the golden export never depend on this file layout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from compactsim.harness.audit.observed import BACKEND_ERROR
from compactsim.harness.audit import (
    AuditReport,
    Finding,
    ObservedError,
    ObservedRun,
    ObservedStep,
    Tolerances,
    audit_run,
    observed_from_artifact,
    reproduce_command,
    rgb_pixel_digest,
)
from compactsim.agents.collect.ray_local import RAY_CONNECT_TIMEOUT_S, local_ray
from compactsim.mock_servers.serving import ServerMode, open_mock_servers
from compactsim.harness.core.artifacts import encode_step_artifact, meta_to_json
from compactsim.harness.core.errors import CompactsimError, ConfigError, ContractError
from compactsim.harness.core.raised import exception_text, raising_frame
from compactsim.harness.core.training_state import MeasuredStep, snapshot_training_state
from compactsim.harness.local_pool import cost_hint, run_in_processes
from compactsim.harness.report.records import RolloutView, ScenarioRecord, SuiteRecord
from compactsim.harness.report.wandb_log import WandbSettings
from compactsim.harness.report.trace_view import rollout_views

HOST = "127.0.0.1"
DEFAULT_BACKEND = "compactsim.harness.pipeline:ReferenceBackend"
#: Stages whose wall-clock seconds are reported (timings.json, bench/bench_suite.py).
STAGES: tuple[str, ...] = ("collect", "plan", "materialize", "train", "weights", "oracle", "audit", "write")
#: Steps whose trace views are kept per scenario: the first ones, plus those with findings.
TRACE_STEPS = 1
MAX_TRACE_STEPS = 3

Executor = Literal["local", "ray"]
#: Trainer precisions `--precision` may force on every scenario (bfloat16 is not one: without router
#: replay its rounding flips routes, and the gradient it trains on is no longer the oracle's to judge).
Precision = Literal["float32", "float64"]
PRECISIONS: tuple[str, ...] = ("float32", "float64")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run scenarios (everything besides which ones)."""

    #: Overrides every scenario's seed when set.
    seed: int | None = None
    #: ``module:attr`` of the backend under test.
    backend: str = DEFAULT_BACKEND
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    #: Caps every scenario's optimizer steps (a smoke budget); None: the scenario's own.
    max_steps: int | None = None
    #: Mock servers in this process through ASGI (no port) or on 127.0.0.1 ports.
    server: ServerMode = "inprocess"
    #: Threads collecting one step's rollouts (results never depend on it).
    workers: int = 1
    wandb: bool = False
    #: Directory for W&B offline files (the run's output directory).
    wandb_dir: str | None = None
    #: Overrides every scenario's trainer precision (and the policy-mode server's dtype) when set.
    precision: Precision | None = None
    #: False skips the oracle's training step (loss, gradient, update) and the `train.*` checks: what
    #: `compactsim export` runs, since goldens hold rows and metrics only and that oracle is about a
    #: third of a scenario's time. Never in `run.json`: a run folder always holds the full audit.
    audit_training: bool = True

    def to_json(self) -> dict[str, Any]:
        out = {"seed": self.seed, "backend": self.backend, "device": self.device, "max_steps": self.max_steps}
        return out if self.precision is None else {**out, "precision": self.precision}


@dataclass(frozen=True, slots=True)
class ScenarioEvent:
    """Progress of one scenario (for progress bars): a step finished, or the scenario did."""

    scenario: str
    step: int
    total_steps: int
    done: bool = False
    record: ScenarioRecord | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ScenarioRun:
    """One scenario's record, the files it produced (relative to its directory under `scenarios/`) and its step data.

    The step data is what those files hold, read back as plain JSON data on each access (never in
    `summary.json`): a consumer reads it here instead of parsing files whose layout may change. It is
    decoded only when asked for: most runs never read it, and the ground-truth logs are the larger part
    of a run's bytes (decoding them every time cost ~5% of a scenario's run).
    """

    record: ScenarioRecord
    files: Mapping[str, bytes]
    audit: AuditReport | None = None
    #: The scenario as run (seed and step cap applied), as ``scenario.json`` holds it (mapping keys sorted);
    #: None when it could not be prepared.
    scenario: Any = None
    #: Why the scenario itself is bad input, found only once its rollouts existed (a mutation or corruption that
    #: cannot apply to them); None otherwise. Its record is a `run.harness_error`; `compactsim run` exits 2.
    invalid_scenario: str | None = None

    @property
    def results_by_step(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        """Per collected step: the Gym `/run` results in the order the backend received them (``results/``)."""
        return self._by_step("results")

    @property
    def rollouts_by_step(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        """Per collected step: every rollout as ``{rollout_id, status, ground_truth}`` (``rollouts/``)."""
        return self._by_step("rollouts")

    @property
    def metrics_by_step(self) -> tuple[dict[str, Any], ...]:
        """Per trained step: ``{"step": k, <metric>: value}``, non-finite floats as "nan"/"inf"/"-inf" (``metrics.jsonl``)."""
        data = self.files.get("metrics.jsonl")
        return () if data is None else _read_jsonl(data)

    def _by_step(self, folder: str) -> tuple[tuple[dict[str, Any], ...], ...]:
        steps = []
        while (data := self.files.get(f"{folder}/step-{len(steps):04d}.jsonl")) is not None:
            steps.append(_read_jsonl(data))
        return tuple(steps)


def _read_jsonl(data: bytes) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(line) for line in data.splitlines())


@dataclass(slots=True)
class _RunData:
    """What a scenario run has produced so far (kept when it stops early)."""

    files: dict[str, bytes] = field(default_factory=dict)
    scenario: Any = None

    def scenario_run(self, record: ScenarioRecord, audit: AuditReport | None,
                     invalid_scenario: str | None = None) -> ScenarioRun:
        """The immutable run."""
        return ScenarioRun(record=record, files=self.files, audit=audit, scenario=self.scenario,
                           invalid_scenario=invalid_scenario)


# ---------------------------------------------------------------------------------------------
# scenarios


#: The attribute a scenario loaded from a file keeps that file under (the selector as given), so
#: that its reproduction command names the file: its name alone selects nothing in the catalogue.
#: Not a field: the scenario's data (`scenario.json`, equality, digests) does not change.
_SOURCE_ATTR = "_compactsim_source"


def scenario_source(scenario: Any) -> str | None:
    """The scenario file a scenario came from, as the command line named it (None: a catalogue scenario)."""
    return getattr(scenario, _SOURCE_ATTR, None)


def _with_source(scenario: Any, source: str | None) -> Any:
    """`scenario`, remembering `source` as the file it came from (nothing to remember: unchanged)."""
    if source is not None:
        object.__setattr__(scenario, _SOURCE_ATTR, source)  # a frozen pydantic model: not a field, so set it directly
    return scenario


def resolve_scenarios(selectors: Sequence[str]) -> tuple[Any, ...]:
    """Catalogue scenarios named or tagged by `selectors` (all when empty); a path to a YAML file works too.

    A file's scenarios remember the selector that named it (`scenario_source`) for their reproduction command.
    """
    from compactsim.scenarios.catalogue import default_catalogue, load_file

    chosen: list[Any] = []
    names: list[str] = []
    for sel in selectors:
        path = Path(sel)
        if sel.endswith((".yaml", ".yml")) and path.is_file():
            chosen += [_with_source(s, sel) for s in load_file(path)]
        else:
            names.append(sel)
    if names or not selectors:
        chosen += default_catalogue().select(names)
    seen: dict[str, Any] = {}
    out = []
    for s in chosen:
        if s.name not in seen:
            seen[s.name] = s
            out.append(s)
        elif seen[s.name] != s:  # the same scenario selected twice runs once; two different ones never hide each other
            raise ConfigError("invalid_argument", f"two different scenarios are named {s.name!r} in {list(selectors)} "
                                                  "(a file's scenario and a catalogue entry, or two files): rename one")
    return tuple(out)


def prepare_scenario(scenario: Any, options: RunOptions) -> Any:
    """The scenario under the run's seed, step cap and precision (a `ConfigError` when the cap cuts off its mutation).

    A cap also rescales the scenario's step-count expectations (``sum(optimizer_steps) == 20``
    becomes ``== 6`` under ``--steps 6``) and drops the rollout overrides, mutation, corruption and
    faults aimed at the steps it cuts off, so a capped run of a passing scenario passes (one whose
    declared error came from what the cap dropped expects success: `run_scenario` skips its declared verdict). A
    precision sets the trainer's `policy.precision` and `policy.logprob_dtype` (the policy-mode
    server follows), and raises every `max_abs_dev` below that precision's metric tolerance to it
    (``token_mult_prob_error`` within 1e-9 of 1 is a float64 figure).
    """
    from compactsim.harness.audit.checks import Tolerances
    from compactsim.scenarios.metric_expectations import scale_step_counts, widen_deviations
    from compactsim.scenarios.model import Scenario, deep_merge

    data = scenario.to_data()
    if options.seed is not None:
        data["seed"] = options.seed
    if options.max_steps is not None and options.max_steps < scenario.steps:
        data["steps"] = options.max_steps
        if data.get("metrics"):
            data["metrics"] = scale_step_counts(data["metrics"], scenario.steps, options.max_steps)
        if data.get("rollouts"):
            data["rollouts"] = _overrides_within(data["rollouts"], options.max_steps)
        data.update(_edits_within(data, options.max_steps))
    if options.precision is not None:
        p = options.precision
        data["trainer"] = deep_merge(data.get("trainer") or {}, {"policy": {"precision": p, "logprob_dtype": p}})
        if data.get("metrics"):
            data["metrics"] = widen_deviations(data["metrics"], Tolerances.for_dtype(p).metric_atol)
    if data == scenario.to_data():
        return scenario
    return _with_source(Scenario.model_validate(data), scenario_source(scenario))


def _edits_within(data: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """The scenario's mutation, corruption and faults (as data) under a step cap: one aimed at a step the cap cuts
    off is dropped (it would never apply; a fault without a step applies at every step and stays)."""
    out: dict[str, Any] = {}
    for key in ("mutation", "corruption"):
        edit = data.get(key)
        if isinstance(edit, Mapping) and edit.get("step", 0) >= steps:
            out[key] = None
    if data.get("faults"):
        out["faults"] = [f for f in data["faults"] if f.get("step") is None or f["step"] < steps]
    return out


def _overrides_within(overrides: Sequence[Mapping[str, Any]], steps: int) -> list[dict[str, Any]]:
    """Rollout overrides (as data) under a step cap: the steps the cap cuts off left out of each one's `steps`,
    and one left with none dropped (it would never apply)."""
    out = []
    for o in overrides:
        limited = o.get("steps")
        kept = None if limited is None else [t for t in limited if t < steps]
        if kept is None or kept:
            out.append({**o, "steps": kept} if kept is not None else dict(o))
    return out


# ---------------------------------------------------------------------------------------------
# servers


def open_servers(model_settings: Mapping[str, Any], reward_settings: Mapping[str, Any],
                 mode: ServerMode = "inprocess"):  # -> ContextManager[OpenServers]
    """The scenario's mock model and reward servers with one client each, open for the whole run."""
    return open_mock_servers(model_settings, reward_settings, mode)


def _specs_of_groups(scenario: Any, specs: Sequence[Any], step: int, groups: set[int], *, fresh: bool) -> list[Any]:
    """The step's rollout specs whose group is (`fresh`) or is not (not `fresh`) one of `groups`."""
    from compactsim.scenarios.build import slots

    group_of = {s.rollout_id: s.group for s in slots(scenario, step)}
    return [spec for spec in specs if (group_of[spec.rollout_id] in groups) == fresh]


def _push_weights(client: Any, state: Any, *, step: int | None = None) -> ObservedError | None:
    """`POST /weights`; the server's new `policy_version` must be the trainer's.

    After a training step (`step`), a 422 is the server refusing the weights the backend left (a
    NaN or an infinity): the run's observed error, after the step itself is recorded, so the
    audit's findings on that step (`train.update`) are kept. Anything else is the harness's.
    """
    resp = client.post("/weights", content=state.policy.to_bytes(), headers={"content-type": "application/octet-stream"})
    if resp.status_code == 422 and step is not None:
        detail = resp.json().get("detail")
        return ObservedError(code="weights_refused", rollout_id=None, turn_id=None, step=step, stage="weights",
                             message=f"the generation server refused the weights after step {step}: {detail}")
    if resp.status_code != 200:
        raise ConfigError("invalid_config", f"POST /weights answered {resp.status_code}: {resp.text[:200]}")
    version = int(resp.json()["policy_version"])
    if version != state.version:
        raise ConfigError("invalid_config", f"server policy_version {version} after the push; the trainer is at {state.version}")
    return None


def _sync_initial_weights(client: Any, state: Any, precision: str) -> None:
    """Start generation from the trainer's checkpoint (pushed once only when the server's copy differs)."""
    import torch

    from compactsim.harness.core.digests import bytes_digest
    from compactsim.harness.core.policy import TinyPolicy

    served = TinyPolicy.load_bytes(state.policy.to_bytes(), dtype=torch.float64 if precision == "float64" else torch.float32)
    resp = client.get("/weights")
    resp.raise_for_status()
    if str(resp.json()["weights_digest"]) == bytes_digest(served.to_bytes()):
        return
    state.version += 1
    _push_weights(client, state)


# ---------------------------------------------------------------------------------------------
# one scenario


def _observed_error(exc: BaseException, step: int, stage: str) -> ObservedError:
    """A typed refusal keeps its code; anything else a backend raises (or returns malformed) is a backend failure."""
    if isinstance(exc, ContractError) and stage != "result":
        return ObservedError(exc.code, exc.rollout_id, exc.turn_id, step, stage, exc.detail)
    if isinstance(exc, ConfigError) and stage != "result":
        return ObservedError(exc.code, None, None, step, stage, exc.detail)
    what = "returned a malformed result" if stage == "result" else "raised"
    message = f"{what}: {type(exc).__name__}: {exception_text(exc)[:400]} (at {_innermost_frame(exc)})"
    return ObservedError(BACKEND_ERROR, None, None, step, "train" if stage == "result" else stage, message)


def _innermost_frame(exc: BaseException) -> str:
    """``file:line in function`` of the frame that raised (the backend's own code, for a backend failure)."""
    f = raising_frame(exc)
    return "unknown frame" if f is None else f"{Path(f.filename).name}:{f.lineno} in {f.name}"


def _check_versions(before: int, after: Any, result: Any) -> None:
    """A step trains the weights of version `before`, advances `state.version` by one and says so.

    The runner pushes the new weights to the generation server as that version, and every label
    of the trained weights (`trained_version`, the `train/policy_version` metric when reported)
    must name the version that computed the gradient; otherwise the backend, not the push, is named.
    """
    from compactsim.harness.core import metrics as M

    new, trained = getattr(result, "new_version", None), getattr(result, "trained_version", None)
    if after != before + 1 or new != after:
        raise ValueError(f"train_step must advance state.version by one and return it as new_version: state.version "
                         f"went from {before} to {after!r}, new_version is {new!r}")
    reported = getattr(result, "metrics", {}).get(M.TRAINED_POLICY_VERSION, before)
    if trained != before or reported != before:
        raise ValueError(f"the step trained the weights of version {before}, but the result labels them "
                         f"trained_version {trained!r}, {M.TRAINED_POLICY_VERSION} {reported!r}")


def _observe_result(result: Any, k: int, measured: MeasuredStep) -> tuple[ObservedStep, bytes, bytes]:
    """The audit's view of a backend's `StepResult` (harness-measured counts attached) and its artifact bytes.

    Anything missing or ill-shaped raises; the caller turns that into a backend failure.
    """
    import dataclasses

    from compactsim.harness.core import metrics as M

    digests = [[rgb_pixel_digest(p) for p in row] for row in result.batch.row_pixel_values]
    artifact = result.artifact
    materialized = result.batch.routed_experts
    step = observed_from_artifact(artifact, pixel_digests=digests,
                                  materialized_routes=None if materialized is None else materialized.detach().cpu().numpy())
    if step.step != k:
        raise ValueError(f"the step artifact says step {step.step}; the harness ran step {k}")
    metrics = dict(result.metrics)
    for key, value in metrics.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"metric {key!r} = {value!r}: metrics map names to numbers")
    reported = {key: metrics[key] for key in M.STEP_COUNT_KEYS if key in metrics}
    # the harness owns the counts: what it measured replaces what the backend says (kept under `reported`)
    metrics[M.OPTIMIZER_STEPS] = measured.optimizer_steps
    metrics[M.SCHEDULER_INCREMENTS] = measured.scheduler_increments
    step = dataclasses.replace(step, metrics=metrics, measured=measured, reported_counts=reported)
    npz, meta = encode_step_artifact(artifact)
    return step, npz, meta_to_json(meta).encode("utf-8")


def _jsonl(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """JSON-lines bytes of `rows` (what `ScenarioRun` reads its step data back from)."""
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows).encode("utf-8")


class _Clock:
    """Wall-clock seconds per stage (kept out of every deterministic output)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.started = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def total(self) -> float:
        return time.perf_counter() - self.started


def run_scenario(
    scenario: Any,
    options: RunOptions = RunOptions(),
    *,
    on_event: Callable[[ScenarioEvent], None] | None = None,
    collector: Callable[..., Any] | None = None,
) -> ScenarioRun:
    """Run one scenario, audit it, and return its record and files (it never raises for a failing backend).

    `collector` replaces `compactsim.agents.collect.collect` (same call) when another agent runs the rollouts
    (gym-check's live mode drives NeMo-Gym's own agent).
    """
    clock = _Clock()
    name = getattr(scenario, "name", str(scenario))
    data = _RunData()
    files = data.files
    original = scenario
    try:
        scenario = prepare_scenario(scenario, options)
        files["scenario.json"] = (json.dumps(scenario.to_data(), indent=2, sort_keys=True) + "\n").encode("utf-8")
        data.scenario = type(scenario).model_validate(json.loads(files["scenario.json"]))
    except (CompactsimError, ValueError) as exc:
        return _harness_failure(scenario, options, exc, clock, data)
    source = scenario_source(scenario)  # a file's scenario: replay reproduces it by that file, as the run did
    files["run.json"] = (json.dumps({"scenario": name, "seed": scenario.seed, **options.to_json(),
                                     **({"source": source} if source is not None else {})}, indent=2,
                                    sort_keys=True) + "\n").encode("utf-8")
    try:
        observed, logs_by_step, batches = _execute(scenario, options, clock, data, on_event, collector)
        with clock.stage("oracle"):
            from compactsim.harness.oracle.expect import expect_scenario
            from compactsim.harness.oracle.step_settings import StepSettings
            from compactsim.harness.oracle.training import expect_training

            expectation = expect_scenario(scenario, logs_by_step)
            settings = StepSettings.of(scenario)
            measured = [st.measured for st in observed.steps if st.measured is not None]
            training = expect_training(settings, expectation, logs_by_step, measured) if options.audit_training else ()
    except Exception as exc:  # noqa: BLE001 - whatever a backend left behind, this scenario fails, the suite goes on
        return _harness_failure(scenario, options, exc, clock, data)
    # a `--steps` cap may cut off the edit or override that caused the declared error: the capped scenario then
    # rightly succeeds (a declared error the cap did not touch is still checked)
    beyond_cap = (scenario.expect.verdict == "error" and expectation.error is None
                  and any(getattr(original, f, None) != getattr(scenario, f, None)
                          for f in ("mutation", "corruption", "faults", "rollouts")))
    with clock.stage("audit"):
        report = audit_run(expectation, observed, backend=_backend_flag(options.backend),
                           tolerances=Tolerances.for_dtype(settings.precision),
                           reproduce=scenario_reproduce(scenario, options), training=training,
                           router_replay=settings.router_replay,
                           declared=None if beyond_cap else (scenario.expect.verdict, scenario.expect.code,
                                                             scenario.expect.turn))
        traces = _trace_views(observed.steps, report.findings)
        media = _media_urls(logs_by_step, traces)
    files["audit.json"] = (json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    metrics = tuple(dict(st.metrics) for st in observed.steps)
    record = ScenarioRecord(
        name=scenario.name, purpose=scenario.purpose, tags=tuple(scenario.tags), flavour=scenario.flavour,
        seed=scenario.seed, expected=report.expected, observed=report.observed, passed=report.passed,
        steps=len(observed.steps), rows=sum(batches),
        tokens=sum(r.length for st in observed.steps for r in st.rows if not r.is_padding),
        findings=report.findings, reproduce=report.reproduce, error=observed.error, step_metrics=metrics,
        artifacts=f"scenarios/{scenario.name}", traces=traces, media_urls=media,
        seconds=clock.total(), stage_seconds=dict(clock.seconds),
    )
    if on_event is not None:
        on_event(ScenarioEvent(scenario.name, len(observed.steps), scenario.steps, done=True, record=record))
    return data.scenario_run(record, report)


def _backend_flag(backend: str) -> str | None:
    return None if backend == DEFAULT_BACKEND else backend


def scenario_reproduce(scenario: Any, options: RunOptions) -> str:
    """The one-line command that reruns exactly this scenario (a file's scenario: that file, as it was named)."""
    return reproduce_command(scenario_source(scenario) or scenario.name, scenario.seed,
                             backend=_backend_flag(options.backend), steps=options.max_steps,
                             precision=options.precision)


def _execute(
    scenario: Any, options: RunOptions, clock: _Clock, data: _RunData,
    on_event: Callable[[ScenarioEvent], None] | None,
    collector: Callable[..., Any] | None = None,
) -> tuple[ObservedRun, list[list[Mapping[str, Any]]], list[int]]:
    """Collect, plan, materialize and train every step (into `data`); stop at the first error the backend raises."""
    from compactsim.agents.collect import LocalExecutor
    from compactsim.agents.collect import collect as agents_collect
    from compactsim.harness.core.policy import configure_determinism
    from compactsim.harness.pipeline.backend import load_backend
    from compactsim.harness.pipeline.trainer import init_train_state
    from compactsim.harness.train_run import resolve_device
    from compactsim.scenarios.build import build_scenario, step_results

    collect = collector or agents_collect

    build = build_scenario(scenario)
    cfg = build.trainer_config
    backend = load_backend(options.backend)
    configure_determinism(1)
    state = init_train_state(cfg, device=resolve_device(options.device), model_config=build.model_config)
    steps: list[ObservedStep] = []
    logs_by_step: list[list[Mapping[str, Any]]] = []
    rows: list[int] = []
    error: ObservedError | None = None
    files = data.files
    with open_servers(build.model_settings, build.reward_settings, options.server) as servers:
        if scenario.mode == "policy":
            _sync_initial_weights(servers.model, state, cfg.policy.precision)
        # The trainer's own bookkeeping of the version the generation server holds: the checkpoint it
        # started from, then each version it pushes (policy mode). A scripted server never gets weights,
        # so it stays at the start version. Every `/run` result is labelled with it at collection time
        # (`trainer_policy_version`): Gym's items carry no version, as NeMo-RL labels rows by sync step.
        generation_version = state.version
        # async GRPO (NeMo-RL §6.3): step j's groups are generated `lead` optimizer steps ahead, with the
        # weights of that moment, so step j trains on rollouts of version max(0, j - lead)
        a = cfg.grpo.async_grpo
        lead = a.max_trajectory_age_steps if a.enabled else 0
        # `fresh_groups` are collected right before their step trains, the others `lead` steps ahead:
        # one batch then holds two policy versions (NeMo-RL's replay buffer mixes group ages)
        fresh = set(scenario.fresh_groups) if lead else set()
        ahead: dict[int, tuple[Any, dict[str, int]]] = {}  # step -> (rollouts collected ahead, rollout id -> version)
        for k in range(scenario.steps):
            with clock.stage("collect"):
                for j in range(k, min(scenario.steps, k + lead + 1)):
                    if j not in ahead:
                        early = _specs_of_groups(scenario, build.specs[j], j, fresh, fresh=False)
                        got = collect(early, servers, executor=LocalExecutor(options.workers))
                        ahead[j] = (list(got), {c.rollout_id: generation_version for c in got})
                collected, versions = ahead.pop(k)
                late = _specs_of_groups(scenario, build.specs[k], k, fresh, fresh=True)
                if late:
                    got = collect(late, servers, executor=LocalExecutor(options.workers))
                    collected += got
                    versions.update({c.rollout_id: generation_version for c in got})
                logs_by_step.append([c.ground_truth for c in collected])
                results = step_results(scenario, k, collected, generation_version=versions)
            with clock.stage("write"):
                # the agents' ground truth (the oracle's input) and what the trainer received (results/)
                files[f"rollouts/step-{k:04d}.jsonl"] = _jsonl(
                    [{"rollout_id": c.rollout_id, "status": c.status, "ground_truth": c.ground_truth}
                     for c in collected])
                files[f"results/step-{k:04d}.jsonl"] = _jsonl(results)
            trained = _backend_step(backend, state, results, cfg, k, clock)
            if isinstance(trained, ObservedError):
                error = trained
                break
            step, npz, meta_json = trained
            refused = None
            if scenario.mode == "policy":
                with clock.stage("weights"):
                    refused = _push_weights(servers.model, state, step=k)
                generation_version = state.version
            steps.append(step)
            rows.append(sum(1 for r in step.rows if not r.is_padding))
            files[f"artifacts/step-{k:04d}.npz"] = npz
            files[f"artifacts/step-{k:04d}.json"] = meta_json
            if on_event is not None:
                on_event(ScenarioEvent(scenario.name, k + 1, scenario.steps))
            if refused is not None:
                error = refused
                break
    metrics_lines = [{"step": st.step, **{k2: _num(v) for k2, v in st.metrics.items()}} for st in steps]
    files["metrics.jsonl"] = _jsonl(metrics_lines)
    return ObservedRun(steps=tuple(steps), error=error), logs_by_step, rows


def _backend_step(
    backend: Any, state: Any, results: Sequence[Mapping[str, Any]], cfg: Any, k: int, clock: _Clock
) -> tuple[ObservedStep, bytes, bytes] | ObservedError:
    """Plan, materialize and train one step through the backend, the harness measuring the state around
    `train_step`; any refusal, crash or malformed result is returned as the observed error."""
    from compactsim.harness.core.batch import TraceBatch
    from compactsim.harness.core.trace_plan import TracePlan
    from compactsim.harness.pipeline.backend import protocol_return

    stage = "plan"
    try:
        with clock.stage("plan"):
            plans = [protocol_return("plan", backend.plan(r), TracePlan) for r in results]
        stage = "materialize"
        with clock.stage("materialize"):
            batch = protocol_return("materialize", backend.materialize(plans, cfg), TraceBatch)
        stage = "train"
        with clock.stage("train"):
            before = snapshot_training_state(state.policy, state.optimizer, state.scheduler)
            version_before = state.version
            result = backend.train_step(state, batch, cfg)
            measured = MeasuredStep(before, snapshot_training_state(state.policy, state.optimizer, state.scheduler))
        stage = "result"
        _check_versions(version_before, state.version, result)
        with clock.stage("write"):
            return _observe_result(result, k, measured)
    except BaseException as exc:  # noqa: BLE001 - any backend failure (sys.exit, its own BaseException) is the outcome
        from compactsim.harness.outputs import stops_the_run

        if stops_the_run(exc):
            raise  # the user's Ctrl-C or SIGTERM: not the backend's verdict
        return _observed_error(exc, k, stage)  # a GeneratorExit too: this frame is no generator, nothing closed it


def _num(v: Any) -> Any:
    import math

    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _wandb(settings: WandbSettings, options: RunOptions, run: ScenarioRun) -> None:
    """Log one finished scenario as an offline W&B run (never online from here; `wandb sync` uploads it).

    Per-step metrics under NeMo-RL's namespaces (`compactsim.harness.report.wandb_log`); the run summary holds the
    verdict and the finding counts; a failed scenario's run is marked failed (exit code 1).
    """
    import wandb

    from compactsim.harness.report.wandb_log import wandb_run_name, wandb_steps, wandb_summary, wandb_tags

    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["WANDB_MODE"] = "offline"
    directory = Path(settings.directory or options.wandb_dir or ".")
    directory.mkdir(parents=True, exist_ok=True)
    record = run.record
    config: dict[str, Any] = {"options": options.to_json(), "mode": record.mode}
    if run.scenario is not None:
        config["scenario"] = run.scenario.to_data()
        config["trainer"] = run.scenario.trainer_config().model_dump(mode="json")
    wandb_run = wandb.init(project=settings.project, entity=settings.entity, group=settings.group,
                           tags=wandb_tags(settings, record), name=wandb_run_name(record), job_type="scenario",
                           mode="offline", dir=str(directory), config=config, reinit="create_new")
    try:
        for k, metrics in enumerate(wandb_steps(record)):
            wandb_run.log(metrics, step=k)
        wandb_run.summary.update(wandb_summary(record))
    finally:
        wandb_run.finish(exit_code=0 if record.passed else 1)


def _trace_views(steps: Sequence[ObservedStep], findings: Sequence[Finding]) -> tuple[RolloutView, ...]:
    flagged = sorted({f.step for f in findings if f.step is not None})
    chosen = [st for st in steps if st.step < TRACE_STEPS or st.step in flagged][:MAX_TRACE_STEPS]
    return tuple(v for st in chosen for v in rollout_views(st, findings))


def _media_urls(logs_by_step: Sequence[Sequence[Mapping[str, Any]]], traces: Sequence[RolloutView]) -> dict[str, str]:
    wanted = {m for v in traces for r in v.rows for m in r.media_ids}
    out: dict[str, str] = {}
    for logs in logs_by_step:
        for log in logs:
            for mid, info in (log.get("media") or {}).items():
                if mid in wanted and mid not in out and isinstance(info, Mapping) and info.get("data_url"):
                    out[mid] = str(info["data_url"])
    return out


def _harness_failure(scenario: Any, options: RunOptions, exc: BaseException, clock: _Clock,
                     data: _RunData) -> ScenarioRun:
    """A record for a scenario the harness could not run (no verdict reached: counts as failed)."""
    name = getattr(scenario, "name", str(scenario))
    seed = options.seed if options.seed is not None else getattr(scenario, "seed", 0)
    repro = reproduce_command(scenario_source(scenario) or name, seed, backend=_backend_flag(options.backend),
                              steps=options.max_steps, precision=options.precision)
    text = f"{type(exc).__name__}: {exception_text(exc)}"
    finding = Finding(scenario=name, step=None, check="run.harness_error", row=None, position=None,
                      expected="a completed run", actual=text[:300], message=text[:500], reproduce=repro)
    expect = getattr(scenario, "expect", None)
    expected = "?" if expect is None else ("success" if expect.verdict == "success" else f"error:{expect.code}")
    record = ScenarioRecord(
        name=name, purpose=getattr(scenario, "purpose", ""), tags=tuple(getattr(scenario, "tags", ())),
        flavour=getattr(scenario, "flavour", "?"), seed=seed, expected=expected, observed="harness_error", passed=False,
        steps=0, rows=0, tokens=0, findings=(finding,), reproduce=repro, artifacts=f"scenarios/{name}",
        seconds=clock.total(), stage_seconds=dict(clock.seconds),
    )
    from compactsim.scenarios.build import EditNotApplicable

    return data.scenario_run(record, None, invalid_scenario=exc.detail if isinstance(exc, EditNotApplicable) else None)


# ---------------------------------------------------------------------------------------------
# a suite


def _run_remote(scenario_data: Mapping[str, Any], options: RunOptions, sys_path: Sequence[str],
                source: str | None = None) -> ScenarioRun:
    """A Ray task: one scenario in a worker process (same code, same results); `source`: its `scenario_source`."""
    for p in reversed(list(sys_path)):
        if p not in sys.path:
            sys.path.insert(0, p)
    from compactsim.scenarios.model import Scenario

    return run_scenario(_with_source(Scenario.model_validate(dict(scenario_data)), source), options)


def ray_cluster(address: str | None, num_cpus: int,
                connect_timeout_s: float = RAY_CONNECT_TIMEOUT_S):  # -> ContextManager[None]
    """A local Ray that never leaves loopback, or the cluster at `address` (``HOST:PORT`` of its GCS).

    An unreachable `address` is a `ConfigError` within `connect_timeout_s` (`compactsim.agents.collect.ray_local`).
    """
    return local_ray(num_cpus, address=address, connect_timeout_s=connect_timeout_s)


def _with_mode(run: ScenarioRun) -> ScenarioRun:
    """The run with its record's server mode filled in (the report decides which metrics mean something)."""
    if run.scenario is None or run.record.mode is not None:
        return run
    return replace(run, record=replace(run.record, mode=run.scenario.mode))


def run_suite(
    scenarios: Sequence[Any],
    options: RunOptions = RunOptions(),
    *,
    executor: Executor = "local",
    ray_address: str | None = None,
    parallel: int | None = None,
    on_event: Callable[[ScenarioEvent], None] | None = None,
    wandb: WandbSettings | None = None,
    ray_connect_timeout_s: float = RAY_CONNECT_TIMEOUT_S,
) -> list[ScenarioRun]:
    """Every scenario's run, in the given order, on the chosen executor.

    `ray_address` implies the Ray executor. `parallel`: worker processes of the local executor
    (default 1: in this process) or CPUs of the local Ray (default 2). `wandb` (or
    `options.wandb`, with default settings) logs each finished scenario as an offline W&B run.
    """
    if ray_address:
        executor = "ray"
    if executor not in ("local", "ray"):
        raise ConfigError("invalid_argument", f"executor={executor!r}: expected 'local' or 'ray'")
    settings = wandb if wandb is not None else (WandbSettings(directory=options.wandb_dir) if options.wandb else None)

    def finished(run: ScenarioRun) -> ScenarioRun:
        run = _with_mode(run)
        if settings is not None:
            _wandb(settings, options, run)
        return run

    if executor == "local":
        workers = parallel or 1
        if workers <= 1 or len(scenarios) <= 1:
            return [finished(run_scenario(s, options, on_event=on_event)) for s in scenarios]
        return _run_local_processes(scenarios, options, workers, finished, on_event)
    import ray

    with ray_cluster(ray_address, parallel or 2, ray_connect_timeout_s):
        task = ray.remote(num_cpus=1)(_run_remote)
        path = [os.getcwd(), *sys.path]
        pending = {task.remote(s.to_data(), options, path, scenario_source(s)): k for k, s in enumerate(scenarios)}
        out: list[ScenarioRun | None] = [None] * len(scenarios)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                k = pending.pop(ref)
                run = out[k] = finished(ray.get(ref))
                if on_event is not None:
                    on_event(_done_event(run))
    return [r for r in out if r is not None]


def _run_local_processes(scenarios: Sequence[Any], options: RunOptions, workers: int,
                         finished: Callable[[ScenarioRun], ScenarioRun],
                         on_event: Callable[[ScenarioEvent], None] | None) -> list[ScenarioRun]:
    """The local executor on `workers` spawned processes (`local_pool`); same runs, in the given order."""
    path = [os.getcwd(), *sys.path]

    def done(_k: int, run: ScenarioRun) -> None:
        if on_event is not None:
            on_event(_done_event(run))

    runs = run_in_processes(_run_remote, [(s.to_data(), options, path, scenario_source(s)) for s in scenarios],
                            workers=workers, costs=[cost_hint(s) for s in scenarios], on_done=done)
    return [finished(run) for run in runs]


def _done_event(run: ScenarioRun) -> ScenarioEvent:
    """The one event a scenario run elsewhere (a worker process, a Ray task) reports: it finished."""
    return ScenarioEvent(run.record.name, run.record.steps, run.record.steps, done=True, record=run.record)


def suite_record(runs: Sequence[ScenarioRun], options: RunOptions, selection: Sequence[str],
                 gym: Mapping[str, Any] | None = None) -> SuiteRecord:
    """The suite's record: settings, versions, the Gym record and every scenario's record."""
    from compactsim.harness.report.summary import collect_versions

    return SuiteRecord(
        seed=options.seed,
        backend=options.backend,
        device=options.device,
        selection=tuple(selection),
        versions=collect_versions(),
        gym=dict(gym) if gym is not None else gym_record(runs),
        scenarios=tuple(r.record for r in runs),
    )


def gym_record(runs: Sequence[ScenarioRun], gym_check: Path | None = None) -> dict[str, Any]:
    """`summary.json` → `gym`: the evidence producer, the contract flavour(s) and the checked revision (if any)."""
    from compactsim.harness.gym_check.summary import gym_summary_record

    flavours = sorted({r.record.flavour for r in runs})
    record = gym_summary_record(gym_check, flavour=flavours[0] if len(flavours) == 1 else None)
    record["flavours"] = flavours
    return record


def write_outputs(out: Path, runs: Sequence[ScenarioRun], suite: SuiteRecord, *, total_seconds: float | None = None,
                  executor: str = "local") -> dict[str, Path]:
    """Write every scenario's files, `timings.json`, `report.html` and `summary.json` (last) under `out`.

    Through a temporary sibling folder, replacing the previous run's entries (`compactsim.harness.outputs`).
    """
    from compactsim.harness.outputs import write_outputs as write_output_files

    return write_output_files(out, runs, suite, total_seconds=total_seconds, executor=executor)


def load_saved_run(directory: Path) -> tuple[Any, RunOptions, dict[str, Any] | None]:
    """(scenario, options, saved audit) of a scenario directory a run wrote (`compactsim replay DIR`).

    The directory is input a person hands over (and may have edited), so each file is read under the
    input limits of `compactsim.harness.core.json_input` and checked field by field: a bad file is an
    `InputError` naming the file and field (exit 2), never a traceback, and never a run whose broken
    setting (a string seed, a backend that does not load) comes back as a finding (exit 1).
    """
    from pydantic import ValidationError

    from compactsim.harness.core.json_input import InputError, load_json
    from compactsim.scenarios.model import Scenario

    run_file, scenario_file = directory / "run.json", directory / "scenario.json"
    if not run_file.is_file() or not scenario_file.is_file():
        raise ConfigError("invalid_argument", f"{directory}: not a scenario run directory (needs run.json and scenario.json)")
    settings = load_json(run_file, what="run settings file")
    options = _saved_options(settings, str(run_file))
    try:
        scenario = Scenario.model_validate(load_json(scenario_file, what="scenario file"))
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise InputError(str(scenario_file), None, ".".join(map(str, first["loc"])) or None,
                         f"not a valid scenario: {first['msg']}{more}") from None
    audit_file = directory / "audit.json"
    saved = load_json(audit_file, what="saved audit") if audit_file.is_file() else None
    if saved is not None and not (isinstance(saved, dict) and isinstance(saved.get("findings", []), list)):
        raise InputError(str(audit_file), None, "findings", "expected an object whose findings is a list")
    return _with_source(scenario, settings.get("source")), options, saved


def _saved_options(settings: Any, source: str) -> RunOptions:
    """The `RunOptions` of a saved ``run.json``, each field checked as `compactsim run` checks its option."""
    from compactsim.harness.core.json_input import InputError
    from compactsim.harness.core.seeds import check_seed
    from compactsim.harness.pipeline.backend import load_backend

    if not isinstance(settings, dict):
        raise InputError(source, None, None, f"expected a JSON object of run settings, got {type(settings).__name__}")
    known = {"scenario", "source", "precision", *RunOptions().to_json()}
    for key in settings:
        if key not in known:
            raise InputError(source, None, key, f"unknown run setting; expected {', '.join(sorted(known))}")
    seed, backend = settings.get("seed"), settings.get("backend", DEFAULT_BACKEND)
    device, max_steps = settings.get("device", "cpu"), settings.get("max_steps")
    if not isinstance(settings.get("scenario", ""), str):
        raise InputError(source, None, "scenario", f"{settings['scenario']!r}: expected a scenario name")
    saved_source = settings.get("source")
    if saved_source is not None and (not isinstance(saved_source, str) or not saved_source):
        raise InputError(source, None, "source", f"{saved_source!r}: expected the scenario file's path as the run named it")
    try:
        if seed is not None:
            check_seed(seed)
    except ConfigError as exc:
        raise InputError(source, None, "seed", exc.detail) from None
    if not isinstance(backend, str):
        raise InputError(source, None, "backend", f"{backend!r}: expected 'module:attr'")
    try:
        load_backend(backend)  # whatever a backend raises while loading comes back as a ConfigError
    except ConfigError as exc:  # names no loadable backend: a setup error, not the backend's finding
        raise InputError(source, None, "backend", exc.detail) from None
    if device not in ("cpu", "cuda", "auto"):
        raise InputError(source, None, "device", f"{device!r}: expected 'cpu', 'cuda' or 'auto'")
    if device == "cuda":
        from compactsim.harness.train_run import resolve_device

        try:
            resolve_device(device)  # a run saved on a GPU machine cannot replay here: setup, not a finding
        except ConfigError as exc:
            raise InputError(source, None, "device", exc.detail) from None
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise InputError(source, None, "max_steps", f"{max_steps!r}: expected null or an integer >= 1")
    precision = settings.get("precision")
    if precision is not None and precision not in PRECISIONS:
        raise InputError(source, None, "precision", f"{precision!r}: expected null or one of {', '.join(PRECISIONS)}")
    return RunOptions(seed=seed, backend=backend, device=device, max_steps=max_steps, precision=precision)


__all__ = [
    "DEFAULT_BACKEND",
    "RunOptions",
    "STAGES",
    "ScenarioEvent",
    "ScenarioRun",
    "gym_record",
    "load_saved_run",
    "open_servers",
    "prepare_scenario",
    "resolve_scenarios",
    "run_scenario",
    "run_suite",
    "scenario_reproduce",
    "scenario_source",
    "suite_record",
    "write_outputs",
]
