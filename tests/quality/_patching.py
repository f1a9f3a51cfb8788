"""Helpers for broken backends that bend one piece of the reference trainer for the length of one call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.loss import LossOutput


@contextmanager
def loss_replaced(wrap: Callable[[Callable[..., LossOutput]], Callable[..., LossOutput]]) -> Iterator[None]:
    """Run the reference trainer with `clipped_pg_loss` replaced by `wrap(original)`; restored afterwards."""
    original = trainer_module.clipped_pg_loss
    trainer_module.clipped_pg_loss = wrap(original)
    try:
        yield
    finally:
        trainer_module.clipped_pg_loss = original


def local_counts(kwargs: dict[str, Any]) -> tuple[float, float]:
    """(trained tokens, sequences) of the micro-batch a loss call sees."""
    from compactsim.harness.pipeline.loss import valid_counts

    n = valid_counts(kwargs["token_mask"], kwargs["sample_mask"])
    return n.tokens, n.seqs
