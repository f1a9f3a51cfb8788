"""The probe that runs inside a Gym revision's own virtual environment.

It imports only the standard library, pydantic and the Gym revision: never compactsim, so what
it reports is what that revision's code does. The host talks to it over JSON lines: one request
per line on stdin, one answer per line on the original stdout (anything the revision prints goes
to stderr). Operations: ``hello`` (what was imported and how), ``inspect`` (evidence models and
their JSON schemas), ``validate`` (payloads against the real envelopes), ``digests`` (ids and
digests recomputed with the revision's own functions), ``live`` (scripted rollouts through the
revision's ``ContextCompactionSession``).

Run: ``<venv>/bin/python -I checker.py [--path SOURCE_DIR ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import traceback
import types
from collections.abc import Callable, Mapping
from typing import Any

PROTOCOL_VERSION = 1
#: Where the compaction session module lives (0.7.0 and PR #2870); searched in order.
SESSION_MODULES: tuple[str, ...] = ("responses_api_agents.simple_agent_with_compaction.compaction.session",)
#: Top-level package searched for any other `compaction/session.py` when the known paths fail.
AGENTS_PACKAGE = "responses_api_agents"
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
MAX_ERRORS = 20


# ---------------------------------------------------------------------------------------------
# importing the revision


def _server_utils_stub() -> types.ModuleType:
    """The tiny stand-in for `nemo_gym.server_utils` (reference §7): names only, no behaviour."""
    stub = types.ModuleType("nemo_gym.server_utils")
    stub.__dict__["__compactsim_stub__"] = True

    class ClientResponse:  # noqa: D401 - placeholder type
        """Placeholder for aiohttp's ClientResponse (never used by the evidence models)."""

    class ClientResponseError(Exception):
        """Placeholder for aiohttp's ClientResponseError."""

    async def _unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("nemo_gym.server_utils is stubbed inside the compactsim gym checker")

    stub._GLOBAL_AIOHTTP_CLIENT_REQUEST_DEBUG = False  # type: ignore[attr-defined]
    stub.MAX_NUM_TRIES = 3  # type: ignore[attr-defined]
    stub.ClientResponse = ClientResponse  # type: ignore[attr-defined]
    stub.ClientResponseError = ClientResponseError  # type: ignore[attr-defined]
    stub.get_response_json = _unavailable  # type: ignore[attr-defined]
    stub.raise_for_status = _unavailable  # type: ignore[attr-defined]
    stub.request = _unavailable  # type: ignore[attr-defined]
    return stub


def _find_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _install_shim_if_needed() -> str:
    """Return the import mode: "native", "shim" (stub registered) or "no-server-utils"."""
    if _find_spec("nemo_gym") is None or _find_spec("nemo_gym.server_utils") is None:
        return "no-server-utils"
    if _find_spec("aiohttp") is not None and _find_spec("hydra") is not None:
        return "native"
    import nemo_gym  # noqa: PLC0415 - the package itself is light (paths and env only)

    stub = _server_utils_stub()
    sys.modules["nemo_gym.server_utils"] = stub
    nemo_gym.server_utils = stub  # type: ignore[attr-defined]
    return "shim"


def _candidate_session_modules() -> list[str]:
    names = list(SESSION_MODULES)
    spec = _find_spec(AGENTS_PACKAGE)
    for root in list(getattr(spec, "submodule_search_locations", None) or []):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in {"tests", "__pycache__"})
            if os.path.basename(dirpath) == "compaction" and "session.py" in filenames:
                rel = os.path.relpath(os.path.join(dirpath, "session"), os.path.dirname(root))
                name = rel.replace(os.sep, ".")
                if name not in names:
                    names.append(name)
    return names


@dataclasses.dataclass
class Revision:
    """What the checker found in the revision."""

    import_mode: str
    session: types.ModuleType | None = None
    history: types.ModuleType | None = None
    package: str | None = None
    errors: list[str] = dataclasses.field(default_factory=list)
    envelopes: dict[str, Any] = dataclasses.field(default_factory=dict)  # class name -> class
    envelope_facts: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def load_revision() -> Revision:
    mode = _install_shim_if_needed()
    rev = Revision(import_mode=mode)
    for name in _candidate_session_modules():
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - every import failure is a reported fact
            rev.errors.append(f"import {name}: {type(exc).__name__}: {exc}")
            continue
        rev.session = module
        rev.package = name.rsplit(".", 1)[0]
        try:
            rev.history = importlib.import_module(rev.package + ".history")
        except Exception as exc:  # noqa: BLE001
            rev.errors.append(f"import {rev.package}.history: {type(exc).__name__}: {exc}")
        break
    if rev.session is not None:
        _discover_envelopes(rev)
    return rev


