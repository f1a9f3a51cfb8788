"""Bad input on the command line gets a typed one-line error and exit 2 — never a traceback, a hang or a finding.

Covers: text with lone surrogates (printed escaped, never a UnicodeEncodeError or invalid UTF-8),
output paths that cannot be folders, a `--gym-check` file that is not a report, seeds outside
0..2**63-1, bounded size options, `--reward-pattern` / `--missing-reward` that are not finite,
`run --device cuda` without a GPU, and scenario files whose trainer, rewards or scripted logprobs
cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.commands import common
from compactsim.harness.core.errors import ConfigError

runner = CliRunner()

#: A legacy Gym result (two append-compatible calls) whose response id is `{rid}`.
_LEGACY = ('{"response": {"id": "RID", "output": [{"type": "message", "role": "assistant", "id": "m", "content": [], '
           '"prompt_token_ids": [1, 2, 3], "generation_token_ids": [4, 5], "generation_log_probs": [-0.1, -0.2]}, '
           '{"type": "message", "role": "assistant", "id": "m", "content": [], "prompt_token_ids": [1, 2, 3, 4, 5, 6], '
           '"generation_token_ids": [7], "generation_log_probs": [-0.3]}]}, "reward": 1.0}')


def _payload(tmp_path: Path, rid_json: str = "r-ok") -> Path:
    """A payload file whose rollout id is `rid_json` as written in JSON (``r\\ud800`` is a lone surrogate)."""
    path = tmp_path / "payload.json"
    path.write_text(_LEGACY.replace("RID", rid_json), encoding="ascii")
    return path


def _flat(text: str) -> str:
    """Output with Typer's error box and line wrapping removed, so a message can be matched whole."""
    return " ".join(text.replace("│", " ").split())


# ---------------------------------------------------------------------------------------------- surrogates


@pytest.mark.parametrize("argv", [["plan"], ["plan", "--no-strict"], ["replay"]], ids=" ".join)
@pytest.mark.parametrize("rid", ["r\\ud800", "r\\udc80x"])
def test_a_lone_surrogate_in_an_id_is_printed_escaped(tmp_path: Path, argv: list[str], rid: str):
    result = runner.invoke(app, [*argv, str(_payload(tmp_path, rid))])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
    printed = result.stdout_bytes.decode("utf-8")  # valid UTF-8: never a raw surrogate byte
    assert rid in printed  # the backslash escape, e.g. r\ud800


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
def test_a_lone_surrogate_never_crashes_or_writes_invalid_utf8_in_a_real_process(tmp_path: Path, errors: str):
    """Whatever error handler the locale gives the streams (strict: a crash; surrogateescape: invalid UTF-8)."""
    env = {**os.environ, "PYTHONIOENCODING": f"utf-8:{errors}"}
    for rid in ("r\\ud800", "r\\udc80x"):
        out = subprocess.run([sys.executable, "-c", "from compactsim.harness.cli import app; app()", "plan",
                              str(_payload(tmp_path, rid))], capture_output=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr.decode("utf-8", "replace")[-2000:]
        assert rid in out.stdout.decode("utf-8")


# ---------------------------------------------------------------------------------------------- output folders


def test_ensure_output_dir_creates_nested_folders_and_refuses_files(tmp_path: Path):
    from compactsim.harness.outputs import ensure_output_dir

    assert ensure_output_dir(tmp_path / "a" / "b").is_dir()
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=r"--out .*afile: exists and is not a directory"):
        ensure_output_dir(afile)
    with pytest.raises(ConfigError, match=r"--reference-dump .*afile/sub: cannot create the folder: Not a directory"):
        ensure_output_dir(afile / "sub", option="--reference-dump")


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("rollout", lambda f, d: ["rollout", "--out", f]),
        ("rollout under a file", lambda f, d: ["rollout", "--out", f"{f}/sub"]),
        ("rollout --scenario", lambda f, d: ["rollout", "--scenario", "no-compaction", "--out", f]),
        ("train", lambda f, d: ["train", "no-compaction", "--out", f, "--steps", "1"]),
        ("export --reference-dump", lambda f, d: ["export", "no-compaction", "--out", f"{d}/g", "--reference-dump", f]),
        ("export --reference-dump under a file", lambda f, d: ["export", "no-compaction", "--out", f"{d}/g",
                                                               "--reference-dump", f"{f}/ref"]),
        ("export under a file", lambda f, d: ["export", "no-compaction", "--out", f"{f}/g"]),
        ("shrink", lambda f, d: ["shrink", "no-compaction", "--out", f]),
        ("run under a file", lambda f, d: ["run", "no-compaction", "--out", f"{f}/x"]),
        ("gym-check", lambda f, d: ["gym-check", "--gym", "nemo-gym==0.7.0", "--offline", "--cache-dir",
                                    f"{d}/cache", "--out", f]),
    ],
)
def test_an_output_path_that_cannot_be_a_folder_exits_2_naming_it(tmp_path: Path, name: str, argv):
    afile = tmp_path / "afile"
    afile.write_text("an ordinary file\n")
    result = runner.invoke(app, argv(str(afile), str(tmp_path)))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    option = "--reference-dump" if "--reference-dump" in argv("f", "d") else "--out"
    assert f"error: invalid_argument: {option} {afile}" in result.output
    assert ("exists and is not a directory" in result.output) or ("cannot create the folder" in result.output)
    assert afile.read_text() == "an ordinary file\n"


