"""`rgb_pixel_digest` is the pipeline's `pixel_digest` for float pixels and hashes uint8 (H, W, 3) images as they are."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
import torch

from compactsim.harness.audit import rgb_pixel_digest
from compactsim.harness.core.artifacts import pixel_digest

#: (3, H=2, W=2) floats: in range, on a rounding edge, and out of range (clipped).
FLOATS = np.array(
    [
        [[0.0, 0.2], [1.0, 1.5]],
        [[0.5, 0.25], [-0.1, 0.75]],
        [[0.1, 0.9], [0.333, 0.666]],
    ],
    dtype=np.float64,
)
#: The same image as 8-bit RGB, (H, W, 3), written out by hand.
RGB = np.array(
    [
        [[0, 128, 26], [51, 64, 230]],
        [[255, 0, 85], [255, 191, 170]],
    ],
    dtype=np.uint8,
)


def test_rgb_pixel_digest_of_float_pixels_hashes_their_rgb_bytes():
    assert rgb_pixel_digest(FLOATS) == hashlib.sha256(RGB.tobytes()).hexdigest()


def test_rgb_pixel_digest_equals_pixel_digest_for_tensors_and_arrays_of_any_float_dtype():
    want = pixel_digest(torch.from_numpy(FLOATS))
    assert rgb_pixel_digest(torch.from_numpy(FLOATS)) == rgb_pixel_digest(FLOATS.tolist()) == want
    single = FLOATS.astype(np.float32)
    assert rgb_pixel_digest(single) == rgb_pixel_digest(torch.from_numpy(single)) == pixel_digest(torch.from_numpy(single))


def test_rgb_pixel_digest_of_a_decoded_uint8_image_matches_its_float_pixels():
    assert rgb_pixel_digest(RGB) == rgb_pixel_digest(FLOATS) == hashlib.sha256(RGB.tobytes()).hexdigest()


@pytest.mark.parametrize(
    ("pixels", "shape"),
    [(np.zeros((2, 4)), "(2, 4)"), (torch.zeros(2, 4), "(2, 4)"), (np.zeros((2, 2, 3), dtype=np.float32), "(2, 2, 3)")],
)
def test_rgb_pixel_digest_refuses_float_pixels_that_are_not_channels_first(pixels, shape):
    with pytest.raises(ValueError, match=rf"^float pixels must be \(3, H, W\); got shape {re.escape(shape)}$"):
        rgb_pixel_digest(pixels)


def test_rgb_pixel_digest_refuses_uint8_pixels_that_are_not_channels_last():
    with pytest.raises(ValueError, match=r"^uint8 pixels must be \(H, W, 3\); got shape \(3, 2, 2\)$"):
        rgb_pixel_digest(RGB.transpose(2, 0, 1))
