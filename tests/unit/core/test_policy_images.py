"""Image helpers the policy relies on: data-URL PNG decoding with caps, never touching paths or URLs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.images import decode_data_url, png_data_url

RED_1X1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def test_decode_data_url_gives_rgb_floats_in_unit_range():
    t = decode_data_url(RED_1X1, dtype=torch.float64)
    assert t.dtype == torch.float64
    assert t.shape == (3, 1, 1)
    assert t.flatten().tolist() == [1.0, 0.0, 0.0]


def test_png_data_url_round_trips_pixels():
    pixels = (np.arange(4 * 6 * 3) * 5 % 256).astype(np.uint8).reshape(4, 6, 3)
    url = png_data_url(pixels)
    assert url == png_data_url(pixels)  # deterministic bytes
    back = decode_data_url(url)
    assert torch.equal((back * 255).round().to(torch.uint8).permute(1, 2, 0), torch.from_numpy(pixels))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/etc/passwd", "only base64 data:image/... URLs are accepted"),
        ("http://127.0.0.1/x.png", "only base64 data:image/... URLs are accepted"),
        ("data:image/png,rawbytes", "expected 'data:image/<type>;base64,'"),
        ("data:image/png;base64,@@@", "base64 payload is invalid"),
        ("data:image/png;base64,AAAA", "image bytes do not decode"),
    ],
)
def test_decode_data_url_rejects_anything_but_inline_images(url, message):
    with pytest.raises(ContractError) as err:
        decode_data_url(url)
    assert err.value.code == "media_decode"
    assert message in str(err.value)


def test_decode_data_url_enforces_byte_and_pixel_caps():
    url = png_data_url(np.zeros((20, 20, 3), dtype=np.uint8))
    with pytest.raises(ContractError) as err:
        decode_data_url(url, max_pixels=399)
    assert "image is 20x20 = 400 pixels; the cap is 399" in str(err.value)
    with pytest.raises(ContractError) as err:
        decode_data_url(url, max_bytes=10)
    assert "the cap is 10" in str(err.value)
