"""gym-check's pure parts: schema drift rules, payload transforms, digest checks, payload loading, live helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactsim.harness.core.contract import GymResponse
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.gym_check import baseline as baselines
from compactsim.harness.gym_check.digest_check import DigestCheck, payload_checks, primitive_checks
from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.live import compare_payloads, load_hook, png_data_url, scenarios
from compactsim.harness.gym_check.revision import parse_spec, shim_requirements
from compactsim.harness.gym_check.run import envelope_flavour, load_payloads, payload_flavour
from compactsim.harness.gym_check.schema_diff import apply_transform, diff_schemas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _obj(props: dict, required: list[str] | None = None, extra: bool | None = None, title: str = "M") -> dict:
    schema = {"type": "object", "title": title, "properties": props, "required": required or []}
    if extra is not None:
        schema["additionalProperties"] = extra
    return schema


STR = {"type": "string"}
INT = {"type": "integer"}


def test_schema_diff_detects_rename_by_type_and_position() -> None:
    ours = _obj({"a": STR, "b": INT, "digest": STR}, ["a", "digest"], extra=True)
    theirs = _obj({"a": STR, "b": INT, "other": INT, "evidence_digest": STR}, ["a", "evidence_digest"], extra=False)
    found = {(d.kind, d.path): d for d in diff_schemas(theirs, ours)}
    rename = found[("renamed", "digest")]
    assert rename.severity == "blocking"
    assert rename.transform == {"op": "rename", "path": [], "from": "digest", "to": "evidence_digest"}
    assert found[("added", "other")].severity == "info"
    assert ("removed", "digest") not in found


def test_schema_diff_removed_optional_field_is_a_warning_and_extension_is_info() -> None:
    ours = _obj({"a": STR, "note": {"anyOf": [STR, {"type": "null"}]}, "policy_version": INT}, ["a"], extra=True)
    theirs = _obj({"a": STR}, ["a"])
    found = {(d.kind, d.path): d.severity for d in diff_schemas(theirs, ours)}
    assert found == {("removed", "note"): "warning", ("removed", "policy_version"): "info"}


def test_schema_diff_alternative_contract_key_is_info_when_the_other_is_present() -> None:
    contract = _obj({"rollout_id": STR}, ["rollout_id"], title="C")
    ours = _obj({"context_compaction_contract": contract, "rollout_trace_contract": contract}, [], extra=True)
    only_new = _obj({"rollout_trace_contract": contract}, ["rollout_trace_contract"])
    neither = _obj({"trace": contract}, ["trace"])
    assert {(d.kind, d.path, d.severity) for d in diff_schemas(only_new, ours)} == {
        ("removed", "context_compaction_contract", "info")}
    severities = {d.path: d.severity for d in diff_schemas(neither, ours) if d.kind == "removed"}
    assert severities == {"context_compaction_contract": "blocking", "rollout_trace_contract": "blocking"}


def test_schema_diff_new_literal_value_and_wider_type_are_blocking() -> None:
    ours = _obj({"v": {"const": 3, "type": "integer"}, "n": INT}, ["v", "n"])
    theirs = _obj({"v": {"enum": [3, 4], "type": "integer"}, "n": {"anyOf": [INT, STR]}}, ["v", "n"])
    found = {(d.kind, d.path): d for d in diff_schemas(theirs, ours)}
    assert found[("literal_changed", "v")].detail == "the revision may emit 4; the planner accepts 3"
    assert found[("literal_changed", "v")].transform == {"op": "set", "path": [], "key": "v", "value": 4}
    assert found[("type_changed", "n")].severity == "blocking"


def test_schema_diff_unbounded_producer_value_is_known_when_the_baseline_was_unbounded() -> None:
    ours = GymResponse.model_json_schema()
    document = baselines.load()
    assert document is not None
    name, schema, evidence = baselines.envelope_schema(document, "transport")
    assert name == "ContextCompactedTransportResponse"
    known = baselines.known_findings(document, "transport", ours)
    for drift in diff_schemas(schema, ours, evidence_fields=evidence):
        assert baselines.is_known(drift, known)


def test_apply_transform_renames_removes_and_sets_one_instance() -> None:
    response = {"m": [{"a": 1, "b": 2}, {"a": 3, "b": 4}]}
    assert apply_transform(response, {"op": "rename", "path": ["m", "[]"], "from": "a", "to": "z"}) == 2
    assert apply_transform(response, {"op": "remove", "path": ["m", "[]"], "key": "b"}) == 2
    assert apply_transform(response, {"op": "set", "path": ["m", "[0]"], "key": "z", "value": 0}) == 1
    assert response == {"m": [{"z": 0}, {"z": 3}]}


def test_digest_check_flags_a_rule_change_and_a_stale_payload() -> None:
    assert DigestCheck("p", "f", "x", "y", "z").status == "rule_changed"
    assert DigestCheck("p", "f", "x", "y", "y").status == "payload_stale"
    assert DigestCheck("p", "f", "y", "y", "y").status == "ok"
    assert DigestCheck("p", "f", None, None, "y", error="boom").status == "error"
    checks = primitive_checks([{"name": "ordered_id_digest(ids)", "value": "0" * 64}])
    changed = [c for c in checks if c.status == "rule_changed"]
    assert [c.field for c in changed] == ["ordered_id_digest(ids)"]
    assert [c.error for c in checks if c.status == "error"] == ["not evaluated"] * (len(checks) - 1)


def test_digest_check_our_recipes_match_the_reference_example() -> None:
    payload = json.loads((EXAMPLES / "gym-0.7.0-transport-compacted-3call.json").read_text(encoding="utf-8"))
    checks = payload_checks("ex", payload, None)
    assert len(checks) == 22
    assert all(c.status == "ok" and c.declared == c.ours for c in checks)
    payload["model_call_metadata"][1]["request_id"] = "request-stale"
    stale = [c.field for c in payload_checks("ex", payload, None) if c.status == "payload_stale"]
    assert stale == ["call 2 request_id"]


def test_load_payloads_reads_json_lists_and_jsonl_from_a_directory(tmp_path: Path) -> None:
    example = json.loads((EXAMPLES / "gym-0.7.0-transport-compacted-3call.json").read_text(encoding="utf-8"))
    (tmp_path / "a.json").write_text(json.dumps([example, {"response": example, "reward": 1.0}]), encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text(json.dumps(example) + "\n\n" + json.dumps(example) + "\n", encoding="utf-8")
    loaded = load_payloads([tmp_path])
    assert [p.name for p in loaded] == ["a.json[0]", "a.json[1]", "b.jsonl:1", "b.jsonl:3"]
    assert {payload_flavour(p.response) for p in loaded} == {"gym-0.7.0-transport"}


def test_load_payloads_skips_other_files_of_a_directory_but_not_a_named_one(tmp_path: Path) -> None:
    """A rollout folder holds ground truth and a summary beside its results: in a directory they are not results
    and are skipped; named on their own they are refused."""
    example = json.loads((EXAMPLES / "gym-0.7.0-transport-compacted-3call.json").read_text(encoding="utf-8"))
    (tmp_path / "r.result.json").write_text(json.dumps({"response": example, "reward": 1.0}), encoding="utf-8")
    (tmp_path / "r.ground_truth.json").write_text(json.dumps({"rollout": "r", "calls": []}), encoding="utf-8")
    (tmp_path / "summary.json").write_text(json.dumps({"rollouts": 1}), encoding="utf-8")
    assert [p.name for p in load_payloads([tmp_path])] == ["r.result.json"]
    with pytest.raises(ConfigError, match="this object has neither \\(keys: calls, rollout\\)"):
        load_payloads([tmp_path / "r.ground_truth.json"])
    (tmp_path / "mixed.json").write_text(json.dumps([example, {"rows": 1}]), encoding="utf-8")
    with pytest.raises(ConfigError, match="mixed.json: field \\$\\[1\\]: expected a Gym result"):
        load_payloads([tmp_path])


def test_load_payloads_rejects_invalid_json_with_its_location(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_payloads([tmp_path / "bad.json"])
    assert info.value.code == "invalid_argument"
    assert "bad.json:1:2: field $: not valid JSON" in str(info.value)


def test_flavours_are_named_like_the_pipeline_names_them() -> None:
    pr2870 = json.loads((EXAMPLES / "gym-pr2870-transport-compacted-3call.json").read_text(encoding="utf-8"))
    assert payload_flavour(pr2870) == "gym-pr2870"
    assert payload_flavour({"output": []}) == "none"
    assert envelope_flavour({"contract_key": "rollout_trace_contract", "schema_version": None, "role": "transport"}) == "gym-pr2870"
    assert envelope_flavour({"contract_key": "trace", "schema_version": 4, "role": "transport"}) == "unknown(trace, schema_version=4)"


def test_parse_spec_reads_pins_wheels_and_directories(tmp_path: Path) -> None:
    assert parse_spec("nemo-gym==0.7.0").kind == "pypi"
    wheel = tmp_path / "nemo_gym-0.7.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    spec = parse_spec(str(wheel))
    assert (spec.kind, spec.name, spec.version) == ("wheel", "nemo-gym", "0.7.0")
    assert parse_spec(str(tmp_path)).kind == "source"
    (tmp_path / "notes.txt").write_text("", encoding="utf-8")
    with pytest.raises(GymSetupError) as info:
        parse_spec(str(tmp_path / "notes.txt"))
    assert info.value.step == "spec"


def test_shim_requirements_keep_the_revisions_pins_and_drop_extras() -> None:
    reqs = ["openai==2.44.0", "fastapi", "pydantic", 'pytest; extra == "dev"', 'openai<1; extra == "old"']
    assert shim_requirements(reqs) == ("pydantic", "openai==2.44.0")
    assert shim_requirements(["fastapi"]) == ("pydantic",)


def test_live_scenarios_are_deterministic_and_named() -> None:
    assert [s.name for s in scenarios()] == ["no-compaction", "image-recency-k2", "reasoning-recency"]
    assert png_data_url(2, 2, (1, 2, 3)) == png_data_url(2, 2, (1, 2, 3))
    assert scenarios(["image-recency-k2"])[0].to_checker() == scenarios(["image-recency-k2"])[0].to_checker()
    with pytest.raises(ConfigError) as info:
        scenarios(["nope"])
    assert "unknown live scenario(s) ['nope']" in str(info.value)


def test_compare_payloads_reports_each_differing_leaf() -> None:
    real = {"a": 1, "b": [1, 2], "c": {"d": "x"}, "n": None}
    ours = {"a": 1, "b": [1, 3, 4], "c": {"d": "y"}}
    assert [(d.path, d.real, d.ours) for d in compare_payloads(real, ours)] == [
        ("b.length", 2, 3), ("b[1]", 2, 3), ("c.d", "x", "y"),
    ]


def test_load_hook_resolves_module_attr_and_tolerates_absent_modules() -> None:
    assert load_hook("json:dumps") is json.dumps
    assert load_hook("agents_that_do_not_exist.x:emit") is None
    with pytest.raises(ConfigError):
        load_hook("no-colon")


def test_checker_imports_only_the_stdlib_and_pydantic() -> None:
    """The checker runs inside the revision's venv: stdlib, pydantic and the revision only, never compactsim."""
    import ast
    import sys

    from compactsim.harness.gym_check.probe import CHECKER

    tree = ast.parse(CHECKER.read_text(encoding="utf-8"))
    imported = {
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported - set(sys.stdlib_module_names) - {"__future__"} == {"pydantic", "nemo_gym"}  # nemo_gym: the revision


@pytest.mark.parametrize(("content", "message"), [
    ("[]", "e.json: no Gym result to check: gym-check --payloads needs at least one result"),
    ("[1]", "e.json: field $[0]: expected a Gym result (a JSON object), found int"),
    ('"x"', "e.json: field $: expected a Gym result (a JSON object), found str"),
    # another file's object (a rows dump line, a summary): it used to be checked, rejected by the planner, and the
    # revision still read "compatible (exit 0)"
    ('{"a": 1}', "e.json: field $: expected a Gym result (a /run result with a `response` object, or a bare response "
                 "with `output`); this object has neither (keys: a)"),
])
def test_load_payloads_refuses_a_file_that_holds_no_result(tmp_path: Path, content: str, message: str) -> None:
    """`--payloads` of `[]` reported "compatible (exit 0)" after validating nothing (CLI probe)."""
    (tmp_path / "e.json").write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_payloads([tmp_path / "e.json"])
    assert str(info.value).endswith(message)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no .json or .jsonl file to check"):
        load_payloads([empty])
