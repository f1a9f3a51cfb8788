"""Sampling-time decoding agrees with the torch model, and its cache never mixes sequences.

Policy-mode sampling draws by inverse CDF from `DecodeState.logprobs`. On the CPU those come from
`numpy_decoding` (the model's arithmetic in compiled and numpy kernels), elsewhere from the blocks' own
`forward` with a KV cache. Either must equal a full torch forward to rounding, so the same
tokens are drawn; the reference here is that forward (`next_token_logprobs`), recomputed from
scratch for every prefix.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.policy import PolicyConfig, TinyPolicy, configure_determinism
from compactsim.mock_servers.model_server.sampling import sample_text_token

#: Largest difference from a full forward seen over these draws is ~1e-14 (float64) and ~3e-6
#: (float32); the bounds leave a decade of room and still catch any wrong operation.
TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-4}


def _image(seed: int) -> torch.Tensor:
    return torch.rand(3, 18 + seed % 5, 22, generator=torch.Generator().manual_seed(seed))


def _full(model: TinyPolicy, ids: list[int], images: list[torch.Tensor]) -> np.ndarray:
    return model.next_token_logprobs(ids, images).to(torch.float64).numpy()


def _walk(model: TinyPolicy, seed: int, dtype: torch.dtype, *, numpy: bool | None = None) -> int:
    """Random prompts (with images) and extensions of 1-5 tokens: every state against a full forward."""
    r = random.Random(seed)
    checked = 0
    for _ in range(4):
        prompt = [r.randrange(17, tok.VOCAB_SIZE) for _ in range(r.randint(1, 300))]
        images = [_image(r.randrange(100)) for _ in range(r.randint(0, 2))]
        for _img in images:
            at = r.randint(0, len(prompt))
            prompt[at:at] = [tok.IMAGE] * tok.IMAGE_PATCH_TOKENS
        state = model.start_decoding(prompt, images, numpy=numpy)
        ids = list(prompt)
        for _step in range(10):
            assert state.length == len(ids)
            assert state.logprobs.dtype == np.float64 and state.logprobs.shape == (model.config.vocab_size,)
            np.testing.assert_allclose(state.logprobs, _full(model, ids, images), rtol=0, atol=TOLERANCE[dtype])
            checked += 1
            more = [r.randrange(17, tok.VOCAB_SIZE) for _ in range(r.choice([1, 1, 1, 2, 5]))]
            state = model.extend_decoding(state, more)
            ids += more
    return checked


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("config", [PolicyConfig(), PolicyConfig(n_layers=1, n_experts=3, top_k=1), PolicyConfig(top_k=3)])
def test_numpy_decoding_equals_a_full_forward(dtype: torch.dtype, config: PolicyConfig) -> None:
    configure_determinism()
    assert _walk(TinyPolicy.from_seed(5, config, dtype=dtype), 7, dtype) == 40


def test_module_path_decoding_equals_a_full_forward() -> None:
    """Off the CPU (GPU), decoding runs the blocks' `forward` with the cache; checked here on the CPU."""
    configure_determinism()
    model = TinyPolicy.from_seed(5, dtype=torch.float64)
    assert model.start_decoding([40, 41]).decoder is not None  # the CPU's default
    assert model.start_decoding([40, 41], numpy=False).decoder is None
    assert _walk(model, 8, torch.float64, numpy=False) == 40


def test_both_paths_sample_the_same_tokens() -> None:
    """What the agreement is for: 200 inverse-CDF draws, the same token from either path."""
    configure_determinism()
    model = TinyPolicy.from_seed(3, dtype=torch.float64)

    def sample(numpy_path: bool) -> list[int]:
        state, out = model.start_decoding(tok.encode_text("hello"), numpy=numpy_path), []
        for position in range(200):
            t = sample_text_token(state.logprobs, seed=11, request_digest="d", position=position)
            out.append(t)
            state = model.extend_decoding(state, [t])
        return out

    a, b = sample(True), sample(False)
    assert a == b and len(set(a)) > 20


def test_a_cache_outgrowing_its_room_stays_exact() -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(2, dtype=torch.float64)
    state = model.start_decoding([40, 41, 42])
    ids = [40, 41, 42]
    for chunk in (200, 300, 5, 900):  # past the headroom and the position table: both are rebuilt, larger
        more = [50 + i % 40 for i in range(chunk)]
        state = model.extend_decoding(state, more)
        ids += more
        np.testing.assert_allclose(state.logprobs, _full(model, ids, []), rtol=0, atol=1e-12)
    assert state.cache.capacity >= len(ids) and state.decoder.positions.shape[0] >= len(ids)


def test_extending_an_older_state_branches_without_touching_the_newer_one() -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(4, dtype=torch.float64)
    root = model.start_decoding([40, 41, 42])
    left = model.extend_decoding(root, [60, 61])
    right = model.extend_decoding(root, [70])  # root is no longer the cache's newest state: a copy
    assert right.cache is not left.cache
    left2 = model.extend_decoding(left, [62])  # left still owns the shared cache: extended in place
    assert left2.cache is left.cache
    np.testing.assert_allclose(right.logprobs, _full(model, [40, 41, 42, 70], []), rtol=0, atol=1e-12)
    np.testing.assert_allclose(left2.logprobs, _full(model, [40, 41, 42, 60, 61, 62], []), rtol=0, atol=1e-12)
    again = model.extend_decoding(right, [71])
    np.testing.assert_allclose(again.logprobs, _full(model, [40, 41, 42, 70, 71], []), rtol=0, atol=1e-12)


def test_weights_changed_in_place_are_read_again() -> None:
    """The numpy copy of the weights is kept between sequences only while no parameter changed."""
    configure_determinism()
    model = TinyPolicy.from_seed(6, dtype=torch.float64)
    first = model.start_decoding([40, 41])
    assert model.start_decoding([40, 41]).decoder is first.decoder
    with torch.no_grad():
        model.blocks[1].w_out.mul_(1.5)
    after = model.start_decoding([40, 41])
    assert after.decoder is not first.decoder
    np.testing.assert_allclose(after.logprobs, _full(model, [40, 41], []), rtol=0, atol=1e-12)
    assert float(np.abs(after.logprobs - first.logprobs).max()) > 1e-3


def test_start_decoding_refuses_an_empty_or_out_of_vocabulary_prompt() -> None:
    model = TinyPolicy.from_seed(1, dtype=torch.float64)
    for bad in ([], [40, -1], [model.config.vocab_size]):
        with pytest.raises(ConfigError, match="non-empty list of ids"):
            model.start_decoding(bad)


def test_extend_decoding_refuses_image_and_out_of_vocabulary_tokens_and_ignores_nothing() -> None:
    model = TinyPolicy.from_seed(1, dtype=torch.float64)
    state = model.start_decoding([40, 41])
    assert model.extend_decoding(state, []) is state
    with pytest.raises(ConfigError, match="image"):
        model.extend_decoding(state, [40, tok.IMAGE])
    for bad in (-1, model.config.vocab_size):
        with pytest.raises(ConfigError, match="outside"):
            model.extend_decoding(state, [40, bad])
