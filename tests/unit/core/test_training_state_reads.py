"""What `snapshot_training_state` reads from a trainer's own objects: equivalent ones are read alike.

A false-positive hunt found two correct trainers the audit refused by its own reads: a warmup built as torch's
`ChainedScheduler` (no `last_epoch` of its own: an AttributeError reported as the backend's), and activation
checkpointing (`checkpoint_wrapper` renames every block parameter `..._checkpoint_wrapped_module...`: a
`train.update` "missing parameter" and an oracle KeyError).
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointImpl, apply_activation_checkpointing,
                                                                         checkpoint_wrapper)

from compactsim.harness.core.policy import PolicyConfig, TinyPolicy, _Block
from compactsim.harness.core.training_state import _named_parameters, _scheduler_epoch


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)


def test_a_chained_scheduler_counts_as_its_members_do():
    opt = _optimizer()
    chained = torch.optim.lr_scheduler.ChainedScheduler(
        [torch.optim.lr_scheduler.LinearLR(opt, 0.5, 1.0, 1), torch.optim.lr_scheduler.ExponentialLR(opt, 1.0)],
        optimizer=opt)
    assert not hasattr(chained, "last_epoch")
    opt.step()
    chained.step()
    assert _scheduler_epoch(chained) == 1


def test_a_scheduler_without_a_count_is_a_typed_error():
    class Opaque:  # neither last_epoch nor members
        pass

    with pytest.raises(TypeError, match="has no last_epoch and no members that agree on one"):
        _scheduler_epoch(Opaque())


def test_checkpoint_wrapped_blocks_keep_their_parameter_names():
    policy = TinyPolicy(PolicyConfig())
    plain = [name for name, _ in policy.named_parameters()]
    apply_activation_checkpointing(policy, check_fn=lambda m: isinstance(m, _Block),
                                   checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper,
                                                                           checkpoint_impl=CheckpointImpl.NO_REENTRANT))
    assert any("_checkpoint_wrapped_module" in name for name, _ in policy.named_parameters())
    assert [name for name, _ in _named_parameters(policy)] == plain
