"""The spec replay and the pipeline answer every fuzzed batch alike (a differential test of docs/golden-spec.md).

`tests/spec_replay/replay.py` is written from the spec alone; compactsim's pipeline is the implementation.
On seeded mutated Gym batches (`spec_replay_cases`: fuzz_evidence's operators, and type-preserving
edits that reach §4-§12) both must refuse with the same first error (code, rollout, turn) or both
train, with the same rows and batch metrics. A disagreement is a bug in one of the two or in the spec:
decide from the spec text which, never by making the replay copy the pipeline.
"""

from __future__ import annotations

import json

import pytest

from tests.property.spec_replay_cases import make_case, pipeline_answer, replay_answer, same

SEED = 0
CASES = 400  # per mode; ~6 s for both modes on a shared 2-core machine


def _describe(results, trainer) -> str:
    try:
        return json.dumps({"trainer": trainer, "results": results})[:4000]
    except (ValueError, RecursionError):
        return f"trainer {trainer} (results not JSON-serialisable)"


@pytest.mark.parametrize("mode", ["type", "semantic"])
def test_the_spec_replay_answers_fuzzed_batches_like_the_pipeline(mode):
    trained = refused = 0
    for case in range(CASES):
        results, trainer = make_case(mode, SEED, case)
        pipeline, replay = pipeline_answer(results, trainer), replay_answer(results, trainer)
        where = f"{mode} case {case}"
        if pipeline[0] == "refuse" or replay[0] == "refuse":
            assert replay[:4] == pipeline[:4], f"{where}: pipeline {pipeline[:4]}, replay {replay[:4]}\n" + _describe(
                results, trainer)
            refused += 1
            continue
        _, pipeline_rows, pipeline_metrics = pipeline
        _, replay_rows, replay_metrics = replay
        assert len(replay_rows) == len(pipeline_rows), where
        for k, (p_row, r_row) in enumerate(zip(pipeline_rows, replay_rows)):
            differ = [key for key in p_row if key in r_row and not same(p_row[key], r_row[key])]
            assert not differ, f"{where}: row {k} differs in {differ}\n" + _describe(results, trainer)
        differ = [key for key in replay_metrics if key in pipeline_metrics
                  and not same(pipeline_metrics[key], replay_metrics[key])]
        assert not differ, f"{where}: metrics {differ} differ"
        trained += 1
    # the stream reaches both answers
    assert trained >= CASES // 20 and refused >= CASES // 4, (trained, refused)
