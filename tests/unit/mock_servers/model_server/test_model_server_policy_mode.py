"""Policy mode: true logprobs and routes of the tiny policy, replayable offline; weight updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compactsim.harness.core import chat_template as ct
from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.images import decode_data_url
from compactsim.harness.core.policy import TinyPolicy
from compactsim.mock_servers.model_server import ServerSettings
from compactsim.mock_servers.model_server.sampling import TEXT_ALPHABET
from tests.unit.mock_servers.model_server.server_builders import IMAGE_URL, SCRIPT, chat_body, client_for, meta, user_items


def _offline(policy: TinyPolicy, prompt: list[int], sampled: list[int], with_image: bool):
    images = [decode_data_url(IMAGE_URL, dtype=torch.float64)] if with_image else []
    full = torch.tensor([prompt + sampled])
    logp = policy.token_logprobs(full, [images]).detach()[0, len(prompt):]
    return logp, images


def test_policy_logprobs_equal_an_offline_recompute(policy_settings):
    with client_for(policy_settings) as c:
        out = c.post("/v1/responses", json={"input": user_items(), "metadata": meta("r1", 1)}).json()["output"][-1]
    prompt, sampled = out["prompt_token_ids"], out["generation_token_ids"]
    policy = TinyPolicy.from_seed(7, dtype=torch.float64)
    logp, _ = _offline(policy, prompt, sampled, with_image=True)
    served = torch.tensor(out["generation_log_probs"], dtype=torch.float64)
    assert served.shape == logp.shape
    assert float((served - logp).abs().max()) <= 1e-12


def test_policy_routes_are_the_models_own_and_replay_reproduces_logits(policy_settings):
    with client_for(policy_settings) as c:
        out = c.post("/v1/responses", json={"input": user_items(), "metadata": meta("r1", 2)}).json()["output"][-1]
    prompt, sampled = out["prompt_token_ids"], out["generation_token_ids"]
    routes = torch.tensor(out["routed_experts"])
    policy = TinyPolicy.from_seed(7, dtype=torch.float64)
    images = [decode_data_url(IMAGE_URL, dtype=torch.float64)]
    seq = torch.tensor([prompt + sampled])
    own = policy(seq, [images])
    assert routes.shape == (len(prompt) + len(sampled), 2, 2)
    assert torch.equal(routes[:-1], own.routes[0, :-1])
    assert routes[-1].tolist() == [[0, 1], [0, 1]]  # vLLM's final-token placeholder
    replay = routes.clone()[None]
    replay[0, -1] = -1  # the placeholder is repaired as "use own router"
    assert torch.equal(policy(seq, [images], replay).logits, own.logits)


def test_policy_mode_keeps_script_structure_and_samples_printable_text(policy_settings):
    with client_for(policy_settings) as c:
        out = c.post("/v1/responses", json={"input": user_items(), "metadata": meta("r1", 2)}).json()["output"]
    assert [o["type"] for o in out] == ["reasoning", "function_call"]
    assert (out[1]["name"], out[1]["arguments"]) == ("click", '{"x":5}')
    text = out[0]["summary"][0]["text"]
    assert len(text) == len("click it")
    assert all(tok.BYTE_OFFSET + ord(ch) in TEXT_ALPHABET for ch in text)
    assert out[-1]["generation_token_ids"] == ct.encode_action(
        ct.AssistantAction(reasoning=text, tool_calls=(ct.ToolCall("click", '{"x":5}'),)))


def test_chat_policy_logprobs_and_top_logprobs_are_full_vocabulary_values(policy_settings):
    body = chat_body(top_logprobs=3, max_tokens=6)
    with client_for(policy_settings) as c:
        data = c.post("/v1/chat/completions", json=body).json()
    choice = data["choices"][0]
    prompt, sampled = data["prompt_token_ids"], choice["token_ids"]
    policy = TinyPolicy.from_seed(7, dtype=torch.float64)
    full, _ = policy.sequence_logprobs(prompt + sampled)
    for i, entry in enumerate(choice["logprobs"]["content"]):
        row = full[len(prompt) - 1 + i]
        assert abs(entry["logprob"] - float(row[sampled[i]])) <= 1e-12
        top = torch.topk(row, 3)
        assert [e["token"] for e in entry["top_logprobs"]] == [f"token_id:{int(j)}" for j in top.indices]
        assert max(abs(e["logprob"] - float(v)) for e, v in zip(entry["top_logprobs"], top.values)) <= 1e-12


def test_loading_weights_bumps_policy_version_and_changes_logprobs(policy_settings):
    new = TinyPolicy.from_seed(99, dtype=torch.float64)
    body = {"input": user_items(image=False), "metadata": meta("r1", 3)}
    with client_for(policy_settings) as c:
        before = c.post("/v1/responses", json=body).json()
        r = c.post("/weights", content=new.to_bytes(), headers={"content-type": "application/octet-stream"})
        after = c.post("/v1/responses", json=body).json()
        seeded = c.post("/weights", json={"seed": 7}).json()
        again = c.post("/v1/responses", json=body).json()
        health = c.get("/health").json()
    assert r.status_code == 200 and r.json()["policy_version"] == 1
    assert (before["policy_version"], after["policy_version"], seeded["policy_version"], again["policy_version"]) == (0, 1, 2, 2)
    assert health["policy_version"] == 2
    last = after["output"][-1]
    logp, _ = _offline(new, last["prompt_token_ids"], last["generation_token_ids"], with_image=False)
    assert float((torch.tensor(last["generation_log_probs"], dtype=torch.float64) - logp).abs().max()) <= 1e-12
    assert again["output"][-1]["generation_log_probs"] == before["output"][-1]["generation_log_probs"]


def test_a_seed_is_read_whatever_the_case_and_parameters_of_its_media_type(policy_settings):
    with client_for(policy_settings) as c:
        versions = [c.post("/weights", content=b'{"seed": 3}', headers={"content-type": t}).json()["policy_version"]
                    for t in ("Application/JSON", "application/json; charset=utf-8", " APPLICATION/json ")]
    assert versions == [1, 2, 3]


def test_weights_that_are_not_a_policy_checkpoint_get_422(policy_settings):
    with client_for(policy_settings) as c:
        r = c.post("/weights", content=b"\x80\x02garbage", headers={"content-type": "application/octet-stream"})
        bad_seed = c.post("/weights", json={"seed": -1})
        typo_seeds = [c.post("/weights", json={"seed": v}).status_code for v in (True, "1", 1.0)]
        version = c.get("/weights").json()["policy_version"]
    assert r.status_code == 422
    assert r.json()["detail"].startswith("body: weights payload does not load")
    assert bad_seed.status_code == 422
    assert bad_seed.json()["detail"][0]["loc"] == ["body", "seed"]
    assert typo_seeds == [422, 422, 422]  # true, "1" and 1.0 are not seeds (they used to load seed 1)
    assert version == 0


def test_weights_for_another_policy_shape_get_422_and_the_served_weights_stay(policy_settings):
    """A push carries its own config: a wider vocabulary made every later top-logprobs answer a 500, a 64-layer
    256-expert router made each answer a 12 MB amplifier. The server takes weights of its own shape only."""
    from compactsim.harness.core.policy import PolicyConfig

    wider = TinyPolicy.from_seed(3, PolicyConfig(vocab_size=400), dtype=torch.float64)
    huge_router = TinyPolicy(PolicyConfig(d_model=4, n_heads=1, d_expert=1, n_layers=64, n_experts=256, top_k=256))
    with client_for(policy_settings) as c:
        answers = [c.post("/weights", content=m.to_bytes(), headers={"content-type": "application/octet-stream"})
                   for m in (wider, huge_router)]
        version = c.get("/weights").json()["policy_version"]
    assert [a.status_code for a in answers] == [422, 422]
    assert answers[0].json()["detail"] == "body: weights config is for another policy shape: vocab_size 400 (this policy: 288)"
    assert answers[1].json()["detail"].startswith("body: weights config is for another policy shape: d_model 4 (this policy: 64)")
    assert version == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_weights_holding_a_non_finite_value_get_422_and_the_served_weights_stay(policy_settings, value):
    """A diverged trainer's push used to be accepted, then every generation was a 500 (NaN logprobs are no JSON)."""
    new = TinyPolicy.from_seed(99, dtype=torch.float64)
    with torch.no_grad():
        new.lm_head.weight[3, 5] = value
    body = {"input": user_items(image=False), "metadata": meta("r1", 3)}
    with client_for(policy_settings) as c:
        before = c.get("/weights").json()
        r = c.post("/weights", content=new.to_bytes(), headers={"content-type": "application/octet-stream"})
        after = c.get("/weights").json()
        answer = c.post("/v1/responses", json=body)
    assert r.status_code == 422
    assert r.json()["detail"] == (f"body: parameter 'lm_head.weight' holds 1 non-finite value(s), the first at [3, 5]: {value}; "
                                  "the served weights stay at policy_version 0")
    assert after == before
    assert (answer.status_code, answer.json()["policy_version"]) == (200, 0)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning")
