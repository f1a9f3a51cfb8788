"""Synthetic images are pure functions of (seed, spec); media ids repeat exactly when pixels do."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from compactsim.agents.media.images import ImageRecipe, png_data_url, render_png
from compactsim.agents.media.arena import MediaArena, media_id_for, png_source_metadata
from compactsim.agents.rollout.script import ImageSpec, scripted_turns


def _pixels(png: bytes) -> list[tuple[int, int, int]]:
    raw = Image.open(io.BytesIO(png)).convert("RGB").tobytes()
    return [tuple(raw[i : i + 3]) for i in range(0, len(raw), 3)]


def test_same_key_and_seed_draw_identical_png_bytes():
    a = render_png(ImageRecipe("screen", "s1"), seed=3)
    assert a == render_png(ImageRecipe("screen", "s1"), seed=3)
    assert a != render_png(ImageRecipe("screen", "s2"), seed=3)
    assert a != render_png(ImageRecipe("screen", "s1"), seed=4)


def test_same_shape_images_differ_only_in_colour():
    a = _pixels(render_png(ImageRecipe("shape", "a", shape="square"), seed=0))
    b = _pixels(render_png(ImageRecipe("shape", "b", shape="square"), seed=0))
    assert a != b
    mask_a = [p == a[0] for p in a]  # background vs shape, by the corner colour
    mask_b = [p == b[0] for p in b]
    assert mask_a == mask_b


def test_png_metadata_is_read_from_the_ihdr_like_gym():
    part = ImageSpec(key="k", width=40, height=20).part(0)
    assert png_source_metadata(part) == ((40, 20), "RGB", "png")
    assert png_source_metadata({"type": "input_image", "image_url": "data:image/jpeg;base64,AAAA"}) == (None, None, "jpeg")
    assert png_source_metadata({"type": "input_image", "image_url": "https://example.invalid/x.png"}) == (None, None, None)


def test_media_id_covers_the_whole_part_including_detail():
    url = png_data_url(render_png(ImageRecipe("screen", "k"), seed=0))
    assert media_id_for({"type": "input_image", "image_url": url, "detail": "auto"}) != media_id_for(
        {"type": "input_image", "image_url": url, "detail": "high"})


def test_arena_exports_every_image_once_in_first_seen_order():
    arena = MediaArena()
    parts = [ImageSpec(key=k).part(0) for k in ("a", "b", "a")]
    ids = [arena.register(p) for p in parts]
    assert ids[0] == ids[2] and ids[0] != ids[1]
    exported = arena.export()
    assert list(exported) == [ids[0], ids[1]]
    assert list(exported[ids[0]]) == ["media_id", "content_digest", "source_part", "original_dimensions",
                                      "color_mode", "source_format"]
    with pytest.raises(ValueError, match="Unknown media ID 'media-nope'"):
        arena.resolve("media-nope")


def test_repeated_and_reordered_patterns_reuse_media_ids():
    repeated = scripted_turns(0, turns=5, image_pattern="repeated")
    keys = [t.tool_results[0].images[0].key for t in repeated[:-1]]
    assert keys == ["repeated-1", "repeated-0", "repeated-1", "repeated-0"]
    reordered = scripted_turns(0, turns=3, image_pattern="reordered", images_per_observation=2)
    assert [[im.key for im in t.tool_results[0].images] for t in reordered[:-1]] == [
        ["pair-0", "pair-1"], ["pair-1", "pair-0"]]
    assert {im.shape for t in repeated[:-1] + reordered[:-1] for im in t.tool_results[0].images} == {"circle"}


def test_image_recipe_rejects_bad_sizes_and_shapeless_shapes():
    with pytest.raises(ValueError, match="image size 2x24"):
        ImageRecipe("screen", "k", width=2)
    with pytest.raises(ValueError, match="a shape image needs shape="):
        ImageRecipe("shape", "k")


def test_data_url_round_trips_the_png_bytes():
    png = render_png(ImageRecipe("shape", "k", shape="circle"), seed=1)
    url = png_data_url(png)
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png


@pytest.mark.parametrize(("width", "height"), [(4, 4), (4, 5), (5, 4), (6, 6)])
def test_smallest_allowed_screens_render_for_many_keys(width, height):
    for key in range(40):
        png = render_png(ImageRecipe(kind="screen", key=f"k{key}", width=width, height=height), seed=3)
        assert png.startswith(b"\x89PNG")


@pytest.mark.parametrize(("mode", "raw_shape"), [("RGBA", (24, 32, 4)), ("L", (24, 32)), ("P", (24, 32))])
def test_image_modes_save_that_mode_and_keep_the_rgb_pixels_where_they_can(mode: str, raw_shape: tuple[int, ...]):
    rgb = render_png(ImageRecipe("screen", "s1"), seed=3)
    png = render_png(ImageRecipe("screen", "s1", mode=mode), seed=3)  # type: ignore[arg-type]
    image = Image.open(io.BytesIO(png))
    assert image.mode == mode and png == render_png(ImageRecipe("screen", "s1", mode=mode), seed=3)  # type: ignore[arg-type]
    assert np.asarray(image).shape == raw_shape
    if mode != "L":  # alpha is dropped by the RGB conversion; a 16-colour palette holds every screen colour
        assert _pixels(png) == _pixels(rgb)
    assert ImageSpec(key="s1", mode=mode).recipe().mode == mode
