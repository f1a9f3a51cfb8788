"""The harness reads a policy the trainer wrapped through its wrapper: DDP/FSDP's `module.` and torch.compile's
`_orig_mod.` prefixes are the wrapper's, never the policy's (`compactsim.harness.core.training_state._unwrapped`)."""

from __future__ import annotations

import torch

from compactsim.harness.core.training_state import snapshot_training_state


class _Policy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2, dtype=torch.float64)
        self.config = "tiny"


class _DDP(torch.nn.Module):
    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module


def _snapshot(policy: torch.nn.Module):
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    return snapshot_training_state(policy, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0))


def test_compiled_ddp_and_nested_wrappers_are_read_as_the_policy_itself():
    policy = _Policy()
    plain = _snapshot(policy)
    compiled = torch.compile(policy, backend="eager")
    assert [n for n, _ in compiled.named_parameters()] == ["_orig_mod.lin.weight", "_orig_mod.lin.bias"]
    for wrapped in (compiled, _DDP(policy), torch.compile(_DDP(policy), backend="eager"), _DDP(compiled)):
        snap = _snapshot(wrapped)
        assert list(snap.weights) == list(plain.weights) == ["lin.weight", "lin.bias"]
        assert snap.model_config == "tiny"
        assert all(torch.equal(snap.weights[k], plain.weights[k]) for k in plain.weights)


def test_a_model_whose_own_parameters_happen_to_share_a_prefix_is_not_unwrapped():
    class Holder(torch.nn.Module):  # a real submodule named `module`, beside other parameters: not a wrapper
        def __init__(self) -> None:
            super().__init__()
            self.module = torch.nn.Linear(2, 2, dtype=torch.float64)
            self.head = torch.nn.Linear(2, 1, dtype=torch.float64)

    assert sorted(_snapshot(Holder()).weights) == ["head.bias", "head.weight", "module.bias", "module.weight"]
