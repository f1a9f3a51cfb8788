"""The tiny MoE policy: seeded init, router replay, image sensitivity, batched logprobs, save/load."""

from __future__ import annotations

import pytest
import torch

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.policy import PolicyConfig, TinyPolicy, configure_determinism

IDS = [tok.BOS, tok.TURN_START, tok.ROLE_USER, *tok.encode_text("look"), *[tok.IMAGE] * 4, tok.TURN_END,
       tok.TURN_START, tok.ROLE_ASSISTANT, *tok.encode_text("ok")]


@pytest.fixture(scope="module")
def model() -> TinyPolicy:
    configure_determinism()
    return TinyPolicy.from_seed(11, dtype=torch.float64)


def _image(seed: int, h: int = 9, w: int = 13) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(3, h, w, generator=g, dtype=torch.float64)


def test_same_seed_gives_identical_weights_and_another_seed_differs():
    a, b, c = (TinyPolicy.from_seed(s, dtype=torch.float64) for s in (5, 5, 6))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.tok_emb.weight, c.tok_emb.weight)


def test_float32_weights_are_the_float64_draws_rounded():
    w64 = TinyPolicy.from_seed(5, dtype=torch.float64).lm_head.weight
    w32 = TinyPolicy.from_seed(5, dtype=torch.float32).lm_head.weight
    assert torch.equal(w64.to(torch.float32), w32)


def test_next_token_logprobs_is_a_full_vocabulary_log_softmax(model):
    lp = model.next_token_logprobs(IDS, [_image(0)])
    assert lp.shape == (tok.VOCAB_SIZE,)
    assert abs(float(lp.exp().sum()) - 1.0) < 1e-12


def test_replaying_own_routes_reproduces_logits_exactly(model):
    ids = torch.tensor([IDS])
    own = model(ids, [[_image(0)]])
    replayed = model(ids, [[_image(0)]], own.routes)
    assert torch.equal(own.logits, replayed.logits)
    assert torch.equal(own.routes, replayed.routes)
    assert own.routes.shape == (1, len(IDS), 2, 2)


def test_all_minus_one_rows_use_the_models_own_router(model):
    ids = torch.tensor([IDS])
    own = model(ids, [[_image(0)]])
    unset = torch.full_like(own.routes, -1)
    assert torch.equal(model(ids, [[_image(0)]], unset).logits, own.logits)


def test_replaying_other_routes_changes_logits(model):
    ids = torch.tensor([IDS])
    own = model(ids, [[_image(0)]])
    other = (own.routes + 1) % 4  # still K distinct experts per row
    out = model(ids, [[_image(0)]], other)
    assert torch.equal(out.routes, other)
    assert not torch.allclose(out.logits, own.logits)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r.__setitem__((0, 3, 1, 0), -1), "routes row (b, s, layer)=(0, 3, 1) mixes -1 with expert ids"),
        (lambda r: r.__setitem__((0, 2, 0, 1), 4), "routes[0, 2, 0, 1]=4: expected -1 or an expert id in [0, 4)"),
        (lambda r: r[0, 5, 0].copy_(torch.tensor([2, 2])), "routes row (b, s, layer)=(0, 5, 0) repeats an expert id"),
    ],
)
def test_corrupt_routes_are_rejected(model, edit, message):
    ids = torch.tensor([IDS])
    routes = model(ids, [[_image(0)]]).routes.clone()
    edit(routes)
    with pytest.raises(ConfigError) as err:
        model(ids, [[_image(0)]], routes)
    assert err.value.code == "invalid_argument"
    assert message in str(err.value)


def test_routes_of_the_wrong_shape_are_rejected(model):
    with pytest.raises(ConfigError) as err:
        model(torch.tensor([IDS]), [[_image(0)]], torch.zeros(1, len(IDS), 2, 3, dtype=torch.long))
    assert f"routes has shape (1, {len(IDS)}, 2, 3); expected (1, {len(IDS)}, 2, 2)" in str(err.value)


def test_a_different_image_changes_the_logprobs(model):
    a = model.next_token_logprobs(IDS, [_image(0)])
    b = model.next_token_logprobs(IDS, [_image(1)])
    assert float((a - b).abs().max()) > 1e-3


def test_image_count_must_match_placeholder_tokens(model):
    with pytest.raises(ConfigError) as err:
        model.next_token_logprobs(IDS, [])
    assert "row 0: 4 <|image|> tokens but 0 images x 4 patches" in str(err.value)


def test_token_logprobs_on_padded_rows_match_single_sequences(model):
    short = [tok.BOS, *tok.encode_text("plain text row")]
    routes_short = model.own_routes(short)
    s = len(IDS)
    ids = torch.full((2, s), tok.PAD, dtype=torch.long)
    ids[0] = torch.tensor(IDS)
    ids[1, : len(short)] = torch.tensor(short)
    routes = torch.full((2, s, 2, 2), -1, dtype=torch.long)
    routes[1, : len(short)] = routes_short
    out = model.token_logprobs(ids, [[_image(0)], []], routes, lengths=[s, len(short)]).detach()
    assert out.shape == (2, s)
    for row, seq, imgs in ((0, IDS, [_image(0)]), (1, short, [])):
        full, _ = model.sequence_logprobs(seq, imgs)
        want = full[:-1].gather(-1, torch.tensor(seq[1:])[:, None])[:, 0]
        assert float(out[row, 0]) == 0.0
        assert float((out[row, 1: len(seq)] - want).abs().max()) <= 1e-12
    assert torch.equal(out[1, len(short):], torch.zeros(s - len(short), dtype=torch.float64))


