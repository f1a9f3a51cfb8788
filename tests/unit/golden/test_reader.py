"""Reading a golden directory fast: compiled schema checks pass exactly what jsonschema passes, a valid golden
decodes to the same objects either way, and every forged file still fails with the validator's own typed error."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.audit.checks import Tolerances
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.json_input import InputError
from compactsim.harness.golden import manifest as manifest_module
from compactsim.harness.golden import schema as schema_module
from compactsim.harness.golden.codec import (
    PayloadGroup,
    TrainerSettings,
    expectation_document,
    json_document,
    json_lines,
    payload_file,
    step_row_lines,
)
from compactsim.harness.golden.manifest import MANIFEST, ScenarioEntry, build_manifest
from compactsim.harness.golden.reader import RESTATED_CONFIG, Golden, read_golden
from compactsim.harness.golden.schema import (
    SCHEMA_NAMES,
    UnsupportedSchema,
    compile_check,
    fast_check,
    first_error,
    load_schema,
    validator,
)
from tests.unit.golden.golden_builders import DIGEST_A, expectation, trainer

SCEN = "scenarios/toy"
EXPECTATION = f"{SCEN}/expectation.json"
ROWS = f"{SCEN}/rows/step-0000.jsonl"
PAYLOAD = f"{SCEN}/payloads/step-0000/group-0.jsonl"
SCENARIO = f"{SCEN}/scenario.json"
TOLERANCES = Tolerances.for_dtype("float64").rows_and_metrics()  # the trainer's precision's, as an export writes
PAYLOADS = [
    {"response": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}]}, "reward": 1.0,
     "responses_create_params": {"input": []}},
    {"response": {"output": []}, "reward": None, "instance_config": {}},
]


def golden_files() -> dict[str, bytes]:
    """A one-scenario, one-step golden: three real rows and one padding row, two payloads, its scenario."""
    exp = expectation()
    settings = trainer(dp_size=1, micro_batch_size=2)
    doc = expectation_document(exp, purpose="a toy", trainer=settings, tolerances=TOLERANCES,
                               payloads=[[PayloadGroup(0, payload_file(0, 0), len(PAYLOADS))]])
    return {
        EXPECTATION: json_document(doc),
        ROWS: json_lines(step_row_lines("toy", exp.steps[0], settings)),
        PAYLOAD: json_lines(PAYLOADS),
        SCENARIO: json_document({"name": "toy", "purpose": "a toy", "seed": 7, "tags": ["t"]}),
    }


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    files = golden_files()
    out = tmp_path / "g"
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    entry = ScenarioEntry(name="toy", purpose="a toy", tags=("t",), seed=7, verdict="success", error=None, steps=1,
                          contract_flavours=("gym-0.7.0-transport",))
    m = build_manifest(files, [entry], seed=7, max_steps=None, selection=["toy"], version="0")
    (out / MANIFEST).write_bytes(m.encode())
    return out


def rehash(golden: Path) -> None:
    """Update every listed file's size and digest to what is on disk now (what a forger would do)."""
    data = json.loads((golden / MANIFEST).read_text())
    for f in data["files"]:
        raw = (golden / f["path"]).read_bytes()
        f["sha256"], f["bytes"] = hashlib.sha256(raw).hexdigest(), len(raw)
    (golden / MANIFEST).write_text(json.dumps(data, indent=2))


def decoded(golden: Golden) -> list[Any]:
    """Everything a reader gets from a golden, as text that shows every value and its type."""
    out: list[Any] = [repr(golden.manifest)]
    for s in golden.scenarios:
        out += [s.name, str(s.directory), repr(s.expectation), repr(s.trainer), repr(s.document), repr(s.tolerances),
                repr([[r.to_json() for r in step.rows] for step in s.expectation.steps]),
                repr(s.payload_groups(0)), repr(s.scenario_data())]
    return out


def read_everything(golden: Path) -> list[Any]:
    return decoded(read_golden(golden))


# ------------------------------------------------------------------------------------- valid goldens


def test_every_schema_compiles_so_valid_documents_skip_jsonschema():
    assert [n for n in SCHEMA_NAMES if fast_check(n) is None] == []


