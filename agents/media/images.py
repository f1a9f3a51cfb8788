"""Deterministic synthetic images drawn with Pillow: desktop-like screens and simple shapes.

An image is a pure function of (seed, spec): colours and layout come from `compactsim.harness.core.seeds`
keyed by the spec's `key`, so the same key always gives the same PNG bytes (hence the same Gym
media id), two keys give different images, and "same-shape" images differ only in colour.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Literal

from PIL import Image, ImageDraw

from compactsim.harness.core.seeds import rng

ImageKind = Literal["screen", "shape"]
#: Pillow mode of the saved PNG. The pixels are drawn in RGB either way; RGBA adds an alpha mask
#: (which an RGB conversion drops), L is grey, P a 16-colour palette. A pixel digest must hash the
#: RGB conversion (golden spec §13), so a reader that hashes the raw array sees 4, 1 or 1 channels.
ImageMode = Literal["RGB", "RGBA", "L", "P"]
Shape = Literal["circle", "square", "triangle", "cross"]
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "cross")


@dataclass(frozen=True, slots=True)
class ImageRecipe:
    """Everything that determines an image's pixels."""

    kind: ImageKind
    key: str
    width: int = 32
    height: int = 24
    shape: Shape | None = None
    mode: ImageMode = "RGB"

    def __post_init__(self) -> None:
        if not (4 <= self.width <= 512 and 4 <= self.height <= 512):
            raise ValueError(f"image size {self.width}x{self.height}: expected 4..512 on each side")
        if self.kind == "shape" and self.shape is None:
            raise ValueError("a shape image needs shape= one of " + ", ".join(SHAPES))


def _colour(gen, low: int = 0, high: int = 256) -> tuple[int, int, int]:
    r, g, b = (int(v) for v in gen.integers(low, high, size=3))
    return (r, g, b)


def _draw_screen(draw: ImageDraw.ImageDraw, recipe: ImageRecipe, seed: int) -> None:
    gen = rng(seed, "image.screen", key=recipe.key)
    w, h = recipe.width, recipe.height
    draw.rectangle((0, 0, w - 1, h - 1), fill=_colour(gen, 0, 96))
    draw.rectangle((0, 0, w - 1, max(1, h // 8)), fill=_colour(gen, 128, 256))  # title bar
    for _ in range(int(gen.integers(1, 4))):  # windows
        x0, y0 = int(gen.integers(0, w // 2)), int(gen.integers(h // 8 + 1, h // 2 + 1))
        x1 = int(gen.integers(x0 + 2, w))
        y1 = int(gen.integers(y0 + 2, h)) if y0 + 2 < h else h - 1  # tiny screens: clamp to the edge
        draw.rectangle((x0, y0, x1, y1), fill=_colour(gen, 64, 256), outline=_colour(gen))


def _draw_shape(draw: ImageDraw.ImageDraw, recipe: ImageRecipe, seed: int) -> None:
    gen = rng(seed, "image.shape", key=recipe.key)
    w, h = recipe.width, recipe.height
    draw.rectangle((0, 0, w - 1, h - 1), fill=_colour(gen, 200, 256))
    fg = _colour(gen, 0, 160)
    box = (w // 4, h // 4, w - 1 - w // 4, h - 1 - h // 4)
    if recipe.shape == "circle":
        draw.ellipse(box, fill=fg)
    elif recipe.shape == "square":
        draw.rectangle(box, fill=fg)
    elif recipe.shape == "triangle":
        draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], fill=fg)
    else:
        draw.line((box[0], box[1], box[2], box[3]), fill=fg, width=2)
        draw.line((box[0], box[3], box[2], box[1]), fill=fg, width=2)


def _in_mode(image: Image.Image, mode: str) -> Image.Image:
    """`image` (RGB) saved as `mode`: alpha is a fixed stripe pattern, the palette Pillow's median cut."""
    if mode == "RGBA":
        alpha = Image.new("L", image.size, 255)
        ImageDraw.Draw(alpha).rectangle((0, 0, image.width // 2, image.height - 1), fill=96)
        out = image.copy()
        out.putalpha(alpha)
        return out
    if mode == "L":
        return image.convert("L")
    if mode == "P":
        return image.quantize(colors=16, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    return image


def render_png(recipe: ImageRecipe, *, seed: int) -> bytes:
    """The PNG bytes of a recipe (8-bit, in `recipe.mode`, no metadata, fixed compression)."""
    image = Image.new("RGB", (recipe.width, recipe.height))
    draw = ImageDraw.Draw(image)
    if recipe.kind == "screen":
        _draw_screen(draw, recipe, seed)
    else:
        _draw_shape(draw, recipe, seed)
    image = _in_mode(image, recipe.mode)
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=9, optimize=False)
    return buf.getvalue()


def png_data_url(png: bytes) -> str:
    """An inline ``data:image/png;base64,...`` URL (the only image form the servers accept)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


__all__ = ["SHAPES", "ImageKind", "ImageMode", "ImageRecipe", "Shape", "png_data_url", "render_png"]
