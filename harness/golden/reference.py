"""Feed golden payloads to a Backend (compactsim's reference pipeline by default) and dump its rows: a trainer's side of the goldens.

This is what another project's trainer does with the goldens, done by compactsim's own
pipeline: read each step's payloads in order, plan, materialize, and write every row (or the
error that refused the step) in the rows-dump format, plus the batch metrics. It needs nothing
but the golden directory, so `compactsim verify` on its output checks the whole file path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compactsim.harness.core.errors import ConfigError, ContractError
from compactsim.harness.golden.batch_dump import batch_dump_lines
from compactsim.harness.golden.reader import Golden
from compactsim.harness.core import metrics as M
from compactsim.harness.golden.rows_dump import metrics_line

DEFAULT_BACKEND = "compactsim.harness.pipeline:ReferenceBackend"


@dataclass(frozen=True, slots=True, eq=False)
class BackendDump:
    """A backend's rows-dump lines and metrics-dump lines for a golden set."""

    rows: tuple[dict[str, Any], ...]
    metrics: tuple[dict[str, Any], ...]


def backend_dump(golden: Golden, *, backend: str = DEFAULT_BACKEND) -> BackendDump:
    """Plan and materialize every golden step with `backend` ("module:attr"); a refused step ends its scenario.

    Nothing is trained, so a backend that refuses some batches only inside `train_step` can expose
    those checks as an optional ``check_batch(batch, cfg)`` (`ReferenceBackend` does); it runs
    after `materialize`.
    """
    from compactsim.harness.pipeline.backend import load_backend
    from compactsim.harness.pipeline.loss import valid_counts
    from compactsim.scenarios.model import Scenario

    impl = load_backend(backend)
    check = getattr(impl, "check_batch", None)
    rows: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    for scenario in golden.scenarios:
        cfg = Scenario.model_validate(scenario.scenario_data()).trainer_config()
        for step in scenario.expectation.steps:
            try:
                plans = [impl.plan(result) for result in scenario.payloads(step.step)]
                batch = impl.materialize(plans, cfg)
                if check is not None:  # refusals a trainer makes at train time (no routes to replay, too long)
                    check(batch, cfg)
            except (ContractError, ConfigError) as exc:
                error = {"code": exc.code, "rollout_id": getattr(exc, "rollout_id", None),
                         "turn_id": getattr(exc, "turn_id", None), "message": exc.detail}
                rows.append({"scenario": scenario.name, "step": step.step, "error": error})
                break
            rows += batch_dump_lines(batch, scenario=scenario.name, step=step.step)
            # the batch declares its optimizer steps (one per logical batch); nothing here trains, so the loss's
            # counts over the rows are taken as NeMo-RL's data layer takes them
            valid = valid_counts(batch.row_token_mask, batch.row_sample_mask)
            counts = {M.OPTIMIZER_STEPS: batch.optimizer_steps, M.GLOBAL_VALID_TOKENS: valid.tokens,
                      M.GLOBAL_VALID_SEQS: valid.seqs, "num_valid_samples": valid.seqs}
            metrics.append(metrics_line(scenario.name, step.step, {**batch.metrics(), **counts}))
    return BackendDump(rows=tuple(rows), metrics=tuple(metrics))


__all__ = ["DEFAULT_BACKEND", "BackendDump", "backend_dump"]
