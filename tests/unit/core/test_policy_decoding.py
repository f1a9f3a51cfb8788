"""The decode fast path samples from exactly the numbers the module path gives (bit for bit).

Policy-mode sampling draws by inverse CDF from `DecodeState.logprobs`, so a single changed bit
could change a sampled token and with it every artifact of a run. The reference here runs the
blocks' own `forward` with the KV cache and the final norm/head as modules, as decoding did
before the fast path.
"""

from __future__ import annotations

import random

import pytest
import torch

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.policy import PolicyConfig, TinyPolicy, _positions, _rowwise_positions, _sinusoid, configure_determinism


def _reference(model: TinyPolicy, ids: list[int], images: list[torch.Tensor], past, offset: int):
    with torch.no_grad():
        x = torch.tensor(ids, dtype=torch.long)[None]
        h = model.tok_emb(x)
        is_img = x == tok.IMAGE
        if bool(is_img.any()):
            bidx, sidx = is_img.nonzero(as_tuple=True)
            h = h.index_put((bidx, sidx), model.embed_images(images))
        h = h + _sinusoid(offset + x.shape[1], model.config.d_model, dtype=h.dtype, device=h.device)[offset:]
        new_past = []
        for layer, block in enumerate(model.blocks):
            h, _, kv = block(h, None, None if past is None else past[layer])
            new_past.append(kv)
        return tuple(new_past), model.lm_head(model.ln_f(h[0, -1])).log_softmax(-1)


def _image(seed: int) -> torch.Tensor:
    return torch.rand(3, 18 + seed % 5, 22, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("config", [PolicyConfig(), PolicyConfig(n_layers=1, n_experts=3, top_k=1)])
def test_decoding_is_bit_identical_to_the_module_path(dtype: torch.dtype, config: PolicyConfig) -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(5, config, dtype=dtype)
    r = random.Random(7)
    for _ in range(6):
        prompt = [r.randrange(17, tok.VOCAB_SIZE) for _ in range(r.randint(1, 300))]
        images = [_image(r.randrange(100)) for _ in range(r.randint(0, 2))]
        for _img in images:
            at = r.randint(0, len(prompt))
            prompt[at:at] = [tok.IMAGE] * tok.IMAGE_PATCH_TOKENS
        state = model.start_decoding(prompt, images)
        past, want = _reference(model, prompt, images, None, 0)
        assert torch.equal(state.logprobs, want)
        length = len(prompt)
        for _step in range(12):
            more = [r.randrange(17, tok.VOCAB_SIZE) for _ in range(r.choice([1, 1, 1, 2, 5]))]
            state = model.extend_decoding(state, more)
            past, want = _reference(model, more, [], past, length)
            length += len(more)
            assert state.length == length
            assert torch.equal(state.logprobs, want)
            assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(state.past, past, strict=True))


def test_a_state_outgrowing_its_position_table_stays_exact() -> None:
    configure_determinism()
    model = TinyPolicy.from_seed(2, dtype=torch.float64)
    state = model.start_decoding([40, 41, 42])
    past, _ = _reference(model, [40, 41, 42], [], None, 0)
    length = 3
    for chunk in (200, 300, 5):  # past the initial headroom: the table is rebuilt, larger
        more = [50 + i % 40 for i in range(chunk)]
        state = model.extend_decoding(state, more)
        past, want = _reference(model, more, [], past, length)
        length += chunk
        assert torch.equal(state.logprobs, want)


def test_position_rows_equal_the_full_table_when_rowwise() -> None:
    configure_determinism()
    d = PolicyConfig().d_model
    assert _rowwise_positions(d, torch.device("cpu"))
    for dtype in (torch.float32, torch.float64):
        table = _sinusoid(3000, d, dtype=dtype, device=torch.device("cpu"))
        for offset, n in ((0, 1), (0, 3000), (17, 1), (999, 64), (2047, 953)):
            assert torch.equal(_positions(offset, n, d, dtype=dtype, device=torch.device("cpu")), table[offset: offset + n])
            assert torch.equal(_sinusoid(offset + n, d, dtype=dtype, device=torch.device("cpu"))[offset:], table[offset: offset + n])


def test_extend_decoding_refuses_image_tokens_and_ignores_nothing() -> None:
    model = TinyPolicy.from_seed(1, dtype=torch.float64)
    state = model.start_decoding([40, 41])
    assert model.extend_decoding(state, []) is state
    with pytest.raises(Exception, match="image"):
        model.extend_decoding(state, [40, tok.IMAGE])
