"""`gym-check --live`: the revision's own agent and model server run the catalogue's `live` scenarios.

Per scenario: a fresh `compactsim serve` (scripted, the scenario's script and faults), the
revision's `VLLMModelWithCompaction` and `SimpleAgentWithCompaction` (the scenario's
`context_history` and `max_steps`), our wire recorder and mock resources server. Each rollout is
one `POST /run` to Gym's agent with only ``compactsim_rollout_id`` in the task metadata (the
server derives turn and attempt itself, DESIGN §6b). Gym's `/run` results then go through the
scenario runner unchanged (plan → materialize → train → oracle → audit) with the oracle's ground
truth rebuilt from the wire log (`gym_truth`). Finally compactsim's own agents run the same
scenario against a fresh in-process server and their payloads are compared field by field.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.http_deadline import deadline_client
from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.gym_stack import (
    AGENT_MODULE,
    MODEL_MODULE,
    GymApps,
    ManagedProcess,
    ThreadServer,
    free_port,
    gym_config,
    start_serve,
    wait_serve,
    workdir,
)
from compactsim.harness.gym_check.gym_truth import gym_ground_truth
from compactsim.harness.gym_check.live import compare_payloads
from compactsim.harness.gym_check.schema_diff import Drift
from compactsim.harness.gym_check.wire import MockResources, WireRecorder, wire_summary

LIVE_TAG = "live"
#: Seconds one `/run` may take (a scripted rollout takes well under a second; retries add Gym's backoff).
RUN_TIMEOUT_S = 120.0
#: Seconds the import check (`RuntimeCheck`) may take.
RUNTIME_CHECK_TIMEOUT_S = 300


def live_scenarios(names: Sequence[str] = ()) -> list[Any]:
    """Catalogue scenarios tagged ``live`` (or the named ones, which must carry the tag)."""
    from compactsim.scenarios.catalogue import default_catalogue  # noqa: PLC0415

    tagged = list(default_catalogue().with_tag(LIVE_TAG))
    if not names:
        return tagged
    by_name = {s.name: s for s in tagged}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ConfigError("invalid_argument", f"not a live scenario: {unknown}; live: {sorted(by_name)}")
    return [by_name[n] for n in names]


def tool_outputs(specs: Sequence[Any]) -> dict[str, list[str]]:
    """Per rollout, the scripted output of each tool call in call order (what the resources mock answers)."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        outs = out.setdefault(spec.rollout_id, [])
        for turn in spec.script.turns:
            for i in range(len(turn.tool_calls)):
                result = turn.result_for(i)
                if result.images:
                    raise ConfigError("invalid_config", f"{spec.rollout_id}: Gym's simple agent returns text tool "
                                      "outputs only; a live scenario's tool results cannot carry images")
                outs.append(result.output)
    return out


def run_body(spec: Any) -> dict[str, Any]:
    """Gym's `/run` request for `spec`: the task, sampling fields, our rollout key and the contract identity."""
    from compactsim.agents.rollout.script import task_params  # noqa: PLC0415

    params = {**task_params(spec), "input": spec.script.agent_input(spec.task_image_seed)}
    return {
        "responses_create_params": params,
        "context_compaction_rollout_id": spec.rollout_id,
        "context_compaction_group_id": spec.group_id,
        "context_compaction_task_id": spec.task_id,
        "context_compaction_rollout_index": spec.rollout_index,
        "context_compaction_attempt_index": spec.attempt_index,
    }