def test_a_valid_golden_reads_without_running_jsonschema(golden: Path, monkeypatch: pytest.MonkeyPatch):
    def no_validator(name: str) -> Any:
        raise AssertionError(f"jsonschema ran on a valid {name}")

    monkeypatch.setattr(schema_module, "validator", no_validator)
    assert len(read_everything(golden)) == 10


def test_a_valid_golden_reads_the_same_objects_as_with_jsonschema_alone(golden: Path, monkeypatch: pytest.MonkeyPatch):
    fast = read_everything(golden)
    monkeypatch.setattr(schema_module, "fast_check", lambda name: None)
    assert read_everything(golden) == fast


def test_each_file_is_read_and_hashed_once(golden: Path, monkeypatch: pytest.MonkeyPatch):
    hashed: list[int] = []
    real = manifest_module.sha256_hex
    monkeypatch.setattr(manifest_module, "sha256_hex", lambda data: hashed.append(len(data)) or real(data))
    read_golden(golden)
    assert sorted(hashed) == sorted(len(b) for b in golden_files().values())


def test_files_read_after_read_golden_are_checked_on_disk_again(golden: Path):
    g = read_golden(golden)
    (golden / PAYLOAD).write_bytes((golden / PAYLOAD).read_bytes().replace(b"hi", b"yo"))
    with pytest.raises(InputError, match="sha256 .* differs from the manifest's"):
        g.scenarios[0].payload_groups(0)
    (golden / EXPECTATION).write_text("{}")  # decoded already: a later read of the golden refuses it
    with pytest.raises(ConfigError, match="golden file\\(s\\) differ from manifest.json"):
        read_golden(golden)


# ----------------------------------------------------------------------------------- forged goldens

Edit = Callable[[Any], Any]


def _line(k: int, edit: Callable[[dict[str, Any]], None]) -> Callable[[list[Any]], list[Any]]:
    def apply(lines: list[Any]) -> list[Any]:
        edit(lines[k])
        return lines
    return apply


def _set(*path: Any, value: Any) -> Callable[[Any], None]:
    def apply(doc: Any) -> None:
        for part in path[:-1]:
            doc = doc[part]
        doc[path[-1]] = value
    return apply


def _replace_line(k: int, value: Any) -> Callable[[list[Any]], list[Any]]:
    def apply(lines: list[Any]) -> list[Any]:
        lines[k] = value
        return lines
    return apply


