"""The agent sends Gym's constant metadata; the server's derived turns reproduce the hinted rollout exactly.

Under every compaction preset (summaries that replace whole turns, dropped images and reasoning,
truncated tool output, chunked schedules) a rollout run without ``compactsim_turn`` hints must
get the same script step, tokens, logprobs and routes on every call as one run with them.
"""

from __future__ import annotations

import pytest

from compactsim.agents.rollout.loop import RetryPolicy, ScriptedAgent
from compactsim.agents.compaction.presets import PRESETS


def _evidence(record) -> list[tuple]:
    return [(c.observed.prompt_token_ids, c.observed.sampled_token_ids, c.observed.sampled_logprobs,
             c.token_item["routed_experts"]) for c in record.calls]


@pytest.mark.parametrize("preset", PRESETS)
def test_derived_turns_equal_hinted_turns_under_every_preset(mock_model, spec_for, preset):
    spec = spec_for(preset, turns=6)
    records = {}
    for hints in (False, True):
        with mock_model([spec]) as client:
            records[hints] = ScriptedAgent(client, retry=RetryPolicy(), send_turn_hints=hints).run(spec)
            log = client.get("/request_log").json()["entries"]
        assert [(e["rollout_id"], e["turn"]) for e in log] == [(spec.rollout_id, t) for t in range(1, 7)]
    derived, hinted = records[False], records[True]
    assert (derived.failure, derived.stop_reason, len(derived.calls)) == (None, "no_tool_call", 6)
    assert _evidence(derived) == _evidence(hinted)
    # item ids differ (they derive from the request digest, which the hints are part of); the boundaries do not
    where = [[(b.applies_to_step, b.changed_part_ranges, b.omitted_part_count) for b in r.boundary_events]
             for r in (derived, hinted)]
    assert where[0] == where[1]
    assert bool(where[0]) == (preset != "identity")  # every other preset compacts within six turns


def test_turn_selected_transient_fault_is_retried_away_without_hints(run_agent, spec_for):
    spec = spec_for("summary", turns=4)
    record = run_agent(spec, faults=[{"kind": "http_503", "turn": 3, "attempts": [1, 2]}])
    clean = run_agent(spec)
    assert record.failure is None
    assert [[a.outcome for a in c.attempts] for c in record.calls] == [
        ["ok"], ["ok"], ["server_unavailable", "server_unavailable", "ok"], ["ok"]]
    assert _evidence(record) == _evidence(clean)
