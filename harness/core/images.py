"""Decode a base64 `data:image/...` URL into a float pixel tensor [3, H, W] in [0, 1].

Only inline data URLs are accepted: a path or an http(s) URL is rejected, never opened, so a
request can never make compactsim read a file or reach the network. Sizes are checked before
pixels are decoded (decompression bombs fail on the header).
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from compactsim.harness.core.errors import ContractError

#: Default caps: encoded payload bytes and decoded pixel count per image.
MAX_IMAGE_BYTES: int = 4 * 1024 * 1024
MAX_IMAGE_PIXELS: int = 4096 * 4096

_PREFIX = "data:image/"


class PixelCapExceeded(ContractError):
    """`media_decode` because the header declares more pixels than the cap (a server names its `max_image_pixels`)."""


def data_url_payload(url: str) -> tuple[str, bytes]:
    """Split a base64 image data URL into (subtype, raw bytes); raise `ContractError(media_decode)` otherwise."""
    if not isinstance(url, str) or not url.startswith(_PREFIX):
        shown = url[:40] if isinstance(url, str) else type(url).__name__
        raise ContractError("media_decode", detail=f"image_url {shown!r}: only base64 data:image/... URLs are accepted "
                            "(paths and http URLs are never read)")
    head, sep, body = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ContractError("media_decode", detail=f"image_url header {head[:40]!r}: expected 'data:image/<type>;base64,'")
    subtype = head[len(_PREFIX):-len(";base64")]
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ContractError("media_decode", detail=f"image_url base64 payload is invalid: {exc}") from None
    return subtype, raw


def encoded_size(url: str) -> int:
    """Decoded byte size of a base64 data URL without decoding it (for 413 checks)."""
    _, _, body = url.partition(",")
    return (len(body) * 3) // 4


#: Raster formats decoded, all in-process. Anything else (EPS would run Ghostscript on the payload,
#: PSD, ICO, PDF, ...) is refused as not an image, before any decoder sees it.
IMAGE_FORMATS: tuple[str, ...] = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")

#: What a malformed image can raise inside Pillow, beyond OSError (which UnidentifiedImageError
#: subclasses): plugins parse headers with struct, slicing and dict lookups.
_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    OSError, ValueError, SyntaxError, EOFError, struct.error, IndexError, KeyError, TypeError, ZeroDivisionError,
    MemoryError,
)


#: `warnings.catch_warnings` swaps the process-wide filter list and puts the old one back on exit;
#: two threads decoding at once could restore each other's list. One at a time, only while Pillow
#: reads a header (or, above Pillow's own limit, decodes).
_PILLOW_WARNINGS_LOCK = threading.Lock()


@contextmanager
def _without_pillow_bomb_warning() -> Iterator[None]:
    """Pillow's `DecompressionBombWarning` silenced in this block: compactsim's pixel cap decides instead.

    Pillow warns (stderr) when a header declares more than `Image.MAX_IMAGE_PIXELS` (~89 M) pixels
    and raises `DecompressionBombError` above twice that; `Image.open` checks before returning, so
    our cap, read from the opened image, comes too late to keep the warning away. The global
    `Image.MAX_IMAGE_PIXELS` stays as it is (other code may rely on it); only the warning filter is
    changed, for this block.
    """
    from PIL import Image

    with _PILLOW_WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _above_pillows_warning_limit(pixels: int) -> bool:
    from PIL import Image

    return Image.MAX_IMAGE_PIXELS is not None and pixels > Image.MAX_IMAGE_PIXELS


def decode_data_url(url: str, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_IMAGE_PIXELS, dtype=None):
    """Pixels of an inline image as a `torch.Tensor` [3, H, W] (RGB, values in [0, 1], `dtype` default float32).

    Raises `ContractError("media_decode")` for anything that is not a decodable image within the caps.
    The pixel cap is checked on the header's declared size, before any pixel is decoded, and it is
    what decides: Pillow's `DecompressionBombWarning` (headers over ~89 M pixels) is never printed,
    such an image gets the cap's error (or decodes, if the cap allows it). Pillow's
    `DecompressionBombError` (over twice its limit, ~179 M pixels, refused whatever the cap) is
    reported the same way rather than escaping as Pillow's exception.
    """
    import numpy as np
    import torch
    from PIL import Image, UnidentifiedImageError

    if isinstance(url, str) and encoded_size(url) > max_bytes:
        raise ContractError("media_decode", detail=f"image is {encoded_size(url)} bytes; the cap is {max_bytes}")
    _, raw = data_url_payload(url)
    if len(raw) > max_bytes:
        raise ContractError("media_decode", detail=f"image is {len(raw)} bytes; the cap is {max_bytes}")
    try:
        with _without_pillow_bomb_warning():  # reads the header only: Pillow decodes lazily
            im = Image.open(io.BytesIO(raw), formats=IMAGE_FORMATS)
        with im:
            w, h = im.size
            if w * h > max_pixels:
                raise PixelCapExceeded("media_decode", detail=f"image is {w}x{h} = {w * h} pixels; the cap is {max_pixels}")
            if _above_pillows_warning_limit(w * h):  # a cap above Pillow's: its load-time checks would warn
                with _without_pillow_bomb_warning():
                    rgb = np.asarray(im.convert("RGB"), dtype=np.uint8)
            else:
                rgb = np.asarray(im.convert("RGB"), dtype=np.uint8)  # (H, W, 3)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # the error; the warning is silenced
        raise PixelCapExceeded("media_decode", detail=f"image header declares a size refused as a decompression bomb "
                                                   f"({exc}); the cap is {max_pixels} pixels") from None
    except UnidentifiedImageError:  # Pillow's message names the BytesIO's address: not deterministic
        raise ContractError("media_decode", detail="image bytes do not decode as any supported format "
                                                   f"({', '.join(IMAGE_FORMATS)})") from None
    except _DECODE_ERRORS as exc:
        problem = str(exc) or type(exc).__name__
        raise ContractError("media_decode", detail=f"image bytes do not decode: {problem}") from None
    t = torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()  # (3, H, W) uint8
    return t.to(dtype or torch.float32) / 255.0


def png_data_url(pixels) -> str:
    """Encode a uint8 array (H, W, 3) as a PNG data URL (deterministic bytes; for tests and scripted media)."""
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buf, format="PNG", optimize=False)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


__all__ = [
    "IMAGE_FORMATS",
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "data_url_payload",
    "decode_data_url",
    "encoded_size",
    "png_data_url",
]