#: case -> (file, edit of its parsed content (JSON lines: the list of lines), line, field, message fragment)
FORGED: dict[str, tuple[str, Edit, int | None, str, str]] = {
    "rows_missing_field": (ROWS, _line(0, lambda r: r.pop("parent_index")), 1, "<root>",
                           "'parent_index' is a required property"),
    "rows_extra_field": (ROWS, _line(1, _set("token_mask", value=[])), 2, "<root>", "Additional properties"),
    "rows_not_an_object": (ROWS, _replace_line(2, [1]), 3, "<root>", "is not of type 'object'"),
    "rows_token_string": (ROWS, _line(0, _set("input_ids", 3, value="7")), 1, "input_ids/3",
                          "is not of type 'integer'"),
    "rows_token_bool": (ROWS, _line(1, _set("input_ids", 0, value=True)), 2, "input_ids/0", "is not of type 'integer'"),
    "rows_token_fraction": (ROWS, _line(0, _set("input_ids", 4, value=1.5)), 1, "input_ids/4",
                            "is not of type 'integer'"),
    "rows_token_negative": (ROWS, _line(2, _set("input_ids", 1, value=-3)), 3, "input_ids/1",
                            "-3 is less than the minimum of 0"),
    "rows_logprob_string": (ROWS, _line(0, _set("generation_logprobs", 2, value="-0.5")), 1, "generation_logprobs/2",
                            "is not of type 'number'"),
    "rows_advantage_null": (ROWS, _line(0, _set("advantages", 0, value=None)), 1, "advantages/0",
                            "None is not of type 'number'"),
    "rows_span_one_end": (ROWS, _line(0, _set("mask_spans", 0, value=[2])), 1, "mask_spans/0", "is too short"),
    "rows_span_negative": (ROWS, _line(1, _set("mask_spans", 1, 0, value=-1)), 2, "mask_spans/1/0",
                           "less than the minimum"),
    "rows_span_outside": (ROWS, _line(0, _set("mask_spans", value=[[0, 99]])), 1, "mask_spans/0",
                          "span [0, 99) is not inside the row's 5 positions"),
    "rows_digest_upper": (ROWS, _line(0, _set("pixel_digests", 0, value=DIGEST_A.upper())), 1, "pixel_digests/0",
                          "does not match"),
    # Python's `$` also matches before a final newline; the exact length refuses it in both validators
    "rows_digest_newline": (ROWS, _line(0, _set("pixel_digests", 0, value=DIGEST_A + "\n")), 1, "pixel_digests/0",
                            "is too long"),
    "rows_media_number": (ROWS, _line(1, _set("media_ids", 1, value=2)), 2, "media_ids/1", "is not of type 'string'"),
    "rows_sample_mask_2": (ROWS, _line(0, _set("sample_mask", value=2.0)), 1, "sample_mask",
                           "2.0 is greater than the maximum of 1"),
    "rows_route_float": (ROWS, _line(0, _set("routed_experts_sentinel_positions", 0, value=4.5)), 1,
                         "routed_experts_sentinel_positions/0", "is not of type 'integer'"),
    "rows_route_below_sentinel": (ROWS, _line(0, _set("routed_experts", value=[[[0, 1]]] * 4 + [[[0, -2]]])), 1,
                                  "routed_experts/4/0/1", "-2 is less than the minimum of -1"),
    "rows_routes_ragged": (ROWS, _line(0, _set("routed_experts", value=[[[0, 1]]] * 4 + [[[0]]])), 1,
                           "routed_experts/4", "has [layers, topk] [1, 1]; position 0 has [1, 2]"),
    "rows_routes_one_short": (ROWS, _line(1, _set("routed_experts", value=[[[0, 1]]] * 5)), 2, "routed_experts",
                              "has 5 entries; input_ids has 6 (one per token)"),
    "rows_real_without_trace": (ROWS, _line(0, _set("physical_trace_id", value=None)), 1, "physical_trace_id",
                                "None is not of type 'string'"),
    "rows_padding_with_tokens": (ROWS, _line(3, _set("input_ids", value=[1])), 4, "input_ids",
                                 "[1] is expected to be empty"),
    "rows_step_bool": (ROWS, _line(0, _set("step", value=False)), 1, "step", "False is not of type 'integer'"),
    "payload_no_output": (PAYLOAD, _line(0, _set("response", value={})), 1, "response",
                          "'output' is a required property"),
    "payload_output_object": (PAYLOAD, _line(1, _set("response", "output", value={})), 2, "response/output",
                              "is not of type 'array'"),
    "payload_reward_text": (PAYLOAD, _line(1, _set("reward", value="1")), 2, "reward",
                            "is not of type 'number', 'null'"),
    "payload_not_an_object": (PAYLOAD, _replace_line(0, "x"), 1, "<root>", "'x' is not of type 'object'"),
    "expect_precision": (EXPECTATION, _set("trainer", "precision", value="float16"), None, "trainer/precision",
                         "'float16' is not one of"),
    "expect_rows_real": (EXPECTATION, _set("steps", 0, "rows", "real", value=-1), None, "steps/0/rows/real",
                         "less than the minimum of 0"),
    "expect_error_shape": (EXPECTATION, _set("error", value={"code": "x"}), None, "error",
                           "is not valid under any of the given schemas"),
    "expect_rollout_path": (EXPECTATION, _set("steps", 0, "rollouts", 1, "path", value="both"), None,
                            "steps/0/rollouts/1/path", "'both' is not one of"),
    "expect_trace_turn": (EXPECTATION, _set("steps", 0, "rollouts", 0, "physical_traces", 1, "turn_ids", 1, value="3"),
                          None, "steps/0/rollouts/0/physical_traces/1/turn_ids/1", "is not of type 'integer'"),
    "expect_extra_field": (EXPECTATION, _set("verdict_v2", value=1), None, "<root>", "Additional properties"),
    "expect_missing_steps": (EXPECTATION, lambda d: d.pop("steps"), None, "<root>", "'steps' is a required property"),
    # a restated trainer field left out (fuzzed: a KeyError traceback and exit 1, "findings")
    "expect_missing_restated": (EXPECTATION, lambda d: d["trainer"].pop("make_sequence_length_divisible_by"), None,
                                "trainer", "'make_sequence_length_divisible_by' is a required property"),
    "scenario_seed": (SCENARIO, _set("seed", value=-1), None, "seed", "-1 is less than the minimum of 0"),
    "scenario_tag": (SCENARIO, _set("tags", 0, value=1), None, "tags/0", "1 is not of type 'string'"),
}