def test_a_policy_whose_forward_overflows_gets_422_naming_the_token():
    """Finite weights, infinite logits (float32 overflow): a typed refusal instead of a 500."""
    settings = ServerSettings(mode="policy", seed=7, script=SCRIPT, policy={"dtype": "float32"})
    new = TinyPolicy.from_seed(99, dtype=torch.float32)
    with torch.no_grad():  # logits past float32's largest value: inf - inf = NaN in the log-softmax
        new.lm_head.bias.fill_(3.4e38)
        new.lm_head.weight.mul_(1e36)
    with client_for(settings) as c:
        assert c.post("/weights", content=new.to_bytes(), headers={"content-type": "application/octet-stream"}).status_code == 200
        r = c.post("/v1/responses", json={"input": user_items(image=False), "metadata": meta("r1", 3)})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("the policy (policy_version 1) gives a non-finite logprob (")
    assert r.json()["detail"].endswith("its weights overflow the torch.float32 forward")


def test_policy_sampling_depends_on_the_seed():
    from compactsim.mock_servers.model_server import ServerSettings

    body = {"input": "same prompt", "max_output_tokens": 8}
    texts = []
    for seed in (1, 2):
        with client_for(ServerSettings(mode="policy", seed=seed)) as c:
            texts.append(c.post("/v1/responses", json=body).json()["output"][-1]["generation_token_ids"])
    assert texts[0] != texts[1]
    assert np.all(np.isin([t for t in texts[0] if not tok.is_special(t)], TEXT_ALPHABET))


