"""The per-step training artifact: exact round trip through `.npz` bytes + JSON, stable bytes, loud refusals."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from compactsim.harness.core.artifacts import (
    ARTIFACT_FORMAT,
    StepArtifact,
    artifact_from_batch,
    decode_step_artifact,
    encode_step_artifact,
    meta_to_json,
    pixel_digest,
)
from compactsim.harness.core.images import decode_data_url, png_data_url
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.materializer import prepare_trace_batch
from compactsim.harness.pipeline.train_config import MaterializeConfig
from tests.unit.pipeline.materializer_builders import make_rollout

torch.set_num_threads(1)
_PNG = png_data_url(np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 3)


def _artifact(**changes) -> StepArtifact:
    plans = [
        make_rollout("a", [[(2, 1), (1, 2)], [(1, 1)]], reward=0.0, index=0, layout=(2, 2), version=3)[1],
        make_rollout("b", [[(3, 2)]], reward=1.0, index=1, layout=(2, 2), version=3)[1],
    ]
    logical = compute_logical_advantages([p.evidence for p in plans])
    batch = prepare_trace_batch(plans, None, logical, MaterializeConfig(dp_size=2, logprob_dtype="float64"))
    image = decode_data_url(_PNG)
    batch = replace(batch, row_pixel_values=((image,), (), (image, image), ()), row_media_ids=(("m1",), (), ("m1", "m1"), ()))
    prev = batch.row_generation_logprobs + 0.125 * batch.row_token_mask
    metrics = {"loss": -0.5, "token_mult_prob_error": 1.0, "probs_ratio_min": float("inf"), "grad_norm": 0.25}
    args = dict(step=4, trained_policy_version=7, prev_logprobs=prev, reference_logprobs=None,
                routes_used=batch.routed_experts, metrics=metrics, optimizer_steps=1, scheduler_increments=1)
    args.update(changes)
    return artifact_from_batch(batch, **args)


def test_step_artifact_round_trips_through_npz_bytes_and_json_exactly():
    artifact = _artifact()
    npz, meta = encode_step_artifact(artifact)
    back = decode_step_artifact(npz, json.loads(meta_to_json(meta)))
    assert sorted(back.arrays) == sorted(artifact.arrays)
    for name, arr in artifact.arrays.items():
        assert back.arrays[name].dtype == arr.dtype
        assert np.array_equal(back.arrays[name], arr)
    assert back.metrics == {"loss": -0.5, "token_mult_prob_error": 1.0, "probs_ratio_min": float("inf"), "grad_norm": 0.25}
    assert (back.step, back.trained_policy_version, back.dp_size) == (4, 7, 2)
    assert back.row_mask_spans == artifact.row_mask_spans
    assert back.row_media_ids == (("m1",), (), ("m1", "m1"), ())
    assert back.row_physical_trace_id == ("a/trace-0", "a/trace-1", "b/trace-0", None)
    assert back.logical[0]["rollout_id"] == "a" and back.logical[0]["row_indices"] == [0, 1]


def test_step_artifact_records_versions_masks_and_routes_per_row():
    a = _artifact().arrays
    assert a["row_generation_policy_version"].tolist() == [3, 3, 3, -1]
    assert a["row_trained_policy_version"].tolist() == [7, 7, 7, -1]
    assert a["row_token_mask"].dtype == np.uint8
    assert a["routed_experts"].shape[:2] == a["row_input_ids"].shape
    assert (a["row_prev_logprobs"] - a["row_generation_logprobs"])[a["row_token_mask"] == 1].tolist() == [0.125] * 6
    assert "row_reference_logprobs" not in a


def test_equal_artifacts_encode_to_equal_bytes():
    first, meta1 = encode_step_artifact(_artifact())
    second, meta2 = encode_step_artifact(_artifact())
    assert first == second
    assert meta_to_json(meta1) == meta_to_json(meta2)
    with np.load(io.BytesIO(first)) as data:
        assert data.files[0] == "row_input_ids"


def test_pixel_digest_is_the_same_for_float32_and_float64_decodes():
    assert pixel_digest(decode_data_url(_PNG)) == pixel_digest(decode_data_url(_PNG, dtype=torch.float64))
    assert _artifact().row_pixel_digests[2] == (pixel_digest(decode_data_url(_PNG)),) * 2


def test_metrics_json_spells_non_finite_values_as_strings():
    _, meta = encode_step_artifact(_artifact())
    assert meta["metrics"]["probs_ratio_min"] == "inf"
    assert "Infinity" not in meta_to_json(meta)


def test_decode_rejects_another_format():
    npz, meta = encode_step_artifact(_artifact())
    with pytest.raises(ValueError, match="artifact format 'other/1': expected 'compactsim-step-artifact/1'"):
        decode_step_artifact(npz, {**meta, "format": "other/1"})
    assert meta["format"] == ARTIFACT_FORMAT


def test_decode_rejects_a_manifest_that_disagrees_with_the_arrays():
    npz, meta = encode_step_artifact(_artifact())
    arrays = dict(meta["arrays"])
    arrays["row_input_ids"] = {"dtype": "int64", "shape": arrays["row_input_ids"]["shape"]}
    with pytest.raises(ValueError, match="array 'row_input_ids' is .*'int32'.* the JSON manifest says .*'int64'"):
        decode_step_artifact(npz, {**meta, "arrays": arrays})
    with pytest.raises(ValueError, match="the JSON manifest lists"):
        decode_step_artifact(npz, {**meta, "arrays": {k: v for k, v in meta["arrays"].items() if k != "routed_experts"}})


def test_artifact_rejects_a_non_binary_token_mask():
    plans = [make_rollout("a", [[(2, 1)]], reward=0.0, index=0)[1]]
    batch = prepare_trace_batch(plans, None, compute_logical_advantages([p.evidence for p in plans]), MaterializeConfig())
    with pytest.raises(ValueError, match="row_token_mask holds values other than 0 and 1"):
        artifact_from_batch(replace(batch, row_token_mask=batch.row_token_mask * 0.5), step=0, trained_policy_version=0,
                            prev_logprobs=batch.row_generation_logprobs, reference_logprobs=None, routes_used=None,
                            metrics={}, optimizer_steps=1, scheduler_increments=1)


def test_artifact_rejects_unknown_or_missing_arrays_and_wrong_shapes():
    artifact = _artifact()
    with pytest.raises(ValueError, match=r"unknown artifact arrays \['extra'\]"):
        replace(artifact, arrays={**artifact.arrays, "extra": np.zeros(4)})
    with pytest.raises(ValueError, match=r"artifact lacks arrays \['row_prev_logprobs'\]"):
        replace(artifact, arrays={k: v for k, v in artifact.arrays.items() if k != "row_prev_logprobs"})
    with pytest.raises(ValueError, match="array 'row_advantages' has shape"):
        replace(artifact, arrays={**artifact.arrays, "row_advantages": artifact.arrays["row_advantages"][:, :2]})


def test_pixel_digest_hashes_the_rgb_bytes_in_height_width_channel_order():
    import hashlib

    rgb = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 3
    assert pixel_digest(decode_data_url(_PNG)) == hashlib.sha256(rgb.tobytes()).hexdigest()
