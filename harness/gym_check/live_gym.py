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

import re
import shutil
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.http_deadline import deadline_client
from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.gym_stack import GymApps, ThreadServer, gym_config, serve_process, workdir
from compactsim.harness.gym_check.gym_truth import gym_ground_truth
from compactsim.harness.gym_check.live import compare_payloads
from compactsim.harness.gym_check.schema_diff import Drift
from compactsim.harness.gym_check.wire import MockResources, WireRecorder, wire_summary

LIVE_TAG = "live"
#: Seconds one `/run` may take (a scripted rollout takes well under a second; retries add Gym's backoff).
RUN_TIMEOUT_S = 120.0


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

    params = {**task_params(spec), "input": spec.script.agent_input(spec.seed)}
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


def run_gym_live(python: Path, names: Sequence[str], out_dir: Path | None) -> tuple[dict[str, Any], list[Drift]]:
    """Every live scenario through the revision's own servers; (report section, findings)."""
    import json  # noqa: PLC0415

    from compactsim.harness.runner import RunOptions, run_scenario  # noqa: PLC0415
    from compactsim.scenarios.build import build_scenario  # noqa: PLC0415

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
    try:
        with ThreadServer(recorder.app(), name="wire-recorder") as rec_srv, \
                ThreadServer(resources.app(), name="mock-resources") as res_srv:
            for scenario in scenarios:
                t0 = time.perf_counter()
                build = build_scenario(scenario)
                history, max_steps = _scenario_apps_config(build)
                model_name = str(build.model_settings.get("model_name", "compactsim-tiny-moe"))
                # Gym's apps hold only their configuration (the agent's compaction config, its max_steps, the model
                # name): scenarios in a row that share it share one start (~3.6 s of two processes' imports)
                key = json.dumps([history, max_steps, model_name], sort_keys=True)
                serve, serve_port = serve_process(build.model_settings, scratch, seed=scenario.seed)
                try:
                    recorder.reset(f"http://127.0.0.1:{serve_port}")
                    resources.reset(tool_outputs([s for step in build.specs for s in step]), build.reward_settings)
                    if apps is None or key != apps_key:
                        if apps is not None:
                            apps.close()
                            apps = None
                        from compactsim.harness.gym_check.gym_stack import free_port  # noqa: PLC0415

                        config = gym_config(model_port=free_port(), agent_port=free_port(), resources_port=res_srv.port,
                                            upstream_url=rec_srv.url, context_history=history, max_steps=max_steps,
                                            model_name=model_name)
                        apps, apps_key = GymApps(python, scratch, config).__enter__(), key
                    with GymCollector(apps.agent_url, recorder) as collector:
                        run = run_scenario(scenario, RunOptions(), collector=collector)
                    logs = apps.log_tail(6) if collector.errors else ""
                except GymSetupError as exc:  # this scenario's servers did not come up: a finding, not exit 2
                    entries.append({"name": scenario.name, "error": str(exc)})
                    findings.append(Drift("planner_rejected", f"live:{scenario.name}", "blocking",
                                          f"the revision's servers did not run this scenario: {exc.detail}"))
                    continue
                finally:
                    serve.stop()
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
        if apps is not None:
            apps.close()
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


def check_gym_runtime(python: Path) -> None:
    """Raise `GymSetupError("import")` unless the revision's agent and model-server apps import here."""
    import subprocess  # noqa: PLC0415

    from compactsim.harness.gym_check.gym_stack import AGENT_MODULE, MODEL_MODULE  # noqa: PLC0415

    code = f"import {AGENT_MODULE}, {MODEL_MODULE}"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": "/usr/bin:/bin", "WANDB_MODE": "disabled"})
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise GymSetupError("import", f"the revision's apps do not import: {tail[0]}")


__all__ = [
    "LIVE_TAG",
    "RUN_TIMEOUT_S",
    "GymCollector",
    "check_gym_runtime",
    "compare_with_ours",
    "diff_category",
    "live_scenarios",
    "run_body",
    "run_gym_live",
    "tool_outputs",
]