def _is_model(obj: Any) -> bool:
    try:
        from pydantic import BaseModel  # noqa: PLC0415
    except ImportError:
        return False
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _field_model(annotation: Any) -> Any:
    """The pydantic model inside `X`, `X | None`, `list[X]`, `tuple[X, ...]`; else None."""
    if _is_model(annotation):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _field_model(arg)
        if found is not None:
            return found
    return None


def _contract_like(cls: Any) -> bool:
    return _is_model(cls) and {"rollout_id", "generation_contract"} <= set(cls.model_fields)


def _discover_envelopes(rev: Revision) -> None:
    """Envelopes are models of the session module with a field whose type is a contract model."""
    module = rev.session
    assert module is not None
    for name, obj in sorted(vars(module).items()):
        if not _is_model(obj) or obj.__module__ != module.__name__:
            continue
        contract_fields = [
            (fname, _field_model(f.annotation))
            for fname, f in obj.model_fields.items()
            if _contract_like(_field_model(f.annotation))
        ]
        if not contract_fields:
            continue
        key, contract_cls = contract_fields[0]
        sv_field = contract_cls.model_fields.get("schema_version")
        mode_field = contract_cls.model_fields.get("mode")
        token_lists = [
            fname
            for fname, f in obj.model_fields.items()
            if (m := _field_model(f.annotation)) is not None and "sampled_token_ids" in m.model_fields
        ]
        base = next(
            (b for b in obj.__mro__[1:] if _is_model(b) and b.__module__ != module.__name__),
            None,
        )
        base_fields = set(base.model_fields) if base is not None else set()
        rev.envelopes[name] = obj
        rev.envelope_facts[name] = {
            "class": name,
            "module": obj.__module__,
            "contract_key": key,
            "contract_class": contract_cls.__name__,
            "schema_version": sv_field.default if sv_field is not None else None,
            "mode": mode_field.default if mode_field is not None else None,
            "role": "full" if token_lists else "transport",
            "base_class": base.__name__ if base is not None else None,
            "evidence_fields": [f for f in obj.model_fields if f not in base_fields],
        }


# ---------------------------------------------------------------------------------------------
# operations


def op_hello(rev: Revision, _req: Mapping[str, Any]) -> dict[str, Any]:
    try:
        import pydantic  # noqa: PLC0415

        pydantic_version = pydantic.VERSION
    except ImportError:
        pydantic_version = None
    versions = {}
    for dist in ("nemo-gym", "openai", "pydantic", "pydantic-core"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "protocol": PROTOCOL_VERSION,
        "python": platform.python_version(),
        "executable": sys.executable,
        "pydantic": pydantic_version,
        "distributions": versions,
        "import_mode": rev.import_mode,
        "session_module": rev.session.__name__ if rev.session else None,
        "session_file": getattr(rev.session, "__file__", None),
        "history_module": rev.history.__name__ if rev.history else None,
        "errors": rev.errors,
        "envelopes": sorted(rev.envelopes),
        "compactsim_imported": any(m == "compactsim" or m.startswith("compactsim.") for m in sys.modules),
    }


def _model_kind(cls: Any) -> dict[str, Any]:
    if _is_model(cls):
        config = cls.model_config
        return {"kind": "BaseModel", "extra": config.get("extra"), "frozen": bool(config.get("frozen", False))}
    if dataclasses.is_dataclass(cls):
        params = getattr(cls, "__dataclass_params__", None)
        return {"kind": "dataclass", "extra": None, "frozen": bool(getattr(params, "frozen", False))}
    return {"kind": type(cls).__name__, "extra": None, "frozen": False}


