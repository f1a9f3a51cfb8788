"""Broken backend: the rows' images are decoded with their colour channels reversed (BGR), as ``cv2.imdecode`` returns
them, and handed on as if they were RGB.

Media ids, image counts, sizes and the ``<|image|>`` placeholders all stay right, so nothing refuses the batch; the
policy simply sees other colours than the generation server saw, and every token after an image is scored (and
trained) against the wrong pixels. An image whose three channels are equal (a grey screenshot) decodes the same either
way, which is why a colour-poor fixture never shows it.
"""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.pipeline.backend import ReferenceBackend

EXPECTED_CHECK = "row.pixels"
SCENARIO = "no-compaction"


class Backend(ReferenceBackend):
    name = "images-decoded-as-bgr"

    def materialize(self, plans, cfg):
        batch = super().materialize(plans, cfg)
        decoded: dict[int, object] = {}  # one decode per image, shared as the resolver shares them
        rows = []
        for pixels in batch.row_pixel_values:
            rows.append(tuple(decoded.setdefault(id(px), px.flip(0)) for px in pixels))  # (3, H, W): RGB -> BGR
        return replace(batch, row_pixel_values=tuple(rows))
