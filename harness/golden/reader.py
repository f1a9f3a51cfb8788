"""Read a golden directory: check the manifest and every digest, then decode each scenario's expectation.

Every file is read through `GoldenFiles` (listed in the manifest, inside the directory, regular,
size-capped, digest-checked) and parsed under the input limits of
`compactsim.harness.core.json_input`; each document and row line is checked against its schema
before it is decoded, so a malformed golden is one typed error naming the file, line and field
(exit 2), never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import CompactsimError, ConfigError
from compactsim.harness.core.expectations import ScenarioExpectation
from compactsim.harness.core.json_input import InputError
from compactsim.harness.golden.codec import TrainerSettings, expectation_from_document
from compactsim.harness.golden.manifest import (
    GoldenFiles,
    Manifest,
    ScenarioEntry,
    check_files,
    check_relative_path,
    read_manifest,
)
from compactsim.harness.golden.routes_field import RoutesFieldError, parse_routes
from compactsim.harness.golden.schema import first_error


@dataclass(frozen=True, slots=True, eq=False)
class GoldenScenario:
    """One exported scenario: the oracle's expectation and where its payloads lie."""

    name: str
    #: The scenario's directory (``<golden>/scenarios/<name>``).
    directory: Path
    expectation: ScenarioExpectation
    trainer: TrainerSettings
    #: ``expectation.json`` as written (payload file lists, padding counts, parent indices).
    document: Mapping[str, Any]
    #: The audit's float tolerances the goldens were exported with (`compactsim.harness.audit.Tolerances` fields).
    tolerances: Mapping[str, float] | None = None
    #: The checked files it was read from (None for a scenario built in memory: it has no files to read).
    files: GoldenFiles | None = None

    def _files(self) -> GoldenFiles:
        if self.files is None:
            raise ConfigError("invalid_argument", f"scenario {self.name!r} was not read from a golden directory")
        return self.files

    def payload_groups(self, step: int) -> list[list[dict[str, Any]]]:
        """Step `step`'s results per group, in the order the trainer receives them."""
        files = self._files()
        base = self.directory.relative_to(files.directory).as_posix()
        for k, data in enumerate(self.document["steps"]):
            if data["step"] == step:
                return [_read_lines(files, _scenario_path(files, base, g["file"], f"steps[{k}].payloads[{j}].file"),
                                    "payload")
                        for j, g in enumerate(data["payloads"])]
        raise ConfigError("invalid_argument", f"scenario {self.name!r} has no step {step} in the goldens")

    def payloads(self, step: int) -> list[dict[str, Any]]:
        """Step `step`'s results, every group in order (what one call of the trainer's batch step receives)."""
        return [r for group in self.payload_groups(step) for r in group]

    def scenario_data(self) -> dict[str, Any]:
        """``scenario.json``: the scenario definition the goldens came from."""
        files = self._files()
        path = f"{self.directory.relative_to(files.directory).as_posix()}/scenario.json"
        return _checked(files, path, None, files.load_json(path), "scenario", "scenario")


@dataclass(frozen=True, slots=True, eq=False)
class Golden:
    """A checked golden directory."""

    directory: Path
    manifest: Manifest
    scenarios: tuple[GoldenScenario, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scenarios)

    def get(self, name: str) -> GoldenScenario:
        for s in self.scenarios:
            if s.name == name:
                return s
        self.manifest.scenario(name)  # raises naming what there is
        raise ConfigError("invalid_argument", f"scenario {name!r} was not loaded from {self.directory}")


def _scenario_path(files: GoldenFiles, base: str, ref: Any, field: str) -> str:
    """The manifest path of a file ``expectation.json`` names relative to its scenario directory `base`."""
    return f"{base}/{check_relative_path(ref, files.source(f'{base}/expectation.json'), field)}"


def _checked(files: GoldenFiles, path: str, line: int | None, data: Any, schema: str, what: str) -> Any:
    """`data` when it matches `schema`; else an `InputError` naming the file, line and field of the first problem.

    `first_error` passes a valid value with the schema's compiled predicate; jsonschema explains a refused one.
    """
    error = first_error(schema, data)
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "<root>"
        raise InputError(files.source(path), line, where, f"not a valid golden {what}: {error.message}")
    return data


