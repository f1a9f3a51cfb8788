"""Broken backend: the images of every rollout's first prompt are restored from the batch's first rollout.

A GRPO step's rollouts of one prompt share its first prompt, images included, so the trainer keeps one copy of the
initial images per batch (as a media dedup restores them) and hands it to every rollout, assuming one prompt per
step. Rows keep their media ids; their initial images' pixels are the first rollout's. A group's rollouts do share
their task image, so only a step of two tasks with images tells the two apart.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.pixels"
SCENARIO = "two-tasks-two-task-images"  # (and legacy-task-image, until then the only step with two prompts)


class Backend(ReferenceBackend):
    name = "task-images-from-first-prompt-of-batch"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        by_id = {p.evidence.rollout_id: p.evidence for p in plans}
        first_pixels = None
        pixels = list(batch.row_pixel_values)
        for r, rid in enumerate(batch.row_logical_rollout_id):
            if rid is None:
                continue
            ev = by_id[rid]
            initial = list(ev.calls[0].media_ids) if ev.calls else []
            ids = batch.row_media_ids[r]
            own = {mid: px for mid, px in zip(ids, pixels[r])}
            init_px = [own.get(mid) for mid in initial]
            if first_pixels is None and initial and all(p is not None for p in init_px):
                first_pixels = dict(zip(initial, init_px))
                first_order = list(initial)
            if first_pixels is None or not initial:
                continue
            new = list(pixels[r])
            for k, mid in enumerate(ids):
                if mid in initial:
                    j = initial.index(mid)
                    if j < len(first_order) and first_pixels[first_order[j]].shape == new[k].shape:
                        new[k] = first_pixels[first_order[j]]
            pixels[r] = tuple(new)
        return replace(batch, row_pixel_values=tuple(pixels))