def test_a_reference_dump_inside_a_first_export_is_made_after_the_goldens(tmp_path: Path):
    """Checked up front but created last: the export clears a non-golden --out, so an early `g/ref` would block it."""
    out = tmp_path / "g"
    result = runner.invoke(app, ["export", "no-compaction", "--steps", "1", "--out", str(out),
                                 "--reference-dump", str(out / "ref"), "--parallel", "1"])
    assert result.exit_code == 0, result.output
    assert (out / "manifest.json").is_file() and (out / "ref" / "rows.jsonl").stat().st_size > 0


# ---------------------------------------------------------------------------------------------- run --gym-check


def test_run_refuses_a_gym_check_file_that_is_not_a_report_before_running(tmp_path: Path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", "no-compaction", "--out", str(out), "--gym-check", str(_payload(tmp_path))])
    assert result.exit_code == 2, result.output
    assert f"--gym-check {tmp_path / 'payload.json'}: not a gym-check.json report" in _flat(result.output)
    assert "field verdict: Field required" in _flat(result.output)
    assert not out.exists()  # nothing ran, no output folder was touched


# ---------------------------------------------------------------------------------------------- seeds


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
@pytest.mark.parametrize(
    "argv",
    [
        lambda d: ["run", "no-compaction", "--out", f"{d}/o"],
        lambda d: ["shrink", "no-compaction", "--out", f"{d}/o"],
        lambda d: ["train", "no-compaction", "--out", f"{d}/o"],
        lambda d: ["rollout", "--out", f"{d}/o"],
        lambda d: ["export", "no-compaction", "--out", f"{d}/o"],
        lambda d: ["serve", "--port", "0"],
    ],
    ids=["run", "shrink", "train", "rollout", "export", "serve"],
)
def test_a_seed_outside_0_to_2_63_exits_2_naming_the_option(tmp_path: Path, argv, seed: str):
    result = runner.invoke(app, [*argv(str(tmp_path)), "--seed", seed])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--seed'" in result.output
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------- size options


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["materialize", "PAYLOAD", "--dp-size", "1000000000"], "--dp-size"),
        (["materialize", "PAYLOAD", "--micro-batch-size", "1000000000"], "--micro-batch-size"),
        (["materialize", "PAYLOAD", "--seq-divisible-by", "1000000000"], "--seq-divisible-by"),
        (["train", "no-compaction", "--out", "OUT", "--dp-size", "1000000000"], "--dp-size"),
        (["train", "no-compaction", "--out", "OUT", "--micro-batch-size", "1000000000"], "--micro-batch-size"),
        (["train", "no-compaction", "--out", "OUT", "--steps", "99999999999999999999"], "--steps"),
        (["rollout", "--out", "OUT", "--turns", "2000"], "--turns"),
        (["rollout", "--out", "OUT", "--rollouts", "1000000"], "--rollouts"),
        (["rollout", "--out", "OUT", "--images-per-observation", "-3"], "--images-per-observation"),
        (["rollout", "--out", "OUT", "--images-per-observation", "5"], "--images-per-observation"),
    ],
)
def test_size_options_are_bounded(tmp_path: Path, argv: list[str], option: str):
    args = [str(_payload(tmp_path)) if a == "PAYLOAD" else str(tmp_path / "o") if a == "OUT" else a for a in argv]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in _flat(result.output)
    assert not (tmp_path / "o").exists()


def test_the_bounds_show_in_help_and_match_the_scenario_schema():
    from compactsim.scenarios import model

    assert (common.MAX_TURNS, common.MAX_STEPS) == (model.MAX_TURNS, model.MAX_STEPS)
    assert (common.MAX_DP_SIZE, common.MAX_MICRO_BATCH_SIZE, common.MAX_SEQ_DIVISIBLE_BY) == (
        model.MAX_DP_SIZE, model.MAX_MICRO_BATCH_SIZE, model.MAX_SEQ_DIVISIBLE_BY)
    generator = model.TurnsGenerator.model_json_schema()["properties"]
    assert common.MAX_IMAGES_PER_OBSERVATION == generator["images_per_observation"]["maximum"]
    assert common.MAX_SEED == 2**63 - 1
    assert "1<=x<=16" in _flat(runner.invoke(app, ["rollout", "--help"]).output)


