"""The per-rollout media arena: content-addressed image parts with Gym's ids and asset shape."""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from compactsim.harness.core.digests import canonical_json

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_COLOUR_MODES = {0: "L", 2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}


def media_content_digest(part: Mapping[str, Any]) -> str:
    """sha256 of the part's canonical JSON; the whole part counts, so `detail` changes the id."""
    return hashlib.sha256(canonical_json(dict(part)).encode("utf-8")).hexdigest()


def media_id_for(part: Mapping[str, Any]) -> str:
    """Gym's media id: ``"media-" + content_digest[:24]``."""
    return "media-" + media_content_digest(part)[:24]


def png_source_metadata(part: Mapping[str, Any]) -> tuple[tuple[int, int] | None, str | None, str | None]:
    """(dimensions, colour mode, source format) the way Gym reads them: IHDR of base64 PNG data URLs only."""
    source = part.get("image") or part.get("image_url") or part.get("url")
    if isinstance(source, Mapping):
        source = source.get("url")
    if not isinstance(source, str) or not source.startswith("data:image/"):
        return None, None, None
    header, _, encoded = source.partition(",")
    source_format = header.removeprefix("data:image/").split(";", 1)[0]
    if source_format != "png" or not encoded:
        return None, None, source_format
    try:
        payload = base64.b64decode(encoded, validate=True)
    except ValueError:
        return None, None, source_format
    if len(payload) < 26 or payload[:8] != _PNG_SIGNATURE:
        return None, None, source_format
    width, height, bit_depth, colour_type = struct.unpack(">IIBB", payload[16:26])
    mode = _PNG_COLOUR_MODES.get(colour_type)
    if bit_depth != 8:
        mode = f"{mode or 'unknown'}-{bit_depth}bit"
    return (width, height), mode, source_format


@dataclass(frozen=True, slots=True)
class MediaAsset:
    """One image stored once per logical rollout."""

    media_id: str
    content_digest: str
    source_part: Mapping[str, Any]
    original_dimensions: tuple[int, int] | None
    color_mode: str | None
    source_format: str | None

    def to_json(self) -> dict[str, Any]:
        """Gym's `media_assets` value shape, key order included."""
        return {
            "media_id": self.media_id,
            "content_digest": self.content_digest,
            "source_part": deepcopy(dict(self.source_part)),
            "original_dimensions": list(self.original_dimensions) if self.original_dimensions else None,
            "color_mode": self.color_mode,
            "source_format": self.source_format,
        }


class MediaArena:
    """Every image part ever seen in a rollout, keyed by media id, in first-seen order."""

    def __init__(self) -> None:
        self._assets: dict[str, MediaAsset] = {}

    def register(self, part: Mapping[str, Any]) -> str:
        """Store the part (once) and return its media id; a digest clash on the same id is a bug."""
        digest = media_content_digest(part)
        media_id = "media-" + digest[:24]
        existing = self._assets.get(media_id)
        if existing is not None:
            if existing.content_digest != digest:
                raise RuntimeError(f"Media ID collision for {media_id}")
            return media_id
        dims, mode, fmt = png_source_metadata(part)
        self._assets[media_id] = MediaAsset(media_id, digest, deepcopy(dict(part)), dims, mode, fmt)
        return media_id

    def resolve(self, media_id: str) -> Mapping[str, Any]:
        """The stored source part of a media id."""
        try:
            return self._assets[media_id].source_part
        except KeyError:
            raise ValueError(f"Unknown media ID {media_id!r}") from None

    def export(self) -> dict[str, dict[str, Any]]:
        """The `media_assets` mapping: every image ever registered, dropped ones included."""
        return {mid: asset.to_json() for mid, asset in self._assets.items()}

    def __len__(self) -> int:
        return len(self._assets)

    def __contains__(self, media_id: object) -> bool:
        return media_id in self._assets


__all__ = ["MediaArena", "MediaAsset", "media_content_digest", "media_id_for", "png_source_metadata"]
