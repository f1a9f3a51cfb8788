"""Run a gym-check end to end: set the revision up, probe it, diff it, let the planner judge, report."""

from __future__ import annotations

import copy
import json
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compactsim import examples_dir
from compactsim.harness.core.contract import TOKEN_FIELDS, GymResponse, TokenFields
from compactsim.harness.core.errors import CompactsimError
from compactsim.harness.core.json_input import InputError, parse_json, parse_json_lines, read_text
from compactsim.harness.gym_check import baseline as baselines
from compactsim.harness.gym_check.digest_check import PRIMITIVE_PROBES, DigestCheck, payload_checks, primitive_checks
from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.live import DEFAULT_EMITTER_HOOK, LiveScript, compare_payloads, load_hook, scenarios
from compactsim.harness.gym_check.probe import CheckerProcess
from compactsim.harness.gym_check.report import GymCheckReport, model_rows
from compactsim.harness.gym_check.revision import Revision, fetch_revision, parse_spec
from compactsim.harness.gym_check.rows_check import check_live_rows
from compactsim.harness.gym_check.schema_diff import SEVERITY_ORDER, Drift, apply_transform, diff_schemas, token_item_members
from compactsim.harness.gym_check.venv import default_cache_dir, dir_bytes, ensure_venv, repo_root

if TYPE_CHECKING:
    from compactsim.harness.gym_check.live_gym import RuntimeCheck

EXIT_OK, EXIT_SETUP, EXIT_DRIFT = 0, 2, 3
PLANNER_NAME = "compactsim.harness.pipeline.planner.plan_rollout"


@dataclass(frozen=True, slots=True)
class GymCheckOptions:
    """What `compactsim gym-check` was asked to do."""

    spec: str
    live: bool = False
    cache_dir: Path | None = None
    offline: bool = False
    payload_paths: tuple[Path, ...] = ()
    live_scenarios: tuple[str, ...] = ()
    emitter: str | None = None
    baseline: Path | None = baselines.DEFAULT_BASELINE
    #: With `live`: also run the revision's own agent and model server over HTTP (`live_gym`).
    agent: bool = True
    #: Catalogue scenarios (tagged ``live``) for the agent run; empty: all of them.
    agent_scenarios: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NamedPayload:
    name: str
    payload: dict[str, Any]

    @property
    def response(self) -> dict[str, Any]:
        return _response(self.payload)


# ---------------------------------------------------------------------------------------------
# payloads


def _response(payload: Mapping[str, Any]) -> dict[str, Any]:
    return payload["response"] if "response" in payload and "output" not in payload else payload  # type: ignore[return-value]


def payload_flavour(response: Mapping[str, Any]) -> str:
    """The producer shape of one response (DESIGN §5 names)."""
    if isinstance(response.get("rollout_trace_contract"), Mapping):
        return "gym-pr2870"
    contract = response.get("context_compaction_contract")
    if not isinstance(contract, Mapping):
        return "none"
    if "identity_source" in contract or "trajectory_contract_id" in contract:
        return "osworld"
    return {2: "gym-0.7.0-full", 3: "gym-0.7.0-transport"}.get(contract.get("schema_version"), "unknown")  # type: ignore[arg-type]


def payload_role(response: Mapping[str, Any]) -> str:
    return "full" if "completion_evidence" in response else "transport"


def envelope_flavour(env: Mapping[str, Any]) -> str:
    key, sv = env.get("contract_key"), env.get("schema_version")
    if key == "context_compaction_contract" and sv in (2, 3):
        return "gym-0.7.0-full" if sv == 2 else "gym-0.7.0-transport"
    if key == "rollout_trace_contract" and sv is None:
        return "gym-pr2870" if env.get("role") == "transport" else "gym-pr2870-full"
    return f"unknown({key}, schema_version={sv})"