def _read_lines(files: GoldenFiles, path: str, schema: str) -> list[dict[str, Any]]:
    """Every line of a golden JSON-lines file, each checked against `schema` (its decoder then cannot fail)."""
    what = "expected row" if schema == "expected-rows" else schema
    lines = []
    for n, value in files.load_json_lines(path):
        lines.append(_checked(files, path, n, value, schema, what))
        if schema == "expected-rows":
            _check_spans(files, path, n, value)
            _check_routes(files, path, n, value)
    return lines


def _check_routes(files: GoldenFiles, path: str, line: int, row: dict[str, Any]) -> None:
    """The row's routes (when it has them) are one [layers][topk] per token: what the schema cannot relate.

    The decoded array replaces the lists in `row`, so the codec does not decode them a second time.
    """
    if row.get("routed_experts") is None:
        return
    try:
        row["routed_experts"] = parse_routes(row["routed_experts"], len(row["input_ids"]))
    except RoutesFieldError as exc:
        where = exc.field.replace("][", "/").replace("[", "/").replace("]", "")  # this reader's path style
        raise InputError(files.source(path), line, where, exc.problem) from None


def _check_spans(files: GoldenFiles, path: str, line: int, row: Mapping[str, Any]) -> None:
    """Each mask span lies inside the row: the decoder indexes the logprobs by every position of every span.

    Why: the schema cannot relate one field to another, and a span of 10**19 positions would
    exhaust memory in the decoder instead of being refused.
    """
    size = min(len(row["input_ids"]), len(row["generation_logprobs"]))
    for k, (start, end) in enumerate(row["mask_spans"]):
        if not start <= end <= size:
            raise InputError(files.source(path), line, f"mask_spans/{k}",
                             f"span [{start}, {end}) is not inside the row's {size} positions")


def _check_consistent(source: str, document: Mapping[str, Any], rows: Mapping[int, list[dict[str, Any]]],
                      entry: ScenarioEntry | None) -> None:
    """What the schemas cannot say: the expectation agrees with itself, its rows files and the manifest entry.

    A golden edited by hand (and its digests recomputed) could otherwise renumber a step so that no
    dump row is ever audited, or keep rows for a step that must be refused, and still verify clean.
    """
    def bad(field: str, problem: str) -> InputError:
        return InputError(source, None, field, f"{problem}; the golden files are inconsistent (export them again)")

    steps = document["steps"]
    for k, step in enumerate(steps):
        if step["step"] != k:
            raise bad(f"steps[{k}].step", f"{step['step']}: steps are numbered 0, 1, 2, ... in file order")
        if step.get("error") is not None:
            if k != len(steps) - 1:
                raise bad(f"steps[{k}].error", "a refused step ends the scenario, but a later step follows it")
            if step["rows"]["file"] is not None:
                raise bad(f"steps[{k}].rows.file", "a refused step trains no row, but names a rows file")
        lines = rows.get(k, [])
        real = [r["physical_trace_id"] for r in lines if r["parent_index"] >= 0]
        if (len(real), len(lines) - len(real)) != (step["rows"]["real"], step["rows"]["padding"]):
            raise bad(f"steps[{k}].rows", f"says {step['rows']['real']} real and {step['rows']['padding']} padding "
                                          f"rows; its rows file holds {len(real)} and {len(lines) - len(real)}")
        if len(set(real)) != len(real):
            twice = sorted({t for t in real if real.count(t) > 1})
            raise bad(f"steps[{k}].rows", f"its rows file lists physical trace(s) {twice[:3]} more than once")
        rollouts = [r["rollout_id"] for r in step["rollouts"]]
        for n, line in enumerate(lines):
            where = f"steps[{k}].rows line {n + 1}"
            if line["scenario"] != document["scenario"]:
                raise bad(where, f"names scenario {line['scenario']!r}, not {document['scenario']!r}")
            tokens = len(line["input_ids"])
            short = [f for f in ("generation_logprobs", "advantages") if len(line[f]) != tokens]
            if short:
                raise bad(where, f"{short[0]} holds {len(line[short[0]])} values for {tokens} tokens")
            parent = line["parent_index"]
            if parent >= 0 and (parent >= len(rollouts) or rollouts[parent] != line["logical_rollout_id"]):
                raise bad(where, f"parent_index {parent} is not rollout {line['logical_rollout_id']!r}'s place in "
                                 f"the step's canonical order {rollouts[:8]}")
    last = steps[-1].get("error") if steps else None
    if (document["verdict"] == "error") != (last is not None) or document["error"] != last:
        raise bad("verdict", f"{document['verdict']!r} with error {document['error']} disagrees with the last step's "
                             f"error {last}")
    if entry is not None and (entry.verdict, entry.steps, entry.error) != (document["verdict"], len(steps), document["error"]):
        raise bad("verdict", f"the manifest lists verdict {entry.verdict!r}, {entry.steps} step(s), error {entry.error}; "
                             f"expectation.json has {document['verdict']!r}, {len(steps)}, {document['error']}")


