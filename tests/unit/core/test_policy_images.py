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


def _png_header_url(width: int, height: int) -> str:
    """A tiny PNG whose IHDR declares width x height (a decompression bomb: the pixels are never there)."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(raw).decode("ascii")


@pytest.mark.parametrize("side", [20_000, 100_000])
def test_header_declaring_a_bomb_is_media_decode_not_pillows_error(side):
    # Pillow refuses > 2 x its own limit on the header with DecompressionBombError, before our cap check
    with pytest.raises(ContractError) as err:
        decode_data_url(_png_header_url(side, side))
    assert err.value.code == "media_decode"
    assert err.value.detail.startswith(f"image header declares a size refused as a decompression bomb (Image size "
                                       f"({side * side} pixels) exceeds limit of")
    assert err.value.detail.endswith("; the cap is 16777216 pixels")


def test_header_in_pillows_warning_band_is_refused_by_the_cap_even_when_warnings_are_errors():
    url = _png_header_url(10_000, 10_000)  # 1e8 pixels: Pillow alone would warn (DecompressionBombWarning)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under `python -W error`: any warning would be raised; none is
        with pytest.raises(ContractError) as err:
            decode_data_url(url)
    assert err.value.code == "media_decode"
    assert err.value.detail == "image is 10000x10000 = 100000000 pixels; the cap is 16777216"


def test_header_over_the_cap_is_refused_before_decoding():
    with pytest.raises(ContractError) as err:
        decode_data_url(_png_header_url(5000, 5000))
    assert err.value.detail == "image is 5000x5000 = 25000000 pixels; the cap is 16777216"


@pytest.mark.parametrize(
    "payload",
    [
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n",  # EPS would run Ghostscript
        b"8BPS\x00\x01" + b"\x00" * 20,  # PSD
        b"\x00\x00\x01\x00\x01\x00" + b"\x00" * 16,  # ICO
    ],
)
def test_formats_outside_the_raster_allowlist_are_not_decoded(payload):
    import base64

    with pytest.raises(ContractError) as err:
        decode_data_url("data:image/png;base64," + base64.b64encode(payload).decode("ascii"))
    assert err.value.detail == "image bytes do not decode as any supported format (PNG, JPEG, GIF, WEBP, BMP, TIFF)"


def _decode_recording_warnings(url: str, **caps):
    """`decode_data_url(url, **caps)` with every warning recorded (none filtered away): (result or error, warnings)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = decode_data_url(url, **caps)
        except ContractError as exc:
            result = exc
    return result, [str(w.category.__name__) + ": " + str(w.message) for w in caught]


@pytest.mark.parametrize("side", [10_000, 12_000])  # 100 M / 144 M pixels: between Pillow's warning and its error
def test_header_between_pillows_warning_and_error_gets_our_cap_and_no_warning(side):
    err, caught = _decode_recording_warnings(_png_header_url(side, side))
    assert caught == []  # Pillow's DecompressionBombWarning never reaches stderr
    assert isinstance(err, ContractError) and err.code == "media_decode"
    assert err.detail == f"image is {side}x{side} = {side * side} pixels; the cap is 16777216"


def test_our_cap_decides_over_pillows_global_limit_which_stays_untouched(monkeypatch: pytest.MonkeyPatch):
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 300)  # Pillow would warn on 400 pixels
    url = png_data_url(np.full((20, 20, 3), 9, dtype=np.uint8))
    pixels, caught = _decode_recording_warnings(url, max_pixels=1000)  # a cap above Pillow's: it decodes
    assert caught == []
    assert isinstance(pixels, torch.Tensor) and pixels.shape == (3, 20, 20)
    err, caught = _decode_recording_warnings(url, max_pixels=399)
    assert caught == [] and err.detail == "image is 20x20 = 400 pixels; the cap is 399"
    assert Image.MAX_IMAGE_PIXELS == 300  # the global is never changed, not even for a moment left behind


def test_a_failed_decode_leaves_the_warning_filters_as_they_were():
    import warnings

    before = list(warnings.filters)
    for url in (_png_header_url(10_000, 10_000), _png_header_url(20_000, 20_000), "data:image/png;base64,AAAA"):
        with pytest.raises(ContractError):
            decode_data_url(url)
    assert warnings.filters == before