def default_payload_sources() -> list[Path]:
    """Our bundled examples (`compactsim.examples_dir`: installed or the checkout's); else the shared ones beside the checkout."""
    for candidate in (examples_dir(), repo_root().parent / "shared" / "examples"):
        if candidate.is_dir() and any(candidate.glob("*.json")):
            return [candidate]
    return []


def _is_result(value: Mapping[str, Any]) -> bool:
    """A `/run` result (a `response` object) or a bare response (`output`); any other object is another file's."""
    return isinstance(value.get("response"), dict) or "output" in value


def load_payloads(paths: Sequence[Path]) -> list[NamedPayload]:
    """Results from files (`.json` one or a list, `.jsonl` one per line) or directories of them.

    This is the interface for the scenario runner: point `--payloads` at the directory where the
    agents wrote the catalogue's evidence. Every value must be a result object (a list entry or a
    line that is not one is an `InputError` naming it: an object with neither a `response` object nor
    an `output` is some other file's; inside a directory a file holding only such objects is skipped,
    as a rollout's ground truth or summary beside its results), and every path must hold at least
    one: a check that validated nothing must not read "compatible".
    """
    out: list[NamedPayload] = []
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl")) if path.is_dir() else [path]
        found = 0
        for file in files:
            text = read_text(file, what="payload file")  # limits, regular files only: a typed error names the file
            if file.suffix == ".jsonl":
                values = [(f"{file.name}:{i}", i, "$", v) for i, v in parse_json_lines(text, str(file))]
            else:
                value = parse_json(text, str(file))
                values = ([(f"{file.name}[{i}]", None, f"$[{i}]", v) for i, v in enumerate(value)]
                          if isinstance(value, list) else [(file.name, None, "$", value)])
            for name, line, field, v in values:
                if not isinstance(v, dict):
                    raise InputError(str(file), line, field, f"expected a Gym result (a JSON object), "
                                                                    f"found {type(v).__name__}")
            results = [(name, v) for name, _, _, v in values if _is_result(v)]
            if path.is_dir() and not results:
                continue  # another kind of file beside the results (a rollout's ground truth, a summary)
            for name, line, field, v in values:
                if not _is_result(v):
                    keys = ", ".join(sorted(map(str, v))[:6]) or "none"
                    raise InputError(str(file), line, field, f"expected a Gym result (a /run result with a "
                                                             f"`response` object, or a bare response with `output`); "
                                                             f"this object has neither (keys: {keys})")
            out += [NamedPayload(name, v) for name, v in results]
            found += len(results)
        if not found:
            what = "no .json or .jsonl file" if not files else "no Gym result"
            raise InputError(str(path), None, None, f"{what} to check: gym-check --payloads needs at least one result")
    return out


# ---------------------------------------------------------------------------------------------
# the planner's verdict


def _planner() -> Callable[[Mapping[str, Any]], Any]:
    from compactsim.harness.pipeline.planner import plan_rollout  # noqa: PLC0415 - floor 2, loaded when a check runs

    return lambda result: plan_rollout(result, strict=True)


def planner_verdict(result: Mapping[str, Any]) -> tuple[bool, str, Any]:
    """(accepted, short text, plan or None); the planner may only ever raise `ContractError`."""
    try:
        plan = _planner()(result)
    except CompactsimError as exc:
        return False, f"rejected: {exc}", None
    except Exception as exc:  # noqa: BLE001 - a crash is a finding, never a traceback
        return False, f"crashed: {type(exc).__name__}: {exc}", None
    traces = " | ".join(",".join(map(str, t.turn_ids)) for t in plan.traces)
    return True, f"accepted: {plan.path}, traces [{traces}]", plan


# ---------------------------------------------------------------------------------------------
# drift


def _our_schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    return GymResponse.model_json_schema(), TokenFields.model_json_schema()


