"""Writing a `TraceBatch` as rows-dump lines: every field, padding rows included, valid against the schema."""

from __future__ import annotations

from typing import Any

from compactsim.harness.golden.batch_dump import batch_dump_lines
from compactsim.harness.golden.rows_dump import format_dump, parse_rows_dump
from compactsim.harness.golden.schema import validator
from compactsim.harness.pipeline import ReferenceBackend
from compactsim.harness.pipeline.train_config import parse_trainer_config

PIXELS = "7fa54a42524916a1648ec76ce75d295024840b7a3a4f4bbaf3e43155d0014767"
MEDIA = "media-e5214ee50da1954c70348ac5"


def example_batch(example: dict[str, Any]):
    backend = ReferenceBackend()
    plan = backend.plan({"response": example, "reward": 1.0})
    cfg = parse_trainer_config({"grpo": {"num_generations_per_prompt": 1},
                                "policy": {"dp_size": 1, "train_micro_batch_size": 3}})
    return backend.materialize([plan], cfg)


def test_batch_dump_lines_write_each_row_unpadded_then_padding(example_transport):
    lines = batch_dump_lines(example_batch(example_transport), scenario="demo", step=4)
    assert [(ln["physical_trace_id"], ln["parent_index"], ln["trace_index"]) for ln in lines] == [
        ("rollout-demo-0/trace-0", 0, 0), ("rollout-demo-0/trace-1", 0, 1), (None, -1, -1)]
    first = lines[0]
    assert first["scenario"] == "demo" and first["step"] == 4 and first["logical_rollout_id"] == "rollout-demo-0"
    assert first["input_ids"] == [1, 2, 3, 11, 12, 4, 900, 5, 21, 22]
    assert first["token_mask"] == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]
    assert first["generation_logprobs"] == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, 0.0, 0.0, -0.125, -1.0]
    assert first["advantages"] == [0.0] * 10 and first["rollout_advantage"] == 0.0
    assert (first["sample_mask"], first["generation_policy_version"]) == (1.0, None)
    assert (first["media_ids"], first["pixel_digests"]) == ([MEDIA], [PIXELS])
    assert first["routed_experts_sentinel_positions"] == []
    assert "routed_experts" not in first  # the example's calls recorded no routes
    assert lines[1]["token_mask"] == [0] * 11 + [1, 1, 1]
    pad = lines[2]
    assert (pad["input_ids"], pad["token_mask"], pad["sample_mask"], "rollout_advantage" in pad) == ([], [], 0.0, False)


def test_batch_dump_lines_are_valid_rows_dump_lines(example_transport):
    lines = batch_dump_lines(example_batch(example_transport), scenario="demo", step=0)
    v = validator("rows-dump")
    assert all(v.is_valid(ln) for ln in lines)
    parsed = parse_rows_dump(format_dump(lines))
    assert [r.length for r in parsed.rows] == [10, 14, 0]
