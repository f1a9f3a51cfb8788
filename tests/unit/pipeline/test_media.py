"""MediaResolver: pixels come only from inline data URLs and must be the declared image."""

from __future__ import annotations

import numpy as np
import torch
import pytest

from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.evidence import MediaAsset, ModelCall, RolloutEvidence
from compactsim.harness.core.images import png_data_url
from compactsim.harness.pipeline.media import MediaResolver


def _evidence(**assets: MediaAsset) -> RolloutEvidence:
    call = ModelCall(turn_id=1, prompt_token_ids=(1,), sampled_token_ids=(2,), sampled_logprobs=(-0.5,))
    return RolloutEvidence(rollout_id="r0", flavour="gym-0.7.0-transport", calls=(call,), media_assets=assets)


def _asset(media_id: str, width: int, height: int, declared: tuple[int, int] | None) -> MediaAsset:
    url = png_data_url(np.zeros((height, width, 3), dtype=np.uint8))
    return MediaAsset(media_id, None, {"type": "input_image", "image_url": url}, original_dimensions=declared)


A = "media-" + "a" * 24  # Gym's content-addressed form
B = "media-" + "b" * 24


def test_declared_dimensions_matching_the_pixels_are_accepted():
    ev = _evidence(**{A: _asset(A, 3, 2, (3, 2))})
    (pixels,) = MediaResolver().resolve(ev, [A], turn_id=4)
    assert tuple(pixels.shape) == (3, 2, 3)


def test_swapped_image_of_another_size_is_media_dimensions_mismatch():
    ev = _evidence(**{A: _asset(A, 3, 2, (2, 3))})
    with pytest.raises(ContractError) as info:
        MediaResolver().resolve(ev, [A], turn_id=4)
    err = info.value
    assert (err.code, err.rollout_id, err.turn_id) == ("media_dimensions_mismatch", "r0", 4)
    assert err.detail == f"media id '{A}': original_dimensions [2, 3] but the decoded image is 3x2 (width x height)"


def test_dimensions_are_checked_per_asset_even_when_pixels_are_cached():
    ev = _evidence(**{A: _asset(A, 3, 2, (3, 2)), B: _asset(B, 3, 2, (1, 1))})
    resolver = MediaResolver()
    resolver.resolve(ev, [A], turn_id=1)
    with pytest.raises(ContractError) as info:
        resolver.resolve(ev, [B], turn_id=2)
    assert (info.value.code, info.value.turn_id) == ("media_dimensions_mismatch", 2)
    assert resolver.num_decoded == 1


def test_undeclared_dimensions_are_not_checked():
    ev = _evidence(**{A: _asset(A, 3, 2, None)})
    (pixels,) = MediaResolver().resolve(ev, [A])
    assert tuple(pixels.shape) == (3, 2, 3)


def test_opaque_ids_make_no_claim_about_their_dimensions():
    ev = _evidence(screen=_asset("screen", 3, 2, (1, 1)))
    (pixels,) = MediaResolver().resolve(ev, ["screen"])
    assert tuple(pixels.shape) == (3, 2, 3)


def test_decompression_bomb_header_is_media_decode_naming_the_media_id():
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20_000, 20_000, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b""))
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    ev = _evidence(**{A: MediaAsset(A, None, {"type": "input_image", "image_url": url})})
    with pytest.raises(ContractError) as info:
        MediaResolver().resolve(ev, [A], turn_id=2)
    err = info.value
    assert (err.code, err.rollout_id, err.turn_id) == ("media_decode", "r0", 2)
    assert err.detail.startswith(f"media id '{A}': image header declares a size refused as a decompression bomb")


def test_pixels_are_exact_8bit_values_in_float64():
    """A trainer casting the batch's pixels gets the generation server's values in any dtype (no float32 detour)."""
    values = np.arange(256, dtype=np.uint8).reshape(16, 16)
    url = png_data_url(np.stack([values, values[::-1], values.T], axis=-1))
    ev = _evidence(screen=MediaAsset("screen", None, {"type": "input_image", "image_url": url}))
    (pixels,) = MediaResolver().resolve(ev, ["screen"])
    assert pixels.dtype == torch.float64
    assert torch.equal(pixels[0].flatten(), torch.arange(256, dtype=torch.float64) / 255.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_casting_exact_float64_pixels_equals_dividing_in_the_compute_dtype(dtype):
    """k/255 in float64, cast, is k/255 computed in `dtype` for every 8-bit k (no double-rounding case)."""
    k = torch.arange(256, dtype=torch.uint8)
    assert torch.equal((k.to(torch.float64) / 255.0).to(dtype), k.to(dtype) / 255.0)
