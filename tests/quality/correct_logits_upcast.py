"""A CORRECT backend for a float32 trainer: logprobs from logits upcast to float64 before log_softmax.

NeMo-RL computes logprobs from float32-upcast logits of a bf16 model; here a float32 model's logits are
upcast further and the logprobs cast back to the policy dtype. More accurate, not less: within the float32
tolerances it must pass.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.policy import TinyPolicy
from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "float32-training"


class Backend(ReferenceBackend):
    name = "correct-logits-upcast"

    def train_step(self, state, batch, cfg):
        def token_logprobs(self_, input_ids, images=None, routes=None, lengths=None):
            logits = self_(input_ids, images, routes).logits.to(torch.float64)
            ids = input_ids.to(device=self_.device, dtype=torch.long)
            b, s = ids.shape
            lp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0].to(self_.dtype)
            lp = torch.cat([torch.zeros(b, 1, dtype=lp.dtype, device=lp.device), lp], dim=1)
            if lengths is not None:
                lens = torch.as_tensor(lengths, device=self_.device).reshape(b, 1)
                lp = lp.masked_fill(torch.arange(s, device=self_.device)[None, :] >= lens, 0.0)
            return lp

        with patch.object(TinyPolicy, "token_logprobs", token_logprobs):
            return super().train_step(state, batch, cfg)