def envelope_drift(env_name: str, env: Mapping[str, Any], document: Mapping[str, Any] | None) -> list[Drift]:
    """Schema drift of one revision envelope (and its token-bearing output items) against our contract."""
    ours_env, ours_tokens = _our_schemas()
    schema = env["schema"]
    found = diff_schemas(schema, ours_env, evidence_fields=env["evidence_fields"], envelope=env_name)
    known = baselines.known_findings(document, env["role"], ours_env)
    base = baselines.envelope_schema(document, env["role"]) if document is not None else None
    for title, member in token_item_members(schema, TOKEN_FIELDS):
        root = ("output[]", f"<{title}>")
        found += diff_schemas({**member, "$defs": schema.get("$defs", {})}, ours_tokens, root=root, envelope=env_name)
        if base is not None:
            for b_title, b_member in token_item_members(base[1], TOKEN_FIELDS):
                if b_title == title:
                    known |= {baselines._key(d) for d in diff_schemas({**b_member, "$defs": base[1]["$defs"]}, ours_tokens, root=root)}
    out = []
    for d in found:
        if d.severity != "info" and baselines.is_known(d, known):
            d = replace(d, severity="info", detail=d.detail + " (unchanged since the baseline: the planner's own check)")
        out.append(d)
    return out


def _structural(drifts: Sequence[Drift]) -> list[Drift]:
    return [d for d in drifts if d.transform is not None and d.transform["op"] in ("rename", "remove", "add")]


def _reshape(response: Mapping[str, Any], transforms: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], int]:
    shaped = copy.deepcopy(dict(response))
    return shaped, sum(apply_transform(shaped, t) for t in transforms)


def _escalate(d: Drift, accepted: bool, verdict: str) -> Drift:
    if accepted:
        severity = "warning" if d.severity == "blocking" and d.kind in ("literal_changed", "constraint_changed") else d.severity
        return replace(d, severity=severity, planner_verdict=verdict)  # type: ignore[arg-type]
    return replace(d, severity="blocking", planner_verdict=verdict)


def probe_drift(
    checker: CheckerProcess,
    envelopes: Mapping[str, Mapping[str, Any]],
    drift: dict[str, list[Drift]],
    payloads: Sequence[NamedPayload],
    validation: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, list[Drift]], list[Drift]]:
    """Show the planner payloads shaped like the revision's; its verdict decides what blocks."""
    extra: list[Drift] = []
    out: dict[str, list[Drift]] = {}
    for env_name, env in sorted(envelopes.items()):
        items = drift[env_name]
        flavour = envelope_flavour(env)
        same_role = [p for p in payloads if payload_role(p.response) == env["role"] and payload_flavour(p.response) != "none"]
        direct = [(p, validation[p.name][env_name]["dump"]) for p in same_role
                  if validation[p.name][env_name]["ok"] and payload_flavour(p.response) == flavour]
        structural = _structural(items)
        baselines_found = direct
        if not direct and same_role:
            shaped = [(p, _reshape(p.response, [d.transform for d in structural])[0]) for p in same_role]  # type: ignore[misc]
            answer = checker.request("validate", payloads=[{"name": p.name, "payload": s} for p, s in shaped],
                                     envelopes=[env_name], dump=True)
            baselines_found = [(p, r["envelopes"][env_name]["dump"]) for (p, _s), r in zip(shaped, answer["results"], strict=True)
                               if r["envelopes"][env_name]["ok"]]
        updated: list[Drift] = []
        if not baselines_found:
            for d in items:
                note = "not probed: no payload of this role" if not same_role else "not probed: could not shape a payload the revision accepts"
                updated.append(replace(d, planner_verdict=note) if d.severity != "info" else d)
            out[env_name] = updated
            continue
        base_payload, base_dump = baselines_found[0]
        ok, verdict, _plan = planner_verdict({"response": base_dump, "reward": 1.0})
        if not ok:
            extra.append(Drift("planner_rejected", "<envelope>", "blocking",
                               f"the planner rejects {base_payload.name} as {env_name} shapes it: {verdict}",
                               envelope=env_name, planner_verdict=verdict))
        value_probes = [d for d in items if d.transform is not None and d.transform["op"] == "set" and d.severity != "info"]
        probe_payloads = []
        for d in value_probes:
            shaped, changed = _reshape(base_dump, [d.transform])  # type: ignore[list-item]
            probe_payloads.append((d, shaped, changed))
        answers = checker.request(
            "validate", payloads=[{"name": d.path, "payload": s} for d, s, _c in probe_payloads], envelopes=[env_name], dump=True
        )["results"] if probe_payloads else []
        value_verdicts: dict[int, Drift] = {}
        for (d, _shaped, changed), answer in zip(probe_payloads, answers, strict=True):
            result = answer["envelopes"][env_name]
            if not changed:
                value_verdicts[id(d)] = replace(d, planner_verdict="not probed: no such value in the payload")
            elif not result["ok"]:
                value_verdicts[id(d)] = replace(d, planner_verdict="not probed: the revision rejects the probe value")
            else:
                accepted, text, _ = planner_verdict({"response": result["dump"], "reward": 1.0})
                value_verdicts[id(d)] = _escalate(d, accepted, text)
        for d in items:
            if id(d) in value_verdicts:
                updated.append(value_verdicts[id(d)])
            elif d in structural and d.severity != "info":
                shaped, changed = _reshape(base_payload.response, [d.transform])  # type: ignore[list-item]
                if not changed:
                    updated.append(replace(d, planner_verdict=f"not probed: {base_payload.name} has no such key"))
                    continue
                accepted, text, _ = planner_verdict({"response": shaped, "reward": 1.0})
                updated.append(_escalate(d, accepted, text))
            else:
                updated.append(d)
        out[env_name] = updated
    return out, extra