def op_inspect(rev: Revision, _req: Mapping[str, Any]) -> dict[str, Any]:
    if rev.session is None:
        raise RuntimeError("no compaction session module could be imported: " + "; ".join(rev.errors))
    envelopes = {}
    classes: dict[str, dict[str, Any]] = {}
    for name, cls in sorted(rev.envelopes.items()):
        schema = cls.model_json_schema(mode="serialization")
        envelopes[name] = dict(rev.envelope_facts[name], schema=schema)
    for module in (rev.session, rev.history):
        if module is None:
            continue
        for name, obj in vars(module).items():
            if isinstance(obj, type) and obj.__module__ == module.__name__ and (_is_model(obj) or dataclasses.is_dataclass(obj)):
                classes[name] = dict(_model_kind(obj), module=module.__name__)
    functions = {
        name: bool(rev.history is not None and callable(getattr(rev.history, name, None)))
        for name in ("canonical_digest", "stable_id", "_ordered_id_digest", "capture_observed_completion")
    }
    return {"envelopes": envelopes, "classes": classes, "digest_functions": functions}


def _errors(exc: Exception) -> list[dict[str, Any]]:
    if hasattr(exc, "errors"):
        return [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()[:MAX_ERRORS]  # type: ignore[attr-defined]
        ]
    return [{"loc": [], "msg": f"{type(exc).__name__}: {exc}", "type": "exception"}]


def op_validate(rev: Revision, req: Mapping[str, Any]) -> dict[str, Any]:
    """Validate each payload (bare response or /run wrapper) against each requested envelope."""
    names = req.get("envelopes") or sorted(rev.envelopes)
    want_dump = bool(req.get("dump", False))
    results = []
    for item in req["payloads"]:
        payload = item["payload"]
        response = payload["response"] if isinstance(payload, dict) and "response" in payload and "output" not in payload else payload
        per_env = {}
        for name in names:
            cls = rev.envelopes.get(name)
            if cls is None:
                per_env[name] = {"ok": False, "errors": [{"loc": [], "msg": f"no envelope {name}", "type": "missing"}]}
                continue
            try:
                obj = cls.model_validate_json(json.dumps(response))
            except Exception as exc:  # noqa: BLE001 - validation errors are the answer
                per_env[name] = {"ok": False, "errors": _errors(exc)}
                continue
            entry: dict[str, Any] = {"ok": True, "errors": [], "extra_keys": sorted((obj.model_extra or {}).keys())}
            if want_dump:
                entry["dump"] = obj.model_dump(mode="json")
            per_env[name] = entry
        results.append({"name": item["name"], "envelopes": per_env})
    return {"results": results}


def _call_or_error(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"value": fn()}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


