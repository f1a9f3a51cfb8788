"""`compactsim plan --json` describes each physical trace as the agent's ground truth has it.

The materializer never reads a trace's reported media or sampled-token count, so no audited row
would show them wrong; this compares them with the oracle's segmentation of the ground-truth logs.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.oracle.plan import segment
from compactsim.harness.oracle.truth import read_truth


def test_plan_json_reports_each_traces_turns_media_and_token_counts_as_the_ground_truth(tmp_path: Path):
    out = tmp_path / "rollouts"
    made = CliRunner().invoke(app, ["rollout", "--scenario", "image-compaction-k2-rolling", "--out", str(out)])
    assert made.exit_code == 0, made.output
    results = sorted(out.glob("*.result.json"))
    assert len(results) == 2
    growing = 0  # traces whose last call shows more images than their first (first-call media would differ)
    for result in results:
        truth = read_truth(json.loads(result.with_name(result.name.replace(".result", ".ground_truth")).read_text()))
        planned = CliRunner().invoke(app, ["plan", "--json", str(result)])
        assert planned.exit_code == 0, planned.output
        traces = json.loads(planned.stdout)["physical_traces"]
        want = segment(truth)
        assert [t["turn_ids"] for t in traces] == [[c.turn_id for c in w.calls] for w in want]
        assert [t["start_reason"] for t in traces] == [w.start_reason for w in want]
        assert [t["media_ids"] for t in traces] == [list(w.last.media_ids) for w in want]
        assert [t["num_tokens"] for t in traces] == [w.last.num_tokens for w in want]
        assert [t["num_sampled_tokens"] for t in traces] == [sum(len(c.sampled) for c in w.calls) for w in want]
        growing += sum(w.calls[0].media_ids != w.last.media_ids for w in want)
    assert growing > 0