# ---------------------------------------------------------------------------------------------
# live


def run_live(checker: CheckerProcess, scripts: Sequence[LiveScript], emitter: str | None, out_dir: Path | None) -> tuple[dict[str, Any], list[Drift]]:
    """Run the scripts through the revision, plan and materialize what it emits, compare with our emitter."""
    answer = checker.request("live", scripts=[s.to_checker() for s in scripts])
    hook_spec = emitter or DEFAULT_EMITTER_HOOK
    hook = load_hook(hook_spec)
    findings: list[Drift] = []
    results = []
    plans = []
    for script, run in zip(scripts, answer["runs"], strict=True):
        entry: dict[str, Any] = {"name": script.name}
        if "error" in run:
            entry["error"] = run["error"]
            findings.append(Drift("planner_rejected", f"live:{script.name}", "warning",
                                  f"the revision could not run the script: {run['error']}"))
            results.append(entry)
            continue
        result = {"response": run["transport"], "reward": script.reward}
        if out_dir is not None:
            live_dir = out_dir / "live"
            live_dir.mkdir(parents=True, exist_ok=True)
            (live_dir / f"{script.name}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
            (live_dir / f"{script.name}.full.json").write_text(json.dumps(run["full"], indent=1) + "\n", encoding="utf-8")
        entry["calls"] = run["calls"]
        mismatches = [
            f"turn {c['turn_id']}: expected append_compatible={call.expect_append_compatible}, revision says {c['append_compatible']}"
            for call, c in zip(script.calls, run["calls"], strict=True)
            if call.expect_append_compatible is not None and call.expect_append_compatible != c["append_compatible"]
        ]
        entry["expectation_mismatches"] = mismatches
        for m in mismatches:
            findings.append(Drift("planner_rejected", f"live:{script.name}", "warning", f"the revision compacts differently: {m}"))
        accepted, verdict, plan = planner_verdict(result)
        entry["plan"] = verdict
        if not accepted:
            findings.append(Drift("planner_rejected", f"live:{script.name}", "blocking",
                                  f"the planner rejects the revision's own payload: {verdict}", planner_verdict=verdict))
        else:
            plans.append((script.name, result, plan))
        full_ok, full_verdict, _ = planner_verdict(run["full"])
        entry["plan_full"] = full_verdict
        if not full_ok:
            findings.append(Drift("planner_rejected", f"live:{script.name}:full", "blocking",
                                  f"the planner rejects the revision's full envelope: {full_verdict}", planner_verdict=full_verdict))
        entry["digests"] = [c.to_json() for c in payload_checks(f"live:{script.name}", result, None) if c.status != "ok"]
        for c in entry["digests"]:
            findings.append(Drift("digest_rule", f"live:{script.name} {c['field']}",
                                  "blocking" if c["planner_checked"] else "warning",
                                  f"the revision emits {c['declared']!r}; our recipe gives {c['ours']!r}"))
        if hook is None:
            entry["emitter"] = {"summary": f"skipped: no emitter hook {hook_spec}", "diffs": []}
        else:
            try:
                ours = hook(script)
                diffs = compare_payloads(result["response"], _response(ours))
                entry["emitter"] = {"summary": f"{len(diffs)} field(s) differ" if diffs else "identical",
                                    "diffs": [d.to_json() for d in diffs]}
                if diffs:
                    findings.append(Drift("digest_rule", f"live:{script.name}", "warning",
                                          f"our emitter differs from the revision in {len(diffs)} field(s), first {diffs[0].path}"))
            except Exception as exc:  # noqa: BLE001 - the hook is someone else's code; report it
                entry["emitter"] = {"summary": f"hook failed: {type(exc).__name__}: {exc}", "diffs": []}
        results.append(entry)
    rows = check_live_rows(plans)
    by_name = {name: text for name, text in rows.items()}
    for entry in results:
        if entry["name"] in by_name:
            entry["rows"] = by_name[entry["name"]]
            if not entry["rows"].startswith("ok"):
                findings.append(Drift("planner_rejected", f"live:{entry['name']}", "blocking", f"rows: {entry['rows']}"))
    return {"scenarios": results, "emitter_hook": hook_spec if hook is not None else None}, findings


# ---------------------------------------------------------------------------------------------
# the whole check


def _blocking_lines(drifts: Sequence[Drift]) -> list[str]:
    return [f"{d.kind} {d.path}" + (f" [{d.envelope}]" if d.envelope else "") + f": {d.detail}"
            for d in drifts if d.severity == "blocking"]


#: Where the compaction contract lives in a NeMo-Gym revision (0.5.0 has none of it).
COMPACTION_AGENT = "responses_api_agents/simple_agent_with_compaction/"


def contract_absent(revision: Revision) -> str | None:
    """Why `revision` is a NeMo-Gym without the compaction contract, or None when it has it.

    Read from the revision's files, before any environment is built: a `nemo_gym` package without
    `responses_api_agents.simple_agent_with_compaction` is drift (exit 3), not a setup failure.
    """
    if revision.wheel is not None:
        try:
            with zipfile.ZipFile(revision.wheel) as zf:
                names = zf.namelist()
        except (OSError, zipfile.BadZipFile):
            return None  # unreadable: fetch_revision already vetted it; the import step will say more
    elif revision.source is not None:
        root = revision.source
        names = [p.relative_to(root).as_posix() + ("/" if p.is_dir() else "")
                 for top in ("nemo_gym", "responses_api_agents") if (root / top).exists()
                 for p in [root / top, *(root / top).rglob("*")]]
    else:
        return None
    has_gym = any(n.startswith("nemo_gym/") for n in names)
    if not has_gym or any(n.startswith(COMPACTION_AGENT) for n in names):
        return None
    module = COMPACTION_AGENT.rstrip("/").replace("/", ".")
    version = f" {revision.version}" if revision.version else ""
    return (f"nemo-gym{version} has no {module} (ModuleNotFoundError: No module named '{module}'): "
            "no compaction agent, no context_compaction_contract, nothing the planner's contract path can read")


def _start_runtime_check(python: Path) -> RuntimeCheck:
    """The agent run's import check, started now so it overlaps the static checks; read before the agent run."""
    from compactsim.harness.gym_check.live_gym import RuntimeCheck  # noqa: PLC0415 - only agent runs need it

    return RuntimeCheck(python)


def run_gym_check(opts: GymCheckOptions, *, out_dir: Path | None = None) -> GymCheckReport:
    """Never raises for a revision problem: setup failures come back as a report with exit 2."""
    timing: dict[str, float] = {}
    t_start = time.perf_counter()
    revision_info: dict[str, Any] = {"spec": opts.spec}
    setup: dict[str, Any] = {}
    runtime_check: RuntimeCheck | None = None
    try:
        spec = parse_spec(opts.spec)
        cache_dir = (opts.cache_dir or default_cache_dir()).resolve()
        setup["cache_dir"] = str(cache_dir)
        t0 = time.perf_counter()
        revision = fetch_revision(spec, cache_dir / "downloads", offline=opts.offline)
        timing["fetch_s"] = time.perf_counter() - t0
        revision_info.update(revision.to_json())
        absent = contract_absent(revision)
        if absent is not None:
            timing["total_s"] = time.perf_counter() - t_start
            return GymCheckReport(verdict="contract_absent", exit_code=EXIT_DRIFT, reason=f"contract absent: {absent}",
                                  revision=revision_info, setup=setup, timing=timing,
                                  blocking=[f"contract_absent: {absent}"])
        agent_run = opts.live and opts.agent
        t0 = time.perf_counter()
        venv = ensure_venv(revision, cache_dir, offline=opts.offline, profile="runtime" if agent_run else "shim")
        timing["venv_s"] = time.perf_counter() - t0
        runtime_check = _start_runtime_check(venv.python) if agent_run else None
        setup.update({
            "venv_key": venv.key, "venv_path": str(venv.path), "cold": venv.cold,
            "interpreter": venv.interpreter.version_text, "interpreter_path": venv.interpreter.executable,
            "interpreter_reason": venv.manifest.get("interpreter", {}).get("why"),  # type: ignore[union-attr]
            "ignore_requires_python": venv.ignore_requires_python, "deps_source": venv.deps_source,
            "dependencies": venv.manifest.get("dependencies"), "venv_bytes": venv.bytes, "venv_profile": venv.manifest.get("profile", "shim"),
            "build_timing": venv.timing or None,
        })
        payloads = load_payloads(opts.payload_paths or default_payload_sources())
        document = baselines.load(opts.baseline) if opts.baseline is not None else None
        t0 = time.perf_counter()
        with CheckerProcess(venv.python, source_paths=(revision.source,) if revision.source else ()) as checker:
            hello = checker.request("hello")
            timing["import_s"] = time.perf_counter() - t0
            revision_info.update({"import_mode": hello["import_mode"], "python": hello["python"],
                                  "distributions": hello["distributions"], "session_module": hello["session_module"]})
            if hello["compactsim_imported"]:
                raise GymSetupError("checker", "compactsim leaked into the revision's interpreter")
            if not hello["envelopes"]:
                raise GymSetupError("import", "no evidence envelope found in the revision: " + ("; ".join(hello["errors"]) or "no compaction session module"))
            t0 = time.perf_counter()
            inspected = checker.request("inspect")
            envelopes = inspected["envelopes"]
            revision_info["envelopes"] = [
                {k: v for k, v in env.items() if k != "schema"} | {"flavour": envelope_flavour(env)} for env in envelopes.values()
            ]
            revision_info["flavours"] = sorted({envelope_flavour(env) for env in envelopes.values()})
            wire = [{"name": p.name, "payload": p.payload} for p in payloads]
            answer = checker.request("validate", payloads=wire, dump=True) if payloads else {"results": []}
            validation = {r["name"]: r["envelopes"] for r in answer["results"]}
            digests_answer = checker.request("digests", probes=list(PRIMITIVE_PROBES), payloads=wire)
            drift = {name: envelope_drift(name, env, document) for name, env in envelopes.items()}
            drift, extra = probe_drift(checker, envelopes, drift, payloads, validation)
            timing["check_s"] = time.perf_counter() - t0
            live_section = None
            if opts.live:
                t0 = time.perf_counter()
                live_section, live_findings = run_live(checker, scenarios(list(opts.live_scenarios)), opts.emitter, out_dir)
                extra += live_findings
                timing["live_s"] = time.perf_counter() - t0
        live_gym_section = None
        if agent_run:
            from compactsim.harness.gym_check.live_gym import run_gym_live  # noqa: PLC0415

            t0 = time.perf_counter()
            if runtime_check is not None:  # started with the venv: the apps imported meanwhile
                runtime_check.result()
            live_gym_section, gym_findings = run_gym_live(venv.python, opts.agent_scenarios, out_dir)
            extra += gym_findings
            timing["live_gym_s"] = time.perf_counter() - t0
    except GymSetupError as exc:
        timing["total_s"] = time.perf_counter() - t_start
        return GymCheckReport(verdict="setup_failed", exit_code=EXIT_SETUP, reason=str(exc), revision=revision_info,
                              setup=setup, timing=timing)
    finally:
        if runtime_check is not None:
            runtime_check.close()

    checks: list[DigestCheck] = primitive_checks(digests_answer["primitives"])
    rev_by_name = {p["name"]: p for p in digests_answer["payloads"]}
    for p in payloads:
        checks += payload_checks(p.name, p.payload, rev_by_name.get(p.name))
    for c in checks:
        if c.status == "rule_changed":
            extra.append(Drift("digest_rule", f"{c.payload} {c.field}", "blocking" if c.planner_checked else "warning",
                               f"the revision computes {c.revision!r}, compactsim.harness.core.digests computes {c.ours!r}"))
    payload_rows = []
    for p in payloads:
        flavour = payload_flavour(p.response)
        matching = [n for n, env in envelopes.items() if envelope_flavour(env) == flavour and env["role"] == payload_role(p.response)]
        if matching:
            result = validation[p.name][matching[0]]
            said = "valid" if result["ok"] else "rejected: " + "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in result["errors"][:3])
            if not result["ok"]:
                extra.append(Drift("payload_rejected", p.name, "warning",
                                   f"{matching[0]} rejects our {flavour} payload: {said}", envelope=matching[0]))
        else:
            said = f"n/a: the revision has no {flavour} envelope"
        payload_rows.append({"name": p.name, "flavour": flavour, "envelope": matching[0] if matching else None,
                             "revision": said, "planner": planner_verdict(p.payload)[1]})
    all_drift = [d for name in sorted(drift) for d in drift[name]] + extra
    all_drift.sort(key=lambda d: (-SEVERITY_ORDER[d.severity], d.envelope or "", d.path, d.kind))
    blocking = _blocking_lines(all_drift)
    setup["cache_bytes"] = dir_bytes(Path(setup["cache_dir"]))
    timing["total_s"] = time.perf_counter() - t_start
    return GymCheckReport(
        verdict="drift" if blocking else "compatible",
        exit_code=EXIT_DRIFT if blocking else EXIT_OK,
        revision=revision_info,
        setup=setup,
        models=model_rows(envelopes, inspected["classes"]),
        drift=[d.to_json() for d in all_drift],
        blocking=blocking,
        payloads=payload_rows,
        digests=[c.to_json() for c in checks],
        live=live_section,
        live_gym=live_gym_section,
        planner=PLANNER_NAME,
        timing={k: round(v, 3) for k, v in timing.items()},
    )


def write_report(report: GymCheckReport, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "gym-check.json"
    path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return path


__all__ = [
    "EXIT_DRIFT",
    "EXIT_OK",
    "EXIT_SETUP",
    "COMPACTION_AGENT",
    "PLANNER_NAME",
    "GymCheckOptions",
    "NamedPayload",
    "contract_absent",
    "default_payload_sources",
    "envelope_drift",
    "envelope_flavour",
    "load_payloads",
    "payload_flavour",
    "planner_verdict",
    "probe_drift",
    "run_gym_check",
    "run_live",
    "write_report",
]
