"""Resolve a row's media ids to pixel tensors from the rollout's `media_assets`, decoding each image once per batch.

A row owns every image of its last prompt, in prompt order and with duplicates, so a trace that
starts at a compaction boundary re-owns the images it kept, not only the new ones. Pixels come
only from the asset's inline `source_part` data URL (never a path or a network URL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from compactsim.harness.core.digests import GYM_MEDIA_ID
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import RolloutEvidence
from compactsim.harness.core.images import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, decode_data_url




def source_url(source_part: Mapping[str, Any]) -> str | None:
    """The image URL of a Responses (`{"image_url": "data:..."}`) or chat (`{"image_url": {"url": ...}}`) part."""
    url = source_part.get("image_url")
    if isinstance(url, Mapping):
        url = url.get("url")
    if url is None:
        url = source_part.get("image")
    return url if isinstance(url, str) else None


class MediaResolver:
    """Decodes images for one batch; identical image data is decoded once and its tensor shared."""

    def __init__(self, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS) -> None:
        self._max_bytes = max_bytes
        self._max_pixels = max_pixels
        self._by_url: dict[str, torch.Tensor] = {}

    @property
    def num_decoded(self) -> int:
        """Distinct images decoded so far."""
        return len(self._by_url)

    def resolve(
        self, evidence: RolloutEvidence, media_ids: Sequence[str], *, turn_id: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Pixels (3, H, W) float64, each exactly k/255, for `media_ids`, in order, duplicates included.

        float64 so a trainer casting them to its compute dtype gets what the generation server
        computed from the same 8-bit values (float32 pixels are up to 2.8e-8 off, which a float64
        trainer would then train on).

        Raises `ContractError("unknown_media_asset")` for an id absent from `media_assets`,
        `ContractError("media_decode")` for an asset whose source part is not a decodable image and
        `ContractError("media_dimensions_mismatch")` when a content-addressed asset's decoded pixels
        are not its declared `original_dimensions`; each names the media id. Opaque ids
        (hand-written payloads) make no claim about their content, so only Gym's ids are held to it.
        """
        return tuple(self._one(evidence, media_id, turn_id) for media_id in media_ids)

    def _one(self, evidence: RolloutEvidence, media_id: str, turn_id: int | None) -> torch.Tensor:
        asset = evidence.media_assets.get(media_id)
        if asset is None:
            raise ContractError(
                "unknown_media_asset",
                rollout_id=evidence.rollout_id,
                turn_id=turn_id,
                detail=f"media id {media_id!r} is not in media_assets ({len(evidence.media_assets)} assets: "
                f"{sorted(evidence.media_assets)[:5]})",
            )
        url = source_url(asset.source_part)
        if url is None:
            raise ContractError(
                "media_decode",
                rollout_id=evidence.rollout_id,
                turn_id=turn_id,
                detail=f"media id {media_id!r}: source_part has no image_url (keys {sorted(asset.source_part)})",
            )
        pixels = self._by_url.get(url)
        if pixels is None:
            try:
                pixels = decode_data_url(url, max_bytes=self._max_bytes, max_pixels=self._max_pixels, dtype=torch.float64)
            except ContractError as exc:
                raise ContractError(
                    "media_decode",
                    rollout_id=evidence.rollout_id,
                    turn_id=turn_id,
                    detail=f"media id {media_id!r}: {exc.detail}",
                ) from None
            self._by_url[url] = pixels
        declared = asset.original_dimensions
        decoded = (int(pixels.shape[2]), int(pixels.shape[1]))  # (width, height) of (3, H, W)
        if declared is not None and GYM_MEDIA_ID.fullmatch(media_id) and tuple(declared) != decoded:
            raise ContractError(
                "media_dimensions_mismatch",
                rollout_id=evidence.rollout_id,
                turn_id=turn_id,
                detail=f"media id {media_id!r}: original_dimensions {list(declared)} but the decoded image is "
                f"{decoded[0]}x{decoded[1]} (width x height)",
            )
        return pixels


__all__ = ["GYM_MEDIA_ID", "MediaResolver", "source_url"]