class GymCollector:
    """`compactsim.agents.collect.collect`'s call, answered by Gym's `/run` (sequential: each rollout's calls stay ordered).

    One HTTP client for the collector's life (every step's `/run` calls and weight-version reads);
    use it as a context manager, or `close()` it.
    """

    def __init__(self, agent_url: str, recorder: WireRecorder) -> None:
        self.agent_url = agent_url
        self.recorder = recorder
        self.results: dict[str, dict[str, Any] | None] = {}
        self.errors: dict[str, str] = {}
        self._client = deadline_client(RUN_TIMEOUT_S)

    def __enter__(self) -> GymCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def synced_version(self) -> int:
        """The policy version the generation server holds (what a trainer's weight-sync bookkeeping knows)."""
        upstream = self.recorder.upstream
        if upstream is None:
            raise GymSetupError("checker", "the wire recorder has no upstream model server")
        return int(self._client.get(f"{upstream}/weights", timeout=10.0).json()["policy_version"])

    def __call__(self, specs: Sequence[Any], servers: object = None, **_: Any) -> list[Any]:
        from compactsim.agents.collect import CollectedRollout  # noqa: PLC0415

        from compactsim.harness.pipeline.ingest import TRAINER_POLICY_VERSION  # noqa: PLC0415

        out = []
        version = self.synced_version()
        for index, spec in enumerate(specs):
            result: dict[str, Any] | None = None
            error = None
            try:
                answer = self._client.post(f"{self.agent_url}/run", json=run_body(spec))
                if answer.status_code == 200:
                    result = answer.json()
                    result[TRAINER_POLICY_VERSION] = version
                else:
                    error = f"/run answered {answer.status_code}: {answer.text[:400]}"
            except httpx.HTTPError as exc:
                error = f"/run failed: {type(exc).__name__}: {exc}"
            self.results[spec.rollout_id] = result
            if error is not None:
                self.errors[spec.rollout_id] = error
            truth = gym_ground_truth(spec, self.recorder.exchanges(), result, failure=error)
            status = "completed" if result is not None else "failed"
            out.append(CollectedRollout(index, spec.rollout_id, status, result, truth))
        return out


