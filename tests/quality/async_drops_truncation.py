"""Broken backend: under async GRPO the loss config is rebuilt from the replay-buffer path, which carries
`use_importance_sampling_correction` but forgets `truncated_importance_sampling_type/ratio/min`: every token is
weighted by the raw w = exp(prev - gen).

The loss function knows nothing of async (nemo-rl-semantics §4.4): tis and icepop apply in both loops. Every sync
truncation scenario and every async scenario without truncation is right; `async-grpo-truncated-importance-sampling`
is not.
"""

from __future__ import annotations

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "train.gradient"
SCENARIO = "async-grpo-truncated-importance-sampling"


class Backend(ReferenceBackend):
    name = "async-drops-truncation"

    def train_step(self, state, batch, cfg):
        if cfg.grpo.async_grpo.enabled and cfg.loss_fn.truncated_importance_sampling_type is not None:
            untruncated = cfg.loss_fn.model_copy(update={"truncated_importance_sampling_type": None,
                                                          "truncated_importance_sampling_ratio": None,
                                                          "truncated_importance_sampling_ratio_min": None})
            cfg = cfg.model_copy(update={"loss_fn": untruncated})
        return super().train_step(state, batch, cfg)