#: Each `trainer` field and the `trainer.config` key (NeMo-RL names) it restates.
RESTATED_CONFIG: dict[str, tuple[str, ...]] = {
    "num_generations_per_prompt": ("grpo", "num_generations_per_prompt"),
    "leave_one_out": ("grpo", "use_leave_one_out_baseline"),
    "normalize": ("grpo", "normalize_rewards"),
    "clip_low": ("grpo", "advantage_clip_low"),
    "clip_high": ("grpo", "advantage_clip_high"),
    "dp_size": ("policy", "dp_size"),
    "micro_batch_size": ("policy", "train_micro_batch_size"),
    "async_mode": ("grpo", "async_grpo", "enabled"),
    "importance_sampling_correction": ("loss_fn", "use_importance_sampling_correction"),
    "router_replay": ("policy", "router_replay_enabled"),
    "max_total_sequence_length": ("policy", "max_total_sequence_length"),
    "make_sequence_length_divisible_by": ("policy", "make_sequence_length_divisible_by"),
    "precision": ("policy", "precision"),
}


def _check_trainer(source: str, trainer: Mapping[str, Any]) -> None:
    """`trainer.config` is a trainer configuration the physical-trace path accepts, and every other
    `trainer` field states what it says.

    Why: `verify` (and a trainer following the spec) reads the fields, a trainer configured from the
    full config reads `config`; a golden edited in one place and not the other (digests recomputed)
    would tell the two different things, and the rows could only match one of them.
    """
    from compactsim.harness.pipeline.train_config import validate_physical_trace_training_config

    def bad(field: str, problem: str) -> InputError:
        return InputError(source, None, field, f"{problem}; the golden files are inconsistent (export them again)")

    try:
        config = validate_physical_trace_training_config(trainer["config"]).model_dump(mode="json")
    except ConfigError as exc:
        problems = "; ".join(exc.violations[:3]) + ("; ..." if len(exc.violations) > 3 else "")
        raise bad("trainer/config", f"not a trainer configuration the physical-trace path accepts: "
                                    f"{problems or exc.detail}") from None
    for field, path in RESTATED_CONFIG.items():
        value: Any = config
        for key in path:
            value = value[key]
        stated = trainer[field]  # present: the expectation schema requires every restated field
        if stated != value or isinstance(stated, bool) != isinstance(value, bool):
            raise bad(f"trainer/{field}", f"{stated!r}, but trainer.config.{'.'.join(path)} is {value!r}")