def test_an_image_header_over_the_pixel_cap_gets_422_and_no_pillow_warning(policy_settings):
    import warnings

    from tests.unit.core.test_policy_images import _png_header_url

    items = user_items(image=False)
    items[0]["content"].append({"type": "input_image", "image_url": _png_header_url(10_000, 10_000), "detail": "auto"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with client_for(policy_settings) as c:
            r = c.post("/v1/responses", json={"input": items, "metadata": meta("r1", 1)})
    assert r.status_code == 422
    assert r.json() == {"detail": "input: image 0: image is 10000x10000 = 100000000 pixels; the cap is 16777216",
                        "limit": "max_image_pixels", "field": "input"}
    assert [w for w in caught if "DecompressionBomb" in w.category.__name__] == []


def test_a_sequence_over_the_policy_cap_gets_422_before_any_forward():
    """The policy's attention needs memory in S²: a 28k-token prompt once took the server down (OOM)."""
    from compactsim.mock_servers.model_server import ServerSettings
    from compactsim.mock_servers.model_server.settings import PolicySettings

    settings = ServerSettings(mode="policy", seed=1, policy=PolicySettings(max_sequence_tokens=64))
    with client_for(settings) as c:
        short = c.post("/v1/responses", json={"input": "hi", "max_output_tokens": 8})
        long = c.post("/v1/responses", json={"input": "x" * 60, "max_output_tokens": 8})
    assert short.status_code == 200
    assert long.status_code == 422
    detail = long.json()["detail"]
    assert "exceeds policy.max_sequence_tokens=64" in detail and "tokens + " in detail
