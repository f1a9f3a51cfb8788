"""Broken backend: the dual clip min(ℓ, -A·c) is applied on every token, not only where A < 0.

Where A > 0 the bound -A·c lies below the clipped surrogate, so those tokens lose their loss value and all their
gradient; NeMo-RL applies ℓ = min(ℓ, -A·c) only where A < 0 (§4.3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.loss import LossConfig, LossOutput
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import loss_replaced

EXPECTED_CHECK = "train.loss"
SCENARIO = "dual-clip"


class Backend(ReferenceBackend):
    """Runs the reference loss with a `torch.where` that takes the dual-clip branch whatever the advantage's sign."""

    name = "dual-clip-without-sign-guard"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        real_min, real_where = torch.min, torch.where

        def wrap(original: Callable[..., LossOutput]) -> Callable[..., LossOutput]:
            def loss(cfg_: LossConfig, **kw: Any) -> LossOutput:
                dual_clipped: list[torch.Tensor] = []  # results of the loss's min(ℓ, -A·c)

                def min_(*args: Any, **kwargs: Any) -> Any:
                    out = real_min(*args, **kwargs)
                    if len(args) == 2 and isinstance(args[1], torch.Tensor):
                        dual_clipped.append(out)
                    return out

                def where(condition: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                    if len(args) == 2 and any(args[0] is t for t in dual_clipped):
                        return args[0]  # where(A < 0, min(ℓ, -A·c), ℓ) without its guard
                    return real_where(condition, *args, **kwargs)

                with patch.object(torch, "min", min_), patch.object(torch, "where", where):
                    return original(cfg_, **kw)
            return loss

        with loss_replaced(wrap):
            return super().train_step(state, batch, cfg)
