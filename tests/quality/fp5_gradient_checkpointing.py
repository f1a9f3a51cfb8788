"""A CORRECT backend (false-positive hunt 5): HF-style gradient checkpointing of every transformer block.

`model.gradient_checkpointing_enable()` (NeMo-RL's DTensor worker with `activation_checkpointing: true`, TRL, OpenRLHF)
runs each decoder block under `torch.utils.checkpoint.checkpoint(use_reentrant=False)`: activations are dropped and
the block is recomputed in the backward pass, the same forward bit for bit, so the gradient is unchanged. Installed
on the state's policy before the first step by replacing each block's forward on the instance (parameter names are
unchanged, as HF's implementation keeps them).
"""

from __future__ import annotations

from tests.quality.fp5_activation_checkpointing import Unrenamed

SCENARIO = "layout-dp2-kl-steps-clip-binds"


class Backend(Unrenamed):
    name = "fp5-gradient-checkpointing"
