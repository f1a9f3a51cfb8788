"""Broken backend: a media asset's declared dimensions are checked only when its image is decoded.

The batch's media resolver decodes each distinct image once and shares the tensor. The engineer moved the
`original_dimensions` check into the decode branch ("validate what we decode"), so an asset whose data URL was
already decoded for another rollout of the batch is never held to its own declared size. Within one rollout an id has
one asset, so the first use checks it; only an image shared across rollouts (a GRPO group's task image) reaches the
cache with another rollout's asset, and a misstated size there trains instead of being refused.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.images import decode_data_url
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.media import GYM_MEDIA_ID, MediaResolver, source_url

EXPECTED_CHECK = "verdict.expected_error"
SCENARIO = "shared-task-image-misstated-dimensions"


def _one(self, evidence, media_id, turn_id):
    asset = evidence.media_assets.get(media_id)
    if asset is None:
        raise ContractError("unknown_media_asset", rollout_id=evidence.rollout_id, turn_id=turn_id,
                            detail=f"media id {media_id!r} is not in media_assets")
    url = source_url(asset.source_part)
    if url is None:
        raise ContractError("media_decode", rollout_id=evidence.rollout_id, turn_id=turn_id,
                            detail=f"media id {media_id!r}: source_part has no image_url")
    pixels = self._by_url.get(url)
    if pixels is None:
        try:
            pixels = decode_data_url(url, max_bytes=self._max_bytes, max_pixels=self._max_pixels, dtype=torch.float64)
        except ContractError as exc:
            raise ContractError("media_decode", rollout_id=evidence.rollout_id, turn_id=turn_id,
                                detail=f"media id {media_id!r}: {exc.detail}") from None
        declared = asset.original_dimensions  # BUG: checked only for the asset that was decoded
        decoded = (int(pixels.shape[2]), int(pixels.shape[1]))
        if declared is not None and GYM_MEDIA_ID.fullmatch(media_id) and tuple(declared) != decoded:
            raise ContractError("media_dimensions_mismatch", rollout_id=evidence.rollout_id, turn_id=turn_id,
                                detail=f"media id {media_id!r}: original_dimensions {list(declared)} but decoded {decoded}")
        self._by_url[url] = pixels
    return pixels


class Backend(ReferenceBackend):
    name = "media-dimensions-checked-on-decode-only"

    def materialize(self, plans, cfg):
        with patch.object(MediaResolver, "_one", _one):
            return super().materialize(plans, cfg)
