"""Prompt chunks reused across prompts never change a number: sampling does not depend on request history.

A prompt is computed in fixed chunks whether or not they were cached, so a warm decoder (chunks
taken from the cache) and a cold one (a fresh copy of the same weights) must agree bit for bit,
on the next-token distribution and on every key and value of the prompt.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.policy import TinyPolicy, configure_determinism
from compactsim.harness.core.prefix_cache import CHUNK, Chunk, PrefixCache, chain_digest


def _cold(model: TinyPolicy) -> TinyPolicy:
    """The same weights in a new model: its decoder starts with an empty prefix cache."""
    fresh = TinyPolicy(model.config).to(model.dtype).eval()
    fresh.load_state_dict(model.state_dict())
    return fresh


def _prompt(n: int, salt: int = 0) -> list[int]:
    return [40 + (7 * i + salt) % 90 for i in range(n)]


def _assert_same_state(a, b, length: int) -> None:
    np.testing.assert_array_equal(a.logprobs, b.logprobs)
    for ka, kb, va, vb in zip(a.cache.keys, b.cache.keys, a.cache.values, b.cache.values, strict=True):
        np.testing.assert_array_equal(ka[:, :, :length], kb[:, :, :length])
        np.testing.assert_array_equal(va[:, :length], vb[:, :length])


def _image(seed: int) -> torch.Tensor:
    return torch.rand(3, 20, 20, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("length", [1, CHUNK - 1, CHUNK, 2 * CHUNK, 3 * CHUNK + 5])
def test_a_warm_prompt_equals_a_cold_one_bit_for_bit(dtype: torch.dtype, length: int) -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(3, dtype=dtype)
    prompt = _prompt(length)
    first = model.start_decoding(prompt)
    again = model.start_decoding(prompt)  # every full chunk from the cache (a prompt of exactly k chunks: none computed)
    cold = _cold(model).start_decoding(prompt)
    decoder = again.decoder
    assert len(decoder.prefixes) == length // CHUNK and decoder.prefixes.hits == length // CHUNK
    _assert_same_state(first, again, length)
    _assert_same_state(again, cold, length)


def test_a_shared_start_is_reused_and_the_rest_is_computed() -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(4, dtype=torch.float64)
    a, b = _prompt(3 * CHUNK + 7), _prompt(3 * CHUNK + 7)
    b[2 * CHUNK + 3] = 99 if b[2 * CHUNK + 3] != 99 else 98  # differs inside the third chunk
    model.start_decoding(a)
    prefixes = model.start_decoding(a).decoder.prefixes
    hits = prefixes.hits
    state = model.start_decoding(b)
    assert prefixes.hits == hits + 2  # the first two chunks; the third differs, so it and its successors are computed
    _assert_same_state(state, _cold(model).start_decoding(b), len(b))
    np.testing.assert_allclose(state.logprobs, model.next_token_logprobs(b).numpy(), rtol=0, atol=1e-12)


def test_images_are_part_of_the_key() -> None:
    """Two prompts with the same token ids but different pixels share no chunk after the first image."""
    configure_determinism()
    model = TinyPolicy.from_seed(5, dtype=torch.float64)
    prompt = _prompt(CHUNK + 3) + [tok.IMAGE] * tok.IMAGE_PATCH_TOKENS + _prompt(2 * CHUNK, salt=1)
    first = model.start_decoding(prompt, [_image(1)])
    prefixes = first.decoder.prefixes
    hits = prefixes.hits
    other = model.start_decoding(prompt, [_image(2)])
    assert prefixes.hits == hits + 1  # only the chunk before the image
    for images, state in (([_image(1)], first), ([_image(2)], other)):
        np.testing.assert_allclose(state.logprobs, model.next_token_logprobs(prompt, images).numpy(), rtol=0, atol=1e-12)
    assert float(np.abs(first.logprobs - other.logprobs).max()) > 1e-6


def test_new_weights_start_with_an_empty_cache() -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(6, dtype=torch.float64)
    prompt = _prompt(2 * CHUNK + 1)
    before = model.start_decoding(prompt)
    with torch.no_grad():
        model.blocks[0].qkv.weight.mul_(1.25)
    after = model.start_decoding(prompt)
    assert after.decoder is not before.decoder and after.decoder.prefixes.hits == 0
    np.testing.assert_allclose(after.logprobs, model.next_token_logprobs(prompt).numpy(), rtol=0, atol=1e-12)


def test_the_cache_keeps_its_byte_bound_dropping_the_least_recently_used() -> None:
    def chunk(value: float) -> Chunk:
        return Chunk(keys=np.full((1, 2, 4, CHUNK), value), values=np.full((1, 2, CHUNK, 4), value), last=np.zeros(4))

    size = chunk(0).nbytes
    cache = PrefixCache(max_bytes=2 * size)
    keys = [chain_digest(b"", np.full((CHUNK, 4), i, dtype=np.float64)) for i in range(3)]
    assert len(set(keys)) == 3
    cache.put(keys[0], chunk(0))
    cache.put(keys[1], chunk(1))
    assert cache.get(keys[0]) is not None  # keys[0] is now the most recently used
    cache.put(keys[2], chunk(2))  # over the bound: keys[1] goes
    assert len(cache) == 2 and cache.get(keys[1]) is None
    assert float(cache.get(keys[2]).keys[0, 0, 0, 0]) == 2.0
    PrefixCache(max_bytes=size - 1).put(keys[0], chunk(0))  # larger than the whole bound: not kept, no error
    assert (cache.hits, cache.misses) == (2, 1)


def test_the_chain_digest_depends_on_every_earlier_row() -> None:
    rows = np.arange(2 * CHUNK * 4, dtype=np.float64).reshape(2 * CHUNK, 4)
    first = chain_digest(b"", rows[:CHUNK])
    second = chain_digest(first, rows[CHUNK:])
    changed = rows.copy()
    changed[0, 0] += 1.0
    assert chain_digest(chain_digest(b"", changed[:CHUNK]), changed[CHUNK:]) != second
    assert chain_digest(b"", rows[CHUNK:]) != second  # the same rows at another depth
    assert chain_digest(b"", rows[:CHUNK].astype(np.float32)) != first  # the dtype's bytes differ