def _check_tolerances(source: str, document: Mapping[str, Any]) -> None:
    """No `tolerances` entry is looser than the audit's for the trainer's precision (golden spec: `expectation.json`).

    Why: `verify` applies them unless `--dtype` chooses others; a golden edited to `rtol: 1` (digests
    recomputed) would otherwise let every dump pass while its manifest still looks like an export. A
    tighter tolerance only makes `verify` stricter, so it is left to whoever wrote it.
    """
    from compactsim.harness.audit.checks import Tolerances

    precision = document["trainer"]["precision"]
    for key, limit in Tolerances.for_dtype(precision).rows_and_metrics().items():
        stated = document["tolerances"][key]  # present: the expectation schema requires every key
        if stated > limit:
            raise InputError(source, None, f"tolerances/{key}",
                             f"{stated!r} is looser than the audit's {precision} tolerance {limit!r}; the golden "
                             f"files are inconsistent (export them again, or choose tolerances with `verify --dtype`)")


def read_scenario(files: GoldenFiles, name: str, entry: ScenarioEntry | None = None) -> GoldenScenario:
    """Scenario `name` of a checked golden directory, every file it reads listed in the manifest."""
    base = f"scenarios/{name}"
    path = f"{base}/expectation.json"
    document = _checked(files, path, None, files.load_json(path), "expectation", "expectation")
    rows = {
        data["step"]: _read_lines(files, _scenario_path(files, base, data["rows"]["file"], f"steps[{k}].rows.file"),
                                  "expected-rows")
        for k, data in enumerate(document["steps"]) if data["rows"]["file"] is not None
    }
    _check_consistent(files.source(path), document, rows, entry)
    _check_trainer(files.source(path), document["trainer"])
    _check_tolerances(files.source(path), document)
    try:
        expectation = expectation_from_document(document, rows)
        trainer = TrainerSettings.from_json(document["trainer"])
    except CompactsimError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # belt and braces: what the schemas cannot say
        raise InputError(files.source(path), None, None, f"cannot be decoded with its rows: "
                                                          f"{type(exc).__name__}: {exc}") from None
    return GoldenScenario(
        name=document["scenario"],
        directory=files.directory / base,
        expectation=expectation,
        trainer=trainer,
        document=document,
        tolerances=dict(document["tolerances"]),
        files=files,
    )


def read_golden(directory: Path, scenarios: Sequence[str] | None = None) -> Golden:
    """The golden directory at `directory`, every file digest-checked; `scenarios` limits which are decoded."""
    if not isinstance(directory, (str, Path)):
        raise ConfigError("invalid_argument", f"golden directory {directory!r}: expected a path")
    if scenarios is not None and (isinstance(scenarios, str) or not all(isinstance(n, str) for n in scenarios)):
        raise ConfigError("invalid_argument", f"scenarios={scenarios!r}: expected a list of scenario names")
    if scenarios:
        scenarios = list(dict.fromkeys(scenarios))  # `--scenario X --scenario X` checks X once, as `run X X` runs it once
    directory = Path(directory)
    manifest = read_manifest(directory)
    files = GoldenFiles(directory, manifest)
    # the files decoded below are read and hashed once, by the check of every file
    decoded = {f"scenarios/{n}/" for n in scenarios} if scenarios else {f"{e.directory}/" for e in manifest.scenarios}
    keep = {f.path for f in manifest.files if f.schema in ("expectation", "expected-rows")
            and f.path[:f.path.find("/", len("scenarios/")) + 1] in decoded}
    check_files(directory, manifest, files=files, keep=keep)
    wanted = [manifest.scenario(n).name for n in scenarios] if scenarios else [e.name for e in manifest.scenarios]
    loaded = []
    try:
        for name in wanted:
            entry = manifest.scenario(name)
            scenario = read_scenario(files, entry.name, entry)
            if scenario.name != entry.name:
                raise ConfigError("invalid_argument", f"{directory / entry.directory}: expectation.json is for "
                                  f"scenario {scenario.name!r}, the manifest lists {entry.name!r}")
            loaded.append(scenario)
    finally:
        files.release()  # a later read (payloads, scenario.json) checks its file on disk again
    return Golden(directory=directory, manifest=manifest, scenarios=tuple(loaded))


__all__ = ["RESTATED_CONFIG", "Golden", "GoldenScenario", "read_golden", "read_scenario"]