@pytest.mark.parametrize("pattern", ["nan", "inf", "1,-inf", "1e400", "1,1e17"])
def test_rollout_refuses_a_reward_pattern_that_is_not_finite(tmp_path: Path, pattern: str):
    result = runner.invoke(app, ["rollout", "--out", str(tmp_path / "o"), "--reward-pattern", pattern])
    assert result.exit_code == 2, result.output
    assert f"--reward-pattern={pattern!r}:" in result.output
    assert "is not a finite reward within ±2**53" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "1e300"])
def test_materialize_refuses_a_missing_reward_that_is_not_finite(tmp_path: Path, value: str):
    result = runner.invoke(app, ["materialize", str(_payload(tmp_path)), "--missing-reward", value])
    assert result.exit_code == 2, result.output
    assert "--missing-reward=" in result.output and "expected a finite reward within ±2**53" in result.output


# ---------------------------------------------------------------------------------------------- run --device


def test_run_device_cuda_without_a_gpu_exits_2_like_train(tmp_path: Path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    for argv in (["run", "no-compaction", "--out", str(tmp_path / "o")],
                 ["train", "no-compaction", "--out", str(tmp_path / "o"), "--steps", "1"]):
        result = runner.invoke(app, [*argv, "--device", "cuda"])
        assert result.exit_code == 2, result.output
        assert "error: invalid_argument: --device cuda: no CUDA device is available (use cpu or auto)" in result.output
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["bfloat16", "float16", "FLOAT32"])
def test_run_precision_outside_float32_and_float64_exits_2_before_any_output(tmp_path: Path, value: str):
    result = runner.invoke(app, ["run", "no-compaction", "--out", str(tmp_path / "o"), "--precision", value])
    assert result.exit_code == 2, result.output
    assert f"error: invalid_argument: --precision {value}: expected one of float32, float64" in result.output
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------- scenario files


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("trainer: {policy: {dp_size: 1000000000, train_micro_batch_size: 1}}",
         "2:5: field $.scenarios[0]: Value error, trainer: policy.dp_size=1000000000 exceeds 128"),
        ("trainer: {policy: {make_sequence_length_divisible_by: 1000000000}}",
         "2:5: field $.scenarios[0]: Value error, trainer: policy.make_sequence_length_divisible_by=1000000000 "
         "exceeds 1024"),
        ("rewards: {pattern: [1.0e+300, -1.0e+300]}",
         "5:25: field $.scenarios[0].rewards.pattern[0]: Input should be less than or equal to 9007199254740992"),
        ("rewards: {by_index: {0: 1.0e+17}}",
         "5:29: field $.scenarios[0].rewards.by_index[0]: Input should be less than or equal to"),
    ],
)
def test_scenario_files_with_unrunnable_sizes_exit_2_at_load(tmp_path: Path, fields: str, message: str):
    path = tmp_path / "s.yaml"
    path.write_text(f"scenarios:\n  - name: rt\n    purpose: x\n    script: {{generate: {{turns: 2}}}}\n    {fields}\n")
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert f"error: invalid_config: {path}:{message}" in _flat(result.output)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("logprobs", "message"),
    [("[-0.1, -0.2, -0.3, -0.4]", "turns[0].logprobs: logprobs has 4 values; the step samples 3 ids"),
     ("[0.5, -0.1, -0.1]", "turns[0].logprobs: logprobs must be <= 0")],
)
def test_scripted_logprobs_that_do_not_fit_the_turn_are_refused_at_load(tmp_path: Path, logprobs: str, message: str):
    path = tmp_path / "s.yaml"
    path.write_text(f"scenarios:\n  - name: rt-lp\n    purpose: x\n    script:\n      turns:\n"
                    f"        - {{text: hi, logprobs: {logprobs}}}\n")
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert f"script: Value error, {message}" in _flat(result.output)
    assert "ServerSettings" not in result.output


def test_scripted_logprobs_that_fit_still_load():
    from compactsim.scenarios.model import ScriptSpec

    spec = ScriptSpec.model_validate({"turns": [{"text": "hi", "logprobs": [-0.1, -0.2, -0.3]}]})
    assert spec.turns[0].logprobs == (-0.1, -0.2, -0.3)


def test_the_payload_fixture_is_a_valid_result(tmp_path: Path):
    """The fixture the surrogate tests edit plans cleanly (so they test printing, not a contract error)."""
    result = runner.invoke(app, ["plan", "--json", str(_payload(tmp_path))])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rollout_id"] == "r-ok"


def test_a_colon_pair_in_user_input_is_printed_as_written_not_as_an_emoji():
    """rich turned `:a:` in `--backend bk.b:a:b` into 🅰 in the error line."""
    from typer.testing import CliRunner

    from compactsim.harness.cli import app

    result = CliRunner().invoke(app, ["run", "no-compaction", "--backend", "nowhere.mod:a:b"])
    assert result.exit_code == 2
    assert "backend='nowhere.mod:a:b' does not load" in result.output
