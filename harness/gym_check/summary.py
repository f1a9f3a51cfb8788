"""The Gym revision and contract flavour a run summary records (`summary.json` → `gym`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compactsim.harness.gym_check.report import GymCheckReport


def gym_summary_record(
    source: GymCheckReport | Path | None = None, *, flavour: str | None = None, producer: str = "compactsim-emitter"
) -> dict[str, Any]:
    """What produced a run's evidence: the checked revision (if any) and the flavour emitted.

    `source` is a gym-check report or the path of a `gym-check.json`; without one the record
    says the evidence came from compactsim's own emitter in the given flavour.
    """
    if source is None:
        return {"producer": producer, "contract_flavour": flavour, "revision": None, "verdict": None}
    if isinstance(source, Path):
        source = GymCheckReport.model_validate(json.loads(source.read_text(encoding="utf-8")))
    rev = source.revision
    flavours = list(rev.get("flavours", []))
    return {
        "producer": "nemo-gym" if source.live is not None else producer,
        "contract_flavour": flavour or (flavours[0] if len(flavours) == 1 else None),
        "revision": {
            "spec": rev.get("spec"),
            "kind": rev.get("kind"),
            "version": rev.get("version"),
            "digest": rev.get("digest"),
            "flavours": flavours,
        },
        "verdict": source.verdict,
    }


__all__ = ["gym_summary_record"]
