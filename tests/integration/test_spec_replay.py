"""The golden-file specification is complete: a replay written only from docs/golden-spec.md passes `verify`.

`tests/spec_replay/replay.py` imports nothing from compactsim (checked here by AST). One export of
a representative selection — compaction, images, groups and padding, legacy grouping, every
evidence flavour, a policy-mode scenario whose `token_mult_prob_error` is marked, and refusals
of each kind — is replayed scenario by scenario, and `compactsim verify` must accept the dump
(exit 0), `--strict` too. A spec gap shows up here as a verify finding: fix the spec, then the replay.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
REPLAY = REPO / "tests" / "spec_replay" / "replay.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

#: Scenario → what the replay must write for its only step: the error triple, or None for rows.
SELECTION: dict[str, tuple[str, str | None, int | None] | None] = {
    "image-compaction-k2-chunked": None,  # 3 traces per rollout, sentinels, images re-owned
    "several-boundaries-in-one-rollout": None,  # many boundaries, routes
    "mask-sample-rollouts": None,  # instance_config.mask_sample, std 0 → no epsilon
    "multi-group-padding": None,  # two groups, dp 2 × micro-batch 2 padding
    "legacy-group-without-identity": None,  # legacy grouping by first prompt; canonical ≠ payload order
    "legacy-single-trace-images": None,  # legacy media binned from the items
    "flavour-gym-070-full": None,  # schema 2, completion_evidence
    "flavour-gym-pr2870": None,  # rollout_trace_contract
    "flavour-osworld": None,  # OSWorld extras
    "policy-no-compaction": None,  # policy mode: token_mult_prob_error marked
    "mutation-swapped-turn-ids": ("turn_order", "s0-g0-r1", 2),
    "mutation-dropped-call-record": ("metadata_count_mismatch", "s0-g0-r1", None),
    "mutation-digest-mismatch": ("evidence_digest_mismatch", "s0-g0-r1", 4),
    "legacy-token-merge-drift": ("undeclared_discontinuity", "resp_bf872b3cd6831974b04a20a63d638e70", 2),
    "batch-incomplete-group": ("incomplete_group", "s0-g0-r0", None),
    "batch-resubmitted-rollout": ("oversized_group", "s0-g0-r0", None),
    "batch-result-without-reward": ("malformed_payload", "s0-g0-r1", None),
    "batch-inconsistent-route-layout": ("inconsistent_routed_expert_shapes", "s0-g0-r1", None),
    "mutation-undecodable-image": ("media_decode", "s0-g0-r1", 2),
    "mutation-misstated-image-dimensions": ("media_dimensions_mismatch", "s0-g0-r1", 2),
    "routes-not-recorded": ("missing_routed_experts", None, None),
    "fault-no-routes-replay-on": ("missing_routed_experts", "s0-g0-r1", 3),  # one call without routes
    "fault-no-routes-replay-off": None,  # the same call trains: §11 rules 1-2 replay -1
    "advantage-clip-high-only": None,  # advantages/sum before the clip, the rows after it
    "image-modes": None,  # RGBA, greyscale and palette PNGs: pixel digests of the RGB conversion
    "layout-sequence-divisible-by-64": None,  # S_pad rounded up to 64 in advantages/sum
    "async-grpo-mixed-age-batch": None,  # one async batch, two policy versions, each row its own
    "sequence-at-the-cap": None,  # a row exactly at max_total_sequence_length trains
    "routes-one-surplus-row": None,  # vLLM's one surplus route row per call is dropped (§11)
}
SEED = 0
ALLOWED_THIRD_PARTY = {"numpy", "PIL"}
FORBIDDEN = {"harness", "agents", "scenarios", "mock_servers", "compactsim", "tests"}


def _imported_roots(path: Path) -> set[str]:
    """Top-level names of every module the file imports (absolute imports; relative ones are refused)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import at line {node.lineno}"
            roots.add((node.module or "").split(".")[0])
    return roots


def test_replay_imports_only_the_standard_library_numpy_and_pillow():
    roots = _imported_roots(REPLAY)
    assert not roots & FORBIDDEN
    assert roots - set(sys.stdlib_module_names) == ALLOWED_THIRD_PARTY
    assert _imported_roots(REPLAY.parent / "__init__.py") == set()


