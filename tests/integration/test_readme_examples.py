"""The README's examples run: every ```bash command (except `make run` / `make test` themselves), the
```python pytest-plugin example through pytester, the ```jsonl rows-dump line through the dump parser,
and the compactsim step of docs/ci.md's workflow — so the docs cannot drift from the code.

Commands run in a scratch directory that links the repository's `examples/`, `tests/` and `.venv/`,
so relative paths in the docs resolve and every output lands in the scratch directory. A trailing
``# exits N`` comment in the README states a non-zero exit code the example is meant to have; a
``# exit 0 match, 1 findings, ...`` comment accepts either verdict. The golden-file recipe names the
reader's own trainer (``python -m my_trainer.replay``); a stand-in `my_trainer` package here writes
compactsim's reference pipeline's rows and batch metrics in its place — it plans and materializes
but does not train, so metric checks that need training report `metric.missing` findings, while
every row-level check must pass.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CI_DOC = REPO / "docs" / "ci.md"
BIN = REPO / ".venv" / "bin"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
#: Commands the README shows but that a test must not start (they are the whole suite / the test suite).
SKIPPED = ("make run", "make test")

MY_TRAINER = '''
"""Stand-in for the reader's trainer in the README's golden recipe: compactsim's reference pipeline."""
import argparse
from pathlib import Path

from compactsim.harness.golden import backend_dump, read_golden
from compactsim.harness.golden.rows_dump import format_dump

parser = argparse.ArgumentParser()
parser.add_argument("goldens")
parser.add_argument("--rows", required=True)
parser.add_argument("--metrics", required=True)
args = parser.parse_args()
dump = backend_dump(read_golden(Path(args.goldens)))
Path(args.rows).write_text(format_dump(dump.rows))
Path(args.metrics).write_text(format_dump(dump.metrics))
'''


def blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def commands(block: str) -> list[tuple[str, frozenset[int]]]:
    """(command, accepted exit codes) per line of a shell block; comments dropped, `# exits N` read."""
    out = []
    for raw in block.splitlines():
        code, _, comment = raw.partition("  #")
        code = code.strip()
        if not code or code.startswith("#") or code.startswith(SKIPPED):
            continue
        exact = re.search(r"exits (\d+)", comment)
        either = re.search(r"exit (\d+) match, (\d+) findings", comment)
        accepted = ({int(exact.group(1))} if exact else
                    {int(either.group(1)), int(either.group(2))} if either else {0})
        out.append((code, frozenset(accepted)))
    return out


def _scratch(tmp_path: Path) -> Path:
    for name in ("examples", "tests", ".venv"):
        (tmp_path / name).symlink_to(REPO / name)
    pkg = tmp_path / "my_trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "replay.py").write_text(MY_TRAINER)
    return tmp_path


def _argv(command: str) -> list[str]:
    argv = shlex.split(command)
    if argv[0] == "compactsim":
        argv[0] = str(BIN / "compactsim")
    elif argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0].startswith(".venv/bin/"):
        argv[0] = str(REPO / argv[0])
    return argv


def _env(cwd: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "COMPACTSIM_MAX_INPUT_BYTES")}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(REPO)])
    env.update(extra)
    return env


README_BASH = blocks(README.read_text(encoding="utf-8"), "bash")


def test_the_readme_has_the_examples_this_test_runs():
    assert len(README_BASH) >= 3 and blocks(README.read_text(encoding="utf-8"), "python")
    assert any("make run" in b for b in README_BASH)  # the one block whose commands are skipped


def _is_slow(block: str) -> bool:
    return "compactsim export" in block


@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[pytest.mark.slow] if _is_slow(b) else [], id=f"bash-{k}") for k, b in enumerate(README_BASH)],
)
def test_readme_shell_block_runs(block: str, tmp_path: Path):
    cwd = _scratch(tmp_path)
    for command, accepted in commands(block):
        result = subprocess.run(_argv(command), cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=1800)
        assert result.returncode in accepted, (command, result.stdout[-3000:], result.stderr[-3000:])
        assert "Traceback" not in result.stderr, (command, result.stderr[-3000:])
        if command.startswith("compactsim verify"):  # the stand-in trainer's rows must match the goldens exactly
            again = subprocess.run([*_argv(command), "--json"], cwd=cwd, env=_env(cwd), capture_output=True, text=True,
                                   timeout=1800)
            report = json.loads(again.stdout)
            assert report["scenarios"] and all(s["rows_audited"] > 0 or s["expected"] != "success"
                                               for s in report["scenarios"])
            assert [(s["scenario"], f["check"]) for s in report["scenarios"] for f in s["findings"]
                    if f["check"].startswith(("row", "rows", "rollout", "padding"))] == []


def test_readme_rows_dump_example_is_a_valid_dump_line():
    from compactsim.harness.golden.rows_dump import parse_rows_dump

    (block,) = blocks(README.read_text(encoding="utf-8"), "jsonl")
    dump = parse_rows_dump(block, source="README.md")
    assert [(r.scenario, r.step, r.physical_trace_id, r.parent_index, r.length) for r in dump.rows] == [
        ("image-compaction-k2-chunked", 0, "s0-g0-r0/trace-1", 0, 6)]


def test_readme_python_blocks_compile():
    for k, block in enumerate(blocks(README.read_text(encoding="utf-8"), "python")):
        compile(block, f"README.md python block {k}", "exec")


pytest_plugins = ["pytester"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_readme_pytest_plugin_example_passes(pytester: pytest.Pytester):
    (block,) = [b for b in blocks(README.read_text(encoding="utf-8"), "python") if "compactsim_run" in b]
    pytester.makepyfile(test_readme_example=textwrap.dedent(block).replace("    ...", "    pass"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=2)


def _ci_steps() -> list[str]:
    (workflow,) = blocks(CI_DOC.read_text(encoding="utf-8"), "yaml")
    jobs = yaml.safe_load(workflow)["jobs"]
    return [s["run"] for s in jobs["scenarios"]["steps"] if "compactsim run" in s.get("run", "")]


def test_the_ci_doc_is_linked_from_the_readme():
    assert "(docs/ci.md)" in README.read_text(encoding="utf-8")


@pytest.mark.slow
def test_ci_workflow_run_step_writes_junit_and_markdown(tmp_path: Path):
    (step,) = _ci_steps()
    cwd = _scratch(tmp_path)
    summary = tmp_path / "step-summary.md"
    command = step.replace("$SUITE", "smoke")
    result = subprocess.run(_argv(command), cwd=cwd, env=_env(cwd, GITHUB_STEP_SUMMARY=str(summary)),
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    suite = ET.parse(cwd / "reports" / "junit.xml").getroot()[0]
    names = [tc.get("name") for tc in suite]
    assert suite.get("failures") == "0" and len(names) == int(suite.get("tests")) >= 1
    progress = [ln for ln in result.stderr.splitlines() if re.fullmatch(r"\[\d+/\d+\] \S+ PASS \d+\.\ds", ln)]
    assert len(progress) == len(names)
    markdown = (cwd / "reports" / "summary.md").read_text()
    assert markdown.startswith(f"### ✅ compactsim run: {len(names)}/{len(names)} passed")
    assert summary.read_text() == markdown
