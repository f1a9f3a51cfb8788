"""Read a golden directory: check the manifest and every digest, then decode each scenario's expectation."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import ScenarioExpectation
from compactsim.harness.golden.codec import TrainerSettings, expectation_from_document
from compactsim.harness.golden.manifest import Manifest, check_files, read_manifest
from compactsim.harness.golden.schema import validator


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

    def payload_groups(self, step: int) -> list[list[dict[str, Any]]]:
        """Step `step`'s results per group, in the order the trainer receives them."""
        for data in self.document["steps"]:
            if data["step"] == step:
                return [_read_lines(self.directory / g["file"]) for g in data["payloads"]]
        raise ConfigError("invalid_argument", f"scenario {self.name!r} has no step {step} in the goldens")

    def payloads(self, step: int) -> list[dict[str, Any]]:
        """Step `step`'s results, every group in order (what one call of the trainer's batch step receives)."""
        return [r for group in self.payload_groups(step) for r in group]

    def scenario_data(self) -> dict[str, Any]:
        """``scenario.json``: the scenario definition the goldens came from."""
        return json.loads((self.directory / "scenario.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


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


def _read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _read_document(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    errors = sorted(validator("expectation").iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        where = "/".join(map(str, errors[0].absolute_path)) or "<root>"
        raise ConfigError("invalid_argument", f"{path}: not a valid golden expectation at {where}: {errors[0].message}")
    return data  # type: ignore[no-any-return]


def read_scenario(directory: Path) -> GoldenScenario:
    """One scenario directory of a golden set (its files are not digest-checked here; `read_golden` does that)."""
    document = _read_document(directory / "expectation.json")
    rows = {
        data["step"]: _read_lines(directory / data["rows"]["file"])
        for data in document["steps"] if data["rows"]["file"] is not None
    }
    return GoldenScenario(
        name=document["scenario"],
        directory=directory,
        expectation=expectation_from_document(document, rows),
        trainer=TrainerSettings.from_json(document["trainer"]),
        document=document,
        tolerances=dict(document["tolerances"]),
    )


def read_golden(directory: Path, scenarios: Sequence[str] | None = None) -> Golden:
    """The golden directory at `directory`, every file digest-checked; `scenarios` limits which are decoded."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    check_files(directory, manifest)
    wanted = [manifest.scenario(n).name for n in scenarios] if scenarios else [e.name for e in manifest.scenarios]
    loaded = []
    for name in wanted:
        entry = manifest.scenario(name)
        scenario = read_scenario(directory / entry.directory)
        if scenario.name != entry.name:
            raise ConfigError("invalid_argument", f"{directory / entry.directory}: expectation.json is for scenario "
                              f"{scenario.name!r}, the manifest lists {entry.name!r}")
        loaded.append(scenario)
    return Golden(directory=directory, manifest=manifest, scenarios=tuple(loaded))


__all__ = ["Golden", "GoldenScenario", "read_golden", "read_scenario"]