def test_import_check_catches_a_compactsim_import(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nfrom compactsim.harness.core.digests import canonical_digest\n", encoding="utf-8")
    assert _imported_roots(bad) & FORBIDDEN == {"compactsim"}


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from compactsim.harness.golden import export_goldens
    from compactsim.harness.runner import resolve_scenarios

    out = tmp_path_factory.mktemp("spec") / "g"
    export_goldens(resolve_scenarios(list(SELECTION)), out, seed=SEED, selection=list(SELECTION), parallel=2)
    return out


@pytest.fixture(scope="module")
def dumps(golden: Path) -> tuple[Path, Path]:
    """The replay run as a separate process, as another project's CI would run its own trainer."""
    rows, metrics = golden.parent / "rows.jsonl", golden.parent / "metrics.jsonl"
    done = subprocess.run([sys.executable, "-m", "tests.spec_replay.replay", str(golden), "--rows", str(rows),
                           "--metrics", str(metrics)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return rows, metrics


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def verify(*args: str) -> Any:
    from compactsim.harness.cli import app

    return CliRunner().invoke(app, ["verify", *args])


def test_replay_answers_every_exported_scenario_as_the_spec_says(golden: Path, dumps: tuple[Path, Path]):
    rows, metrics = (_lines(p) for p in dumps)
    manifest = json.loads((golden / "manifest.json").read_text(encoding="utf-8"))
    assert sorted(s["name"] for s in manifest["scenarios"]) == sorted(SELECTION)
    assert sorted({r["scenario"] for r in rows}) == sorted(SELECTION)
    errors = {r["scenario"]: (r["error"]["code"], r["error"]["rollout_id"], r["error"]["turn_id"])
              for r in rows if "error" in r}
    assert errors == {name: want for name, want in SELECTION.items() if want is not None}
    steps = {s["name"]: s["steps"] for s in manifest["scenarios"]}  # one metrics line per trained step
    assert Counter(m["scenario"] for m in metrics) == {n: steps[n] for n, want in SELECTION.items() if want is None}


def test_replay_rows_follow_the_spec_examples(dumps: tuple[Path, Path]):
    rows, metrics = (_lines(p) for p in dumps)
    by_id = {(r["scenario"], r.get("physical_trace_id")): r for r in rows if "error" not in r}
    k2 = by_id[("image-compaction-k2-chunked", "s0-g0-r0/trace-1")]
    assert (len(k2["input_ids"]), k2["mask_spans"], k2["routed_experts_sentinel_positions"]) == (
        613, [[362, 406], [463, 514], [571, 613]], [612])
    assert k2["pixel_digests"][0] == "e725fca01784fef67f1f66208a7efb90d85211833ae8711579b8189f7cfbb5b3"
    legacy = [r for r in rows if r["scenario"] == "legacy-group-without-identity"]
    assert [(r["logical_rollout_id"], r["parent_index"], r["rollout_advantage"]) for r in legacy] == [
        ("resp_1db1f1c3ba26049a7f9b5fc0699d694c", 0, -1.0), ("resp_74e85cc1eacb772dccac1f12daf5e11b", 1, 1.0)]
    padding = [r for r in rows if r["scenario"] == "multi-group-padding" and r["parent_index"] == -1]
    assert len(padding) == 2
    mask = next(m["metrics"] for m in metrics if m["scenario"] == "mask-sample-rollouts")
    assert (mask["num_mask_sample_filtered"], mask["advantages/min"]) == (1, -1.0)
    assert abs(mask["advantages/sum"] - 621.317343563885) <= 1e-9


def test_verify_accepts_the_spec_only_dump(golden: Path, dumps: tuple[Path, Path]):
    rows, metrics = dumps
    result = verify(str(golden), str(rows), "--metrics", str(metrics))
    assert result.exit_code == 0, result.output
    assert f"{len(SELECTION)}/{len(SELECTION)} scenarios match the goldens · 0 finding(s)" in result.output
    strict = verify(str(golden), str(rows), "--metrics", str(metrics), "--strict")
    assert strict.exit_code == 0, strict.output


def test_policy_metrics_are_marked_and_only_demanded_on_request(golden: Path, dumps: tuple[Path, Path]):
    expectation = json.loads((golden / "scenarios/policy-no-compaction/expectation.json").read_text(encoding="utf-8"))
    assert expectation["policy_metrics"] == ["token_mult_prob_error"]
    other = json.loads((golden / "scenarios/mask-sample-rollouts/expectation.json").read_text(encoding="utf-8"))
    assert other["policy_metrics"] == []
    rows, metrics = dumps
    result = verify(str(golden), str(rows), "--metrics", str(metrics), "--require-policy-metrics", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    found = [(s["scenario"], f["check"], f["expected"]["metric"]) for s in report["scenarios"] for f in s["findings"]]
    assert found == [("policy-no-compaction", "metric.missing", "token_mult_prob_error")]


def test_a_wrong_advantage_in_the_spec_dump_fails_verify(golden: Path, dumps: tuple[Path, Path], tmp_path: Path):
    rows = _lines(dumps[0])
    target = next(r for r in rows if r.get("physical_trace_id") == "s0-g0-r1/trace-0"
                  and r["scenario"] == "mask-sample-rollouts")
    start = target["mask_spans"][0][0]
    target["advantages"][start] = 0.5
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = verify(str(golden), str(bad), "--scenario", "mask-sample-rollouts", "--json")
    assert result.exit_code == 1
    (scenario,) = json.loads(result.stdout)["scenarios"]
    assert [(f["check"], f["row"], f["position"], f["expected"], f["actual"]) for f in scenario["findings"]] == [
        ("row.advantage", "s0-g0-r1/trace-0", start, -1.0, 0.5)]


@pytest.mark.parametrize("loo", [False, True])
def test_the_replay_gives_equal_inexact_rewards_exactly_zero_advantages_as_the_spec_says(loo: bool):
    """§9: equal members take b = their value and s = 0; the float mean of three 0.7s is 0.6999999999999998."""
    from tests.spec_replay.replay import Trainer, group_advantages

    trainer = Trainer(num_generations_per_prompt=3, leave_one_out=loo, normalize=True, clip_low=None, clip_high=None,
                      dp_size=1, micro_batch_size=1, async_mode=False, importance_sampling_correction=False,
                      router_replay=False, max_total_sequence_length=4096, make_sequence_length_divisible_by=1)
    assert group_advantages([0.7, 0.7, 0.7], trainer) == [0.0, 0.0, 0.0]
    mixed = group_advantages([0.1, 0.1, 0.7], trainer)
    assert mixed[0] < 0 < mixed[2]