def _token_items(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [i for i in response.get("output", []) if isinstance(i, dict) and all(k in i for k in TOKEN_FIELDS)]


def _revision_call_record(rev: Revision, record: Mapping[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    """Re-run the revision's capture → ModelCallMetadata path on one call of our payload."""
    hist, sess = rev.history, rev.session
    assert hist is not None and sess is not None
    decision = record.get("policy_decision") or {}
    policy = types.SimpleNamespace(
        policy_name=decision.get("policy_name"),
        policy_version=decision.get("policy_version"),
        config_digest=decision.get("config_digest"),
        decision_turn=decision.get("decision_turn"),
        selection_digest=decision.get("selection_digest"),
        lineage=types.SimpleNamespace(transformation_id=decision.get("transformation_id")),
    )
    observed = hist.capture_observed_completion(
        [dict(item)],
        rollout_id=record["rollout_id"],
        turn_id=record["turn_id"],
        media_ids=tuple(record.get("media_ids", ())),
        policy_decision=policy,
        prepared_request_id=record["prepared_request_id"],
        context_epoch=record["context_epoch"],
        segment_index=record["segment_index"],
        segment_id=record["segment_id"],
        expected_append_compatible=record["expected_append_compatible"],
        compaction_event_id=record.get("compaction_event_id"),
        generation_contract_id=record["generation_contract_id"],
        finish_reason=record.get("finish_reason"),
    )
    meta_cls = getattr(sess, "ModelCallMetadata", None)
    try:
        return meta_cls.from_observed(observed).model_dump(mode="json")  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - fall back to the documented recipe, and say so
        dumped = observed.model_dump(mode="json")
        dumped["generation_evidence_digest"] = hist.canonical_digest({
            "prompt_token_ids": observed.prompt_token_ids,
            "sampled_token_ids": observed.sampled_token_ids,
            "sampled_logprobs": observed.sampled_logprobs,
        })
        dumped["__note__"] = f"ModelCallMetadata.from_observed failed ({type(exc).__name__}); digest by the documented recipe"
        return dumped


def op_digests(rev: Revision, req: Mapping[str, Any]) -> dict[str, Any]:
    """Evaluate primitive probes and per-payload ids with the revision's own functions."""
    hist = rev.history
    if hist is None:
        raise RuntimeError("the revision's history module could not be imported")
    fns: dict[str, Callable[..., Any]] = {
        "canonical_digest": getattr(hist, "canonical_digest", None),
        "stable_id": getattr(hist, "stable_id", None),
        "ordered_id_digest": getattr(hist, "_ordered_id_digest", None),
    }
    primitives = []
    for probe in req.get("probes", []):
        fn = fns.get(probe["fn"])
        if fn is None:
            primitives.append({"name": probe["name"], "error": f"the revision has no {probe['fn']}"})
            continue
        primitives.append(dict(name=probe["name"], **_call_or_error(lambda fn=fn, a=probe["args"]: fn(*a))))

    payloads = []
    arena_cls = getattr(hist, "MediaArena", None)
    contract_cls = getattr(hist, "GenerationContract", None)
    for entry in req.get("payloads", []):
        payload = entry["payload"]
        response = payload["response"] if "response" in payload and "output" not in payload else payload
        out: dict[str, Any] = {"name": entry["name"], "calls": [], "media": [], "generation_contract": None}
        items = _token_items(response)
        records = response.get("model_call_metadata") or response.get("completion_evidence") or []
        for index, record in enumerate(records):
            if index >= len(items) or not hasattr(hist, "capture_observed_completion"):
                out["calls"].append({"index": index, "error": "no token item or no capture_observed_completion"})
                continue
            out["calls"].append(
                dict(index=index, **_call_or_error(lambda r=record, i=items[index]: _revision_call_record(rev, r, i)))
            )
        for media_id, asset in sorted((response.get("media_assets") or {}).items()):
            if arena_cls is None or not isinstance(asset, dict) or "source_part" not in asset:
                continue

            def _register(part: Mapping[str, Any] = asset["source_part"]) -> dict[str, Any]:
                arena = arena_cls()
                new_id = arena.register(part)
                exported = arena.export()[new_id]
                return {"media_id": new_id, "content_digest": exported.get("content_digest")}

            out["media"].append(dict(key=media_id, **_call_or_error(_register)))
        contract = next(
            (response[k] for k in ("context_compaction_contract", "rollout_trace_contract") if isinstance(response.get(k), dict)),
            None,
        )
        if contract is not None and contract_cls is not None and isinstance(contract.get("generation_contract"), dict):
            out["generation_contract"] = _call_or_error(
                lambda g=contract["generation_contract"]: contract_cls.model_validate(g).model_dump(mode="json")
            )
        payloads.append(out)
    return {"primitives": primitives, "payloads": payloads}


# ---------------------------------------------------------------------------------------------
# live: scripted rollouts through the revision's ContextCompactionSession


def _prompt_for(call: Mapping[str, Any], required: tuple[int, ...] | None, turn: int) -> list[int]:
    """A forced prompt, else the required prefix plus the observation tokens, else the rewrite prompt."""
    if call.get("prompt_token_ids") is not None:
        return list(call["prompt_token_ids"])
    if required is not None:
        return [*required, *call.get("prompt_suffix", [])]
    if call.get("rewrite_prompt_token_ids") is not None:
        return list(call["rewrite_prompt_token_ids"])
    raise RuntimeError(
        f"turn {turn}: the revision's view is not append-compatible here, so the script must give "
        "rewrite_prompt_token_ids (a re-rendered prompt) for this call"
    )


def _observation_item(openai_utils: types.ModuleType, item: Mapping[str, Any]) -> Any:
    """Observations enter the session as the typed items Gym's agent builds (`_tool_response_items`)."""
    kind = item.get("type")
    if kind == "function_call_output":
        return openai_utils.NeMoGymFunctionCallOutput.model_validate(item)
    if kind == "message" and item.get("role") == "user":
        return openai_utils.NeMoGymEasyInputMessage.model_validate(item)
    return dict(item)


async def _run_script(rev: Revision, script: Mapping[str, Any]) -> dict[str, Any]:
    sess = rev.session
    assert sess is not None and rev.package is not None
    config_mod = importlib.import_module(rev.package + ".config")
    openai_utils = importlib.import_module("nemo_gym.openai_utils")
    history_config = config_mod.ContextHistoryConfig.model_validate(script["context_history"])
    body = openai_utils.NeMoGymResponseCreateParamsNonStreaming.model_validate(script["request"])
    if isinstance(body.input, str):
        body.input = [openai_utils.NeMoGymEasyInputMessage(role="user", content=body.input)]
    agent_input = list(body.input)
    session = sess.ContextCompactionSession(
        config=history_config,
        rollout_id=script["rollout_id"],
        generation_contract=sess.build_generation_contract(
            body=body, model_server=script["model_server"], context_history=history_config
        ),
        initial_context=agent_input,
        seed_observations=[],
    )
    trace: list[dict[str, Any]] = []
    response = None
    for turn, call in enumerate(script["calls"], 1):
        prepared = await session.prepare_model_call(turn_id=turn)
        history_view = prepared.prepared_history
        required = prepared.required_prefix_token_ids
        items = [dict(i) for i in call["output"]]
        items[-1].update(
            prompt_token_ids=_prompt_for(call, required, turn),
            generation_token_ids=list(call["generation_token_ids"]),
            generation_log_probs=list(call["generation_log_probs"]),
        )
        incomplete = call.get("incomplete_reason")
        response = openai_utils.NeMoGymResponse.model_validate(
            {
                "id": f"resp_{turn}",
                "created_at": script.get("created_at", 1.0),
                "model": script.get("model", "policy"),
                "object": "response",
                "output": items,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "incomplete_details": {"reason": incomplete} if incomplete else None,
            }
        )
        session.record_model_response(call=prepared, output_items=response.output, finish_reason=incomplete)
        for obs in call.get("observations", []):
            obs_items = [_observation_item(openai_utils, o) for o in obs]
            session.append_observation(obs_items, turn_id=turn, conditions_action_turn=turn + 1)
        boundary = history_view.boundary
        trace.append(
            {
                "turn_id": turn,
                "append_compatible": bool(history_view.append_compatible),
                "required_prefix_len": None if required is None else len(required),
                "boundary_event_id": None if boundary is None else boundary.event_id,
                "media_ids": list(history_view.view.media_ids),
            }
        )
    assert response is not None, "a script needs at least one call"
    session.finalize()
    response.output = list(session.output_items)
    response.usage = None
    full = session.build_response(response, agent_input=agent_input, seed_obs=[])
    key = rev.envelope_facts[type(full).__name__]["contract_key"]
    stamped = getattr(full, key).model_copy(
        update={k: script.get(k) for k in ("group_id", "task_id", "rollout_index", "attempt_index")}
    )
    full = full.model_copy(update={key: stamped})
    transport = sess.build_transport_response(full)
    return {
        "name": script["name"],
        "calls": trace,
        "full": full.model_dump(mode="json"),
        "transport": transport.model_dump(mode="json"),
        "transport_class": type(transport).__name__,
    }


def op_live(rev: Revision, req: Mapping[str, Any]) -> dict[str, Any]:
    if rev.session is None or not hasattr(rev.session, "ContextCompactionSession"):
        raise RuntimeError("the revision has no ContextCompactionSession")
    runs = []
    for script in req["scripts"]:
        try:
            runs.append(asyncio.run(_run_script(rev, script)))
        except Exception as exc:  # noqa: BLE001 - a failing scenario is a result
            runs.append({"name": script["name"], "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    return {"runs": runs}


OPS: dict[str, Callable[[Revision, Mapping[str, Any]], dict[str, Any]]] = {
    "hello": op_hello,
    "inspect": op_inspect,
    "validate": op_validate,
    "digests": op_digests,
    "live": op_live,
}


def serve(rev: Revision, requests: Any, answer: Callable[[dict[str, Any]], None]) -> None:
    for line in requests:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "shutdown":
            answer({"id": req.get("id"), "ok": True, "result": {}})
            return
        handler = OPS.get(req.get("op", ""))
        try:
            if handler is None:
                raise ValueError(f"unknown op {req.get('op')!r}")
            answer({"id": req.get("id"), "ok": True, "result": handler(rev, req)})
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            answer({"id": req.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="append", default=[], help="prepend a source checkout to sys.path")
    args = parser.parse_args(argv)
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for path in reversed(args.path):
        sys.path.insert(0, path)

    def answer(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message, default=repr) + "\n")
        protocol.flush()

    rev = load_revision()
    serve(rev, sys.stdin, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