def forge(golden: Path, path: str, edit: Edit) -> None:
    text = (golden / path).read_text()
    if path.endswith(".jsonl"):
        lines = edit([json.loads(x) for x in text.splitlines()])
        (golden / path).write_bytes(json_lines(lines))
    else:
        doc = json.loads(text)
        edit(doc)
        (golden / path).write_bytes(json_document(doc))
    rehash(golden)


def refusal(golden: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_everything(golden)
    return info.value


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_forged_golden_file_is_one_typed_error_naming_file_line_and_field(case: str, golden: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    path, edit, line, field, fragment = FORGED[case]
    forge(golden, path, edit)
    error = refusal(golden)
    assert isinstance(error, InputError), error
    assert (error.source, error.line, error.field) == (str(golden / path), line, field)
    assert fragment in error.problem, error.problem
    monkeypatch.setattr(schema_module, "fast_check", lambda name: None)
    slow = refusal(golden)
    assert (type(slow), str(slow)) == (type(error), str(error))  # the very message jsonschema alone gave


@pytest.mark.parametrize(("edit", "where"), [
    (lambda m: m["files"][0].update(sha256="xyz"), "files/0/sha256"),
    (lambda m: m["files"][1].update(bytes=-1), "files/1/bytes"),
    (lambda m: m["files"][2].update(schema="rows"), "files/2/schema"),
    (lambda m: m["scenarios"][0].update(error={"code": ""}), "scenarios/0/error"),
    (lambda m: m.update(format="other"), "format"),
    (lambda m: m["gym"].pop("producer"), "gym"),
])
def test_a_forged_manifest_names_the_field_as_jsonschema_does(golden: Path, edit: Callable[[Any], None], where: str,
                                                              monkeypatch: pytest.MonkeyPatch):
    data = json.loads((golden / MANIFEST).read_text())
    edit(data)
    (golden / MANIFEST).write_text(json.dumps(data))
    error = refusal(golden)
    assert f"not a valid golden manifest at {where}: " in str(error)
    monkeypatch.setattr(schema_module, "fast_check", lambda name: None)
    slow = refusal(golden)
    assert (type(slow), str(slow)) == (type(error), str(error))


# ------------------------------------------------------------- the compiled checks equal jsonschema


def _valid_documents() -> dict[str, list[Any]]:
    files = golden_files()
    return {
        "expectation": [json.loads(files[EXPECTATION])],
        "expected-rows": [json.loads(x) for x in files[ROWS].splitlines()],
        "payload": [json.loads(x) for x in files[PAYLOAD].splitlines()],
        "scenario": [json.loads(files[SCENARIO])],
        "manifest": [json.loads(build_manifest(files, [], seed=None, max_steps=2, selection=[], version="0").encode())],
    }


#: Values swapped in: every JSON type, integral floats, booleans, bounds, near-miss strings and arrays.
ODD: list[Any] = [None, True, False, 0, 1, -1, 1.0, 0.0, -0.0, 1.5, -1.5, 2.0, 10**19, "", "x", "success", "single",
                  "float64", DIGEST_A, DIGEST_A + "\n", DIGEST_A.upper(), [], [0], [0, 1], [2, 1, 0], [0.0, 1.0],
                  ["a", "a"], [True], [[0, 1]], {}, {"code": "c", "rollout_id": None, "turn_id": None}, {"output": []}]


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in list(enumerate(value))[:3] + list(enumerate(value))[-2:]:
            out += _places(v, (*path, i))
    return out


def _mutate(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice((1, 1, 2, 3))):
        path = rng.choice(_places(doc))
        if not path:
            return copy.deepcopy(rng.choice(ODD))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = rng.random()
        if action < 0.75:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD))
        elif isinstance(parent, dict):
            if action < 0.9:
                del parent[path[-1]]
            else:
                parent[f"extra{rng.randrange(3)}"] = 1
        else:
            parent.append(copy.deepcopy(rng.choice(ODD)))
    return doc