def test_token_logprobs_are_differentiable(model):
    m = TinyPolicy.from_seed(3, dtype=torch.float64)
    m.train()
    out = m.token_logprobs(torch.tensor([IDS]), [[_image(0)]])
    out.sum().backward()
    assert m.blocks[0].w_in.grad is not None and m.blocks[0].router.weight.grad is not None
    assert m.patch_proj.weight.grad is not None and float(m.patch_proj.weight.grad.abs().sum()) > 0


def test_cached_decoding_matches_a_full_forward(model):
    prompt, more = IDS, tok.encode_text("abc")
    full, _ = model.sequence_logprobs(prompt + more, [_image(0)])
    state = model.start_decoding(prompt, [_image(0)])
    assert float(abs(state.logprobs - full[len(prompt) - 1].numpy()).max()) <= 1e-12
    state = model.extend_decoding(state, more)
    assert float(abs(state.logprobs - full[-1].numpy()).max()) <= 1e-12


def test_save_and_load_round_trip_bit_exactly(model, tmp_path):
    path = tmp_path / "w.pt"
    model.save(path)
    loaded = TinyPolicy.load(path)
    assert loaded.dtype == torch.float64
    assert torch.equal(loaded.next_token_logprobs(IDS, [_image(0)]), model.next_token_logprobs(IDS, [_image(0)]))


def test_load_bytes_rejects_a_payload_that_is_not_policy_weights():
    with pytest.raises(ConfigError) as err:
        TinyPolicy.load_bytes(b"not a checkpoint")
    assert err.value.code == "invalid_argument"
    assert "weights payload does not load" in str(err.value)


def _payload(model: TinyPolicy, **edits) -> bytes:
    """`model`'s weights payload with top-level parts replaced (`config=`, `state_dict=`) or dropped (`None`)."""
    import io
    from dataclasses import asdict

    obj = {"format": "compactsim-tiny-policy/1", "config": asdict(model.config), "state_dict": model.state_dict()}
    for key, value in edits.items():
        if value is None:
            obj.pop(key)
        else:
            obj[key] = value(obj[key]) if callable(value) else value
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _config(**changes):
    return lambda config: {**config, **changes}


@pytest.mark.parametrize(("edits", "says"), [
    ({"config": None}, "weights payload has no 'config' mapping (found NoneType)"),
    ({"state_dict": None}, "weights 'state_dict' must map parameter names to tensors"),
    ({"state_dict": [1]}, "weights 'state_dict' must map parameter names to tensors"),
    ({"state_dict": {"tok_emb.weight": [1.0]}}, "weights 'state_dict' must map parameter names to tensors"),
    ({"config": _config(n_heads=0)}, "n_heads=0: expected an int in [1, 65536]"),
    ({"config": _config(d_model="64")}, "d_model='64': expected an int in [1, 65536]"),
    ({"config": _config(n_layers=2.5)}, "n_layers=2.5: expected an int in [1, 65536]"),
    ({"config": _config(top_k=True)}, "top_k=True: expected an int in [1, 65536]"),
    ({"config": _config(d_model=-4)}, "d_model=-4: expected an int in [1, 65536]"),
    ({"config": _config(vocab_size=2**40)}, "vocab_size=1099511627776: expected an int in [1, 65536]"),
    ({"config": _config(n_layers=60_000)}, "parameters; the limit is 50000000"),  # ~300 GB before: now refused unbuilt
    ({"config": _config(heads=4)}, "weights config has unknown key(s) ['heads']"),
    ({"state_dict": lambda sd: {**sd, "tok_emb.weight": sd["tok_emb.weight"].long()}},
     "entry 'tok_emb.weight' is torch.int64; parameters are real floating-point tensors"),
    ({"state_dict": lambda sd: {**sd, "patch_pos": sd["patch_pos"].to(torch.complex128)}},
     "entry 'patch_pos' is torch.complex128"),
])
def test_crafted_weights_are_refused_before_a_model_is_built_naming_the_part(model, edits, says):
    with pytest.raises(ConfigError) as err:
        TinyPolicy.load_bytes(_payload(model, **edits))
    assert err.value.code == "invalid_argument"
    assert says in str(err.value)


def test_weights_for_another_policy_shape_are_refused_when_a_shape_is_expected(model):
    other = TinyPolicy(PolicyConfig(n_layers=1, vocab_size=400))
    with pytest.raises(ConfigError, match=r"another policy shape: vocab_size 400 \(this policy: 288\); n_layers 1 "
                                          r"\(this policy: 2\)"):
        TinyPolicy.load_bytes(other.to_bytes(), expect=model.config)
    assert TinyPolicy.load_bytes(model.to_bytes(), expect=PolicyConfig()).config == model.config


def test_invalid_config_lists_every_violation():
    with pytest.raises(ConfigError) as err:
        PolicyConfig(d_model=66, n_heads=4, top_k=5, n_experts=4).check()
    assert err.value.code == "invalid_config"
    assert err.value.violations == ("d_model=66 is not divisible by n_heads=4", "top_k=5: expected 1 <= top_k <= n_experts=4")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_float64_logprobs_match_cpu(model):
    cuda = TinyPolicy.load_bytes(model.to_bytes(), device="cuda")
    a = model.next_token_logprobs(IDS, [_image(0)])
    b = cuda.next_token_logprobs(IDS, [_image(0)]).cpu()
    assert float((a - b).abs().max()) <= 1e-10
    assert torch.equal(model.own_routes(IDS, [_image(0)]), cuda.own_routes(IDS, [_image(0)]).cpu())