def _response(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return result.get("response") or {}  # type: ignore[return-value]


def compare_with_ours(scenario: Any, gym_results: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """Our agents on the same scenario (fresh in-process server), each response compared with Gym's, strictly.

    The revision mints its ``resp_``/``rs_``/``msg_`` ids with `uuid4`, the one random input of a
    Gym rollout; our agent replays them (`ReplayMint`), so every id and digest built on them must
    come out equal too. Strict: a key present on one side only is a difference even when null, and
    ``0`` is not ``0.0``.
    """
    from compactsim.agents.collect.rollouts import run_rollout  # noqa: PLC0415
    from compactsim.agents.rollout.gym_response import ReplayMint, derived_id  # noqa: PLC0415
    from compactsim.scenarios.build import step_specs  # noqa: PLC0415
    from compactsim.scenarios.execute import in_process_servers  # noqa: PLC0415

    rollouts = []
    for step in range(scenario.steps):
        with in_process_servers(scenario).open() as (model, reward):
            for index, spec in enumerate(step_specs(scenario, step)):
                real = gym_results.get(spec.rollout_id)
                mint = ReplayMint.from_result(_response(real)) if real is not None else derived_id
                c = run_rollout(spec, model_client=model, reward_client=reward, index=index, mint=mint)
                if real is None or c.result is None:
                    rollouts.append({"rollout_id": c.rollout_id, "summary": "not compared: a side failed", "diffs": []})
                    continue
                diffs = compare_payloads(_response(real), _response(c.result), limit=1000, strict=True)
                rollouts.append({"rollout_id": c.rollout_id,
                                 "summary": f"{len(diffs)} field(s) differ" if diffs else "identical",
                                 "diffs": [d.to_json() for d in diffs[:20]], "all_paths": [d.path for d in diffs]})
    categories: Counter[str] = Counter()
    for r in rollouts:
        categories.update(diff_category(path) for path in r.pop("all_paths", []))
    return {"rollouts": rollouts, "identical": all(r["summary"] == "identical" for r in rollouts),
            "ids": "replayed from the revision's result (uuid4 in Gym)",
            "categories": dict(sorted(categories.items()))}


def diff_category(path: str) -> str:
    """A diff path without indices, cut after two keys (``output[].content``), for the summary table."""
    parts = re.sub(r"\[\d+\]", "[]", path).split(".")
    return ".".join(parts[:2])


def _scenario_apps_config(build: Any) -> tuple[dict[str, Any], int | None]:
    specs = [s for step in build.specs for s in step]
    configs = {(s.context_history.model_dump_json(), s.max_steps) for s in specs}
    if len(configs) != 1:
        raise ConfigError("invalid_config", f"{build.scenario.name}: Gym's agent holds one context_history per server; "
                          "a live scenario's rollouts must share it (and max_steps)")
    # only what the preset sets: Gym rejects e.g. reasoning keep_* fields next to enabled=false
    return specs[0].context_history.model_dump(mode="json", exclude_unset=True), specs[0].max_steps


@dataclass
class _Stage:
    """One scenario's build and its `compactsim serve`, started; with its own Gym apps (started, not waited)
    when it was set up ahead and needs other apps than the scenario before."""

    build: Any
    #: what Gym's apps are configured with (`gym_config`): the agent's compaction config, its max_steps, the model name
    history: dict[str, Any]
    max_steps: int | None
    model_name: str
    serve: ManagedProcess
    serve_port: int
    apps: GymApps | None = None

    @property
    def key(self) -> str:
        """Gym's apps hold only their configuration: scenarios in a row with one key share one start (~3.6 s of two
        processes' imports)."""
        return json.dumps([self.history, self.max_steps, self.model_name], sort_keys=True)

    def close(self) -> None:
        self.serve.stop()
        if self.apps is not None:
            self.apps.close()


def _stage(scenario: Any, scratch: Path) -> _Stage:
    """Build `scenario` and start its `compactsim serve` (not waited for)."""
    from compactsim.scenarios.build import build_scenario  # noqa: PLC0415

    build = build_scenario(scenario)
    history, max_steps = _scenario_apps_config(build)
    model_name = str(build.model_settings.get("model_name", "compactsim-tiny-moe"))
    serve, serve_port = start_serve(build.model_settings, scratch, seed=scenario.seed)
    return _Stage(build, history, max_steps, model_name, serve, serve_port)


@dataclass(frozen=True)
class _Peers:
    """Where Gym's apps reach our side: the mock resources server's port, the wire recorder's URL."""

    resources_port: int
    upstream_url: str


def _start_apps(python: Path, scratch: Path, stage: _Stage, peers: _Peers) -> GymApps:
    """The revision's model server and agent configured for `stage`, spawned (`GymApps.wait` before use)."""
    config = gym_config(model_port=free_port(), agent_port=free_port(), resources_port=peers.resources_port,
                        upstream_url=peers.upstream_url, context_history=stage.history, max_steps=stage.max_steps,
                        model_name=stage.model_name)
    return GymApps(python, scratch, config).start()


def _start_ahead(python: Path, scratch: Path, scenario: Any, apps_key: str | None, peers: _Peers) -> _Stage | None:
    """The next scenario's stage, started while this one runs (its apps too when its key differs from `apps_key`).

    Best effort: on any error nothing is left running and None comes back, so the scenario's own turn
    sets it up again and raises that error where the sequential order did.
    """
    stage = None
    try:
        stage = _stage(scenario, scratch)
        if stage.key != apps_key:
            stage.apps = _start_apps(python, scratch, stage, peers)
    except Exception:  # noqa: BLE001 - raised again, in order, by the scenario's own set-up
        if stage is not None:
            stage.close()
        return None
    return stage


def run_gym_live(python: Path, names: Sequence[str], out_dir: Path | None) -> tuple[dict[str, Any], list[Drift]]:
    """Every live scenario through the revision's own servers; (report section, findings).

    While one scenario runs, the next one's `compactsim serve` and (when its configuration differs) Gym
    apps already start: their imports overlap this scenario's rollouts instead of following them.
    """
    from compactsim.harness.runner import RunOptions, run_scenario  # noqa: PLC0415

    scenarios = live_scenarios(names)
    if not scenarios:
        raise ConfigError("invalid_argument", "the catalogue has no scenario tagged 'live'")
    recorder, resources = WireRecorder(), MockResources()
    scratch = workdir()
    findings: list[Drift] = []
    entries: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    apps: GymApps | None = None
    apps_key: str | None = None
    stage: _Stage | None = None
    ahead: _Stage | None = None
    try:
        with ThreadServer(recorder.app(), name="wire-recorder") as rec_srv, \
                ThreadServer(resources.app(), name="mock-resources") as res_srv:
            peers = _Peers(res_srv.port, rec_srv.url)
            for index, scenario in enumerate(scenarios):
                t0 = time.perf_counter()
                stage, ahead = ahead or _stage(scenario, scratch), None  # started while the one before ran, or now
                build = stage.build
                wait_serve(stage.serve, stage.serve_port)
                try:
                    recorder.reset(f"http://127.0.0.1:{stage.serve_port}")
                    resources.reset(tool_outputs([s for step in build.specs for s in step]), build.reward_settings)
                    if apps is None or stage.key != apps_key:
                        if apps is not None:
                            apps.close()
                            apps = None
                        started = stage.apps or _start_apps(python, scratch, stage, peers)
                        stage.apps = None  # this scenario's apps from here on, not the stage's to close
                        apps, apps_key = started.wait(), stage.key
                    if index + 1 < len(scenarios):
                        ahead = _start_ahead(python, scratch, scenarios[index + 1], apps_key, peers)
                    with GymCollector(apps.agent_url, recorder) as collector:
                        run = run_scenario(scenario, RunOptions(), collector=collector)
                    logs = apps.log_tail(6) if collector.errors else ""
                except GymSetupError as exc:  # this scenario's servers did not come up: a finding, not exit 2
                    entries.append({"name": scenario.name, "error": str(exc)})
                    findings.append(Drift("planner_rejected", f"live:{scenario.name}", "blocking",
                                          f"the revision's servers did not run this scenario: {exc.detail}"))
                    continue
                finally:
                    stage.close()
                seen = recorder.exchanges()
                exchanges += seen
                record = run.record
                entry: dict[str, Any] = {
                    "name": scenario.name,
                    "rollouts": len(collector.results),
                    "completed": sum(1 for r in collector.results.values() if r is not None),
                    "calls": sum(1 for ex in seen if ex["path"].endswith("/chat/completions") and ex["status"] == 200),
                    "retried": sum(1 for ex in seen if ex["status"] != 200),
                    "audit": "passed" if record.passed else "failed",
                    "findings": [f.to_json() if hasattr(f, "to_json") else str(f) for f in record.findings][:10],
                    "errors": dict(collector.errors),
                    "final_answers": {rid: _final_text(r) for rid, r in sorted(collector.results.items())},
                }
                if record.error is not None:
                    entry["backend_error"] = str(record.error)
                if logs:
                    entry["server_logs"] = logs
                if not record.passed:
                    findings.append(Drift("planner_rejected", f"live:{scenario.name}", "blocking",
                                          f"the audit fails on the revision's own rollouts: {entry['findings'][:2] or entry['errors']}"))
                unscripted = resources.unscripted()
                if unscripted:
                    entry["unscripted_tool_calls"] = unscripted[:10]
                    findings.append(Drift("planner_rejected", f"live:{scenario.name}", "blocking",
                                          f"{len(unscripted)} tool call(s) reached the resources server without a "
                                          f"scripted output (first: {unscripted[0]}); the rollouts are not the script's"))
                if collector.errors:
                    findings.append(Drift("planner_rejected", f"live:{scenario.name}", "blocking",
                                          f"the revision's agent failed: {next(iter(collector.errors.values()))}"))
                ours = compare_with_ours(scenario, collector.results)
                entry["emitter"] = ours
                if not ours["identical"]:
                    first = next(r for r in ours["rollouts"] if r["summary"] != "identical")
                    where = first["diffs"][0]["path"] if first["diffs"] else first["summary"]
                    findings.append(Drift("digest_rule", f"live:{scenario.name}", "blocking",
                                          f"compactsim's agents emit something else than the revision for "
                                          f"{first['rollout_id']}: {first['summary']}, first {where}"))
                entry["seconds"] = round(time.perf_counter() - t0, 2)
                entries.append(entry)
                if out_dir is not None:
                    live_dir = out_dir / "live-gym"
                    live_dir.mkdir(parents=True, exist_ok=True)
                    (live_dir / f"{scenario.name}.json").write_text(json.dumps(
                        {"results": collector.results, "wire": seen}, indent=1) + "\n", encoding="utf-8")
    finally:
        for left in (stage, ahead, apps):
            if left is not None:
                left.close()
        shutil.rmtree(scratch, ignore_errors=True)
    section = {
        "mode": "gym-http",
        "agent": "responses_api_agents.simple_agent_with_compaction (SimpleAgentWithCompaction)",
        "model_server": "responses_api_models.vllm_model_with_compaction (VLLMModelWithCompaction)",
        "mocked": "resources server only (/seed_session, tool calls, /verify); model answers from `compactsim serve`",
        "scenarios": entries,
        "wire": wire_summary(exchanges),
    }
    for missing in [f for ep in section["wire"]["endpoints"] for f in ep.get("missing_required", [])]:
        findings.append(Drift("planner_rejected", f"wire:{missing}", "blocking",
                              f"the revision needs {missing} but compactsim serve omits it"))
    return section, findings


def _final_text(result: Mapping[str, Any] | None) -> str | None:
    if result is None:
        return None
    for item in reversed(_response(result).get("output") or []):
        if item.get("type") == "message" and item.get("role") == "assistant":
            texts = [c.get("text") for c in item.get("content") or [] if c.get("type") == "output_text"]
            return "".join(t for t in texts if t) or None
    return None


class RuntimeCheck:
    """Whether the revision's agent and model-server apps import here, in a subprocess started early: they import
    (~5 s of CPU) while the static checks run, and `result` gives the verdict later; `close` ends a check left unread (a setup error came
    first)."""

    def __init__(self, python: Path) -> None:
        self._started = time.monotonic()
        self._proc = subprocess.Popen([str(python), "-c", f"import {AGENT_MODULE}, {MODEL_MODULE}"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={"PATH": "/usr/bin:/bin", "WANDB_MODE": "disabled"})

    def close(self) -> None:
        """Kill it unless it has finished; close its pipes and reap it (as `subprocess.run` does on a timeout)."""
        if self._proc.poll() is None:
            self._proc.kill()
        with self._proc:  # Popen's exit closes the pipes and waits
            pass

    def result(self) -> None:
        """Raise `GymSetupError("import")` unless the apps imported; a hung import raises `TimeoutExpired` 300 s from the start."""
        remaining = max(RUNTIME_CHECK_TIMEOUT_S - (time.monotonic() - self._started), 0.0)
        try:
            _stdout, stderr = self._proc.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            self.close()
            raise subprocess.TimeoutExpired(self._proc.args, RUNTIME_CHECK_TIMEOUT_S) from None
        if self._proc.returncode != 0:
            tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
            raise GymSetupError("import", f"the revision's apps do not import: {tail[0]}")


__all__ = [
    "LIVE_TAG",
    "RUNTIME_CHECK_TIMEOUT_S",
    "RUN_TIMEOUT_S",
    "GymCollector",
    "RuntimeCheck",
    "compare_with_ours",
    "diff_category",
    "live_scenarios",
    "run_body",
    "run_gym_live",
    "tool_outputs",
]