@pytest.mark.parametrize("name", ["expectation", "expected-rows", "payload", "scenario", "manifest"])
def test_compiled_check_agrees_with_jsonschema_on_valid_and_mutated_documents(name: str):
    check, v = fast_check(name), validator(name)
    assert check is not None
    docs = _valid_documents()[name]
    assert all(check(d) and v.is_valid(d) for d in docs)
    rng = random.Random(f"golden-{name}")
    disagree = []
    for _ in range(400):
        doc = _mutate(rng.choice(docs), rng)
        if check(doc) != v.is_valid(doc):
            disagree.append(doc)
    assert disagree == []


@pytest.mark.parametrize(("schema", "value"), [
    ({"type": "integer"}, 3.0),  # Draft 2020-12: an integral float is an integer
    ({"type": "integer"}, True),
    ({"type": "number"}, False),
    ({"type": "array", "items": {"type": "integer", "minimum": 0}}, [0, 2.0, 3]),
    ({"type": "array", "items": {"type": "integer", "minimum": 0}}, [0, -1.0]),
    ({"type": "array", "items": {"type": "integer", "maximum": 5}}, [5, 6]),
    ({"type": "array", "items": {"type": "number"}}, [1, 2.5, True]),
    ({"type": "array", "items": {"type": "number", "minimum": 0}}, [float("nan"), 1.0]),
    ({"type": "array", "items": {"type": "number", "minimum": 0}}, [float("nan"), -1.0]),
    ({"type": "array", "items": {"type": "string", "pattern": "^[0-9a-f]{2}$"}}, ["ab", "cd\n"]),  # re.search: $
    ({"type": "array", "items": {"type": "string", "minLength": 1}}, ["a", ""]),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, ["a", "b", "a"]),
    ({"type": "array", "uniqueItems": True}, [1, True]),
    ({"type": "array", "uniqueItems": True}, [1, 1.0]),
    ({"enum": ["a", None]}, None),
    ({"enum": [0, 1]}, False),
    ({"enum": [0, 1]}, 1.0),
    ({"const": True}, 1),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1.5),
    ({"if": {"properties": {"a": {"minimum": 0}}}, "then": {"required": ["b"]}, "else": {"required": ["c"]}}, {"a": 1}),
    ({"if": {"properties": {"a": {"minimum": 0}}}, "then": {"required": ["b"]}, "else": {"required": ["c"]}},
     {"a": -1, "c": 0}),
    ({"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}}, {"a": "x", "b": 1.0}),
    ({"properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x", "b": 1}),
    ({"not": {"required": ["a"]}}, {"a": 1}),
    ({"anyOf": [{"minimum": 5}, {"type": "string"}]}, 4),
    ({"$defs": {"n": {"type": ["integer", "null"]}}, "items": {"$ref": "#/$defs/n"}}, [None, 1, "x"]),
    ({"$defs": {"tree": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}, "$ref": "#/$defs/tree"}, [[[]], [[1]]]),
    ({"minimum": 1, "exclusiveMaximum": 3}, 3),
    ({"exclusiveMinimum": 1, "maximum": 3}, 1),
    ({"minItems": 2, "maxItems": 2}, "not an array"),
])
def test_compiled_check_keeps_jsonschema_semantics(schema: dict[str, Any], value: Any):
    from jsonschema import Draft202012Validator

    assert compile_check(schema)(value) == Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize("schema", [
    {"patternProperties": {"^a": {}}},
    {"prefixItems": [{}]},
    {"$ref": "https://example.invalid/s.json"},
    {"properties": {"a": {"$id": "x"}}},
    {"enum": [[1]]},
    {"type": "decimal"},
])
def test_a_keyword_that_is_not_compiled_leaves_the_schema_to_jsonschema(schema: dict[str, Any]):
    with pytest.raises(UnsupportedSchema):
        compile_check(schema)


