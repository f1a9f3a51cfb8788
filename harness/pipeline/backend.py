"""The seam between the harness and a trainer under test: plan → materialize → train step.

The runner and `compactsim.harness.train_run` talk to the system under test only through `Backend`
(DESIGN §6). Inputs are Gym-shaped JSON (`/run` results or bare responses) and plain configs
(`TrainerConfig`); outputs are plain dataclasses of tensors and metrics from `compactsim.harness.core`
(`TracePlan`, `TraceBatch`, `StepArtifact` inside `StepResult`), so the audit reads them without
importing any backend's internals. `ReferenceBackend` is compactsim's own pipeline; another
implementation (a wrapper around NeMo-RL's functions, or a deliberately broken variant that
proves the audit catches a bug) is loaded with ``--backend module:attr``::

    class BroadcastFirstAdvantage(ReferenceBackend):
        def materialize(self, plans, cfg):
            batch = super().materialize(plans, cfg)
            ...  # write the first rollout's advantage on every row
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.raised import exception_text, raising_frame
from compactsim.harness.core.trace_plan import TracePlan
from compactsim.harness.pipeline.materializer import materialize as _materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState, check_batch
from compactsim.harness.pipeline.trainer import train_step as _train_step


@runtime_checkable
class Backend(Protocol):
    """A trainer-side pipeline the harness can drive and audit."""

    def plan(self, result: Mapping[str, Any]) -> TracePlan:
        """Split one logical rollout (a Gym `/run` result or bare response) into physical traces.

        >>> plan = backend.plan(json.load(open("examples/gym-0.7.0-transport-compacted-3call.json")))
        >>> [t.turn_ids for t in plan.traces]
        [(1, 2), (3,)]

        Raises `ContractError` (with `.code`, `.rollout_id`, `.turn_id`) for evidence it refuses.
        """
        ...

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        """One logical batch of plans → padded training rows with logical advantages.

        >>> batch = backend.materialize([backend.plan(r) for r in results], TrainerConfig())
        >>> batch.parent_indices.tolist()       # rollout 0 compacted once: two rows; then padding
        [0, 0, 1, 2, 3, -1, -1, -1]
        """
        ...

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        """Exactly one optimizer step and one scheduler increment on `batch`; advances `state`.

        On `state.optimizer` and `state.scheduler` themselves (the harness measures them); then
        `state.version` and `state.optimizer_steps` go up by one, `result.artifact.step` is the
        step count before it and `result.new_version` the new version. `metrics` must hold
        `loss`, `grad_norm` (before clipping) and `lr`. Pixels arrive as exact float64 k/255:
        cast them to the compute dtype.

        >>> state = init_train_state(cfg)
        >>> result = backend.train_step(state, batch, cfg)
        >>> result.metrics["token_mult_prob_error"], result.new_version
        (0.9999999999875, 1)
        """
        ...


def protocol_return(method: str, value: Any, kind: type) -> Any:
    """`value` when it is what the Backend protocol says `method` returns; otherwise a TypeError naming the method,
    so a plan returned as None is blamed on `plan`, not on the stage that first trips over it."""
    if not isinstance(value, kind):
        raise TypeError(f"{method} returned {type(value).__name__}, not a {kind.__name__}")
    return value


class ReferenceBackend:
    """compactsim's reference pipeline: `plan_rollout` (strict), `materialize`, `trainer.train_step`."""

    name = "reference"

    def plan(self, result: Mapping[str, Any]) -> TracePlan:
        return plan_rollout(result, strict=True)

    def materialize(self, plans: Sequence[TracePlan], cfg: TrainerConfig) -> TraceBatch:
        return _materialize(plans, cfg)

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        return _train_step(state, batch, cfg)

    def check_batch(self, batch: TraceBatch, cfg: TrainerConfig) -> None:
        """Optional seam: the refusals `train_step` makes before training (rows dumps are written without training)."""
        check_batch(batch, cfg)

    def __repr__(self) -> str:
        return "ReferenceBackend()"


def load_backend(spec: str) -> Backend:
    """The backend named by ``"module:attr"``: a class (instantiated without arguments) or an instance.

    >>> load_backend("compactsim.harness.pipeline:ReferenceBackend")
    ReferenceBackend()
    """
    import importlib

    if not isinstance(spec, str):
        raise ConfigError("invalid_argument", f"backend={spec!r}: expected a 'module:attr' string")
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("invalid_argument", f"backend={spec!r}: expected 'module:attr', e.g. compactsim.harness.pipeline:ReferenceBackend")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type):
            obj = obj()
        missing = [m for m in ("plan", "materialize", "train_step") if not callable(getattr(obj, m, None))]
    except (Exception, SystemExit) as exc:  # the user's module, whatever it raises (Ctrl-C still stops)
        raise ConfigError("invalid_argument", f"backend={spec!r} does not load: {_describe(exc)}") from None
    if missing:
        raise ConfigError("invalid_argument", f"backend={spec!r} lacks the Backend method(s) {missing}")
    return obj


def _describe(exc: BaseException) -> str:
    """``Type: message (file:line)`` of an exception raised while loading a backend, where the user's code raised it."""
    import importlib

    loader = (__file__, str(Path(importlib.__file__).parent))  # the import machinery's frames say nothing to the user
    frame = raising_frame(exc, skip=loader)
    where = "" if frame is None else f" ({Path(frame.filename).name}:{frame.lineno})"
    return f"{type(exc).__name__}: {exception_text(exc)}{where}"


__all__ = ["Backend", "ReferenceBackend", "load_backend", "protocol_return"]