def test_first_error_is_the_first_jsonschema_error_in_path_order():
    row = json.loads(golden_files()[ROWS].splitlines()[0])
    assert first_error("expected-rows", row) is None
    row["input_ids"][3], row["advantages"][0] = "7", "x"
    error = first_error("expected-rows", row)
    assert error is not None and list(error.absolute_path) == ["advantages", 0]
    assert load_schema("expected-rows")["properties"]["input_ids"]["items"] == {"type": "integer", "minimum": 0}


@pytest.mark.parametrize(("args", "says"), [
    ((None,), "golden directory None: expected a path"),
    (("goldens", "no-compaction"), "scenarios='no-compaction': expected a list of scenario names"),
    (("goldens", [3]), "scenarios=[3]: expected a list of scenario names"),
])
def test_read_golden_refuses_arguments_of_the_wrong_type_before_reading(args, says):
    """A bare string of names used to be read character by character ("no scenario 'n'")."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        read_golden(*args)


def test_every_trainer_field_but_the_config_is_checked_against_the_config():
    """A `TrainerSettings` field left out of `RESTATED_CONFIG` would never be compared with `trainer.config`."""
    assert set(RESTATED_CONFIG) == {f.name for f in dataclasses.fields(TrainerSettings)} - {"config"}


@pytest.mark.parametrize(("edit", "field", "says"), [
    (_line(0, _set("scenario", value="another")), "steps[0].rows line 1", "names scenario 'another', not 'toy'"),
    (_line(1, _set("advantages", value=[])), "steps[0].rows line 2", "advantages holds 0 values for"),
    (_line(0, lambda r: r["generation_logprobs"].append(0.0)), "steps[0].rows line 1", "generation_logprobs holds"),
    (_line(2, _set("parent_index", value=77)), "steps[0].rows line 3", "parent_index 77 is not rollout"),
    (_line(0, _set("parent_index", value=1)), "steps[0].rows line 1", "parent_index 1 is not rollout"),
])
def test_a_rows_file_that_disagrees_with_its_own_step_is_refused_after_a_rehash(golden: Path, edit, field, says):
    """Re-hashed edits that no schema can see used to verify clean: a row of another scenario, a per-token list of
    another length, a parent index outside the step's rollouts or naming another rollout."""
    forge(golden, ROWS, edit)
    error = refusal(golden)
    assert isinstance(error, InputError) and (error.source, error.field) == (str(golden / EXPECTATION), field), error
    assert says in error.problem and "the golden files are inconsistent" in error.problem, error.problem


@pytest.mark.parametrize(("edit", "field", "says"), [
    (_set("tolerances", "logprob_rtol", value=1.0), "tolerances/logprob_rtol",
     "1.0 is looser than the audit's float64 tolerance 1e-12"),
    (_set("tolerances", "metric_atol", value=2e-9), "tolerances/metric_atol",
     "2e-09 is looser than the audit's float64 tolerance 1e-09"),
])
def test_tolerances_looser_than_the_precisions_are_refused_after_a_rehash(golden: Path, edit, field, says):
    """`verify` applies the goldens' tolerances; an `rtol` of 1 (digests recomputed) let any dump pass."""
    forge(golden, EXPECTATION, edit)
    error = refusal(golden)
    assert isinstance(error, InputError) and (error.source, error.field) == (str(golden / EXPECTATION), field), error
    assert says in error.problem and "verify --dtype" in error.problem, error.problem


def test_a_boolean_seed_in_the_trainer_config_is_refused_after_a_rehash(golden: Path):
    """Pydantic's lax mode read `grpo.seed: true` as 1 (`NoBooleanNumbers`)."""
    forge(golden, EXPECTATION, _set("trainer", "config", "grpo", "seed", value=True))
    error = refusal(golden)
    assert isinstance(error, InputError) and error.field == "trainer/config", error
    assert "a boolean where a number is expected" in error.problem, error.problem


def test_tighter_tolerances_are_kept(golden: Path):
    """A tighter tolerance only makes `verify` stricter (a golden written with zero tolerances reads)."""
    forge(golden, EXPECTATION, _set("tolerances", "metric_rtol", value=0.0))
    assert read_golden(golden).get("toy").tolerances["metric_rtol"] == 0.0
