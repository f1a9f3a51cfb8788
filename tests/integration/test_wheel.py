"""The built wheel, installed into a fresh virtual environment and run from outside the repository.

The wheel is built from a copy of the sources (so no stale ``build/`` folder leaks into it) with
this venv's setuptools (no build isolation: nothing is downloaded). The fresh venv gets the wheel
with ``--no-deps``; the dependencies (torch, ...) come from this repository's venv through a
``.pth`` line naming its site-packages, which puts neither the checkout nor its editable install on
the path. Then, from a scratch folder: ``compactsim list``, ``run``, ``gym-check`` on its default
payloads (offline, against the repository's stand-in Gym revision), the pytest plugin beside a
trainer's own ``scenarios``/``agents`` packages, and no bare ``harness``/``agents``/... to import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TOPS = ("harness", "mock_servers", "agents", "scenarios")
#: What the build reads: the metadata, the package map and the mapped folders.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "compactsim", "examples", *TOPS)
GYM_STANDIN = REPO / "tests" / "fixtures" / "gym_drift" / "baseline"
TIMEOUT = 900


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    work: Path  # a scratch folder outside the repository, the commands' working directory

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{self.venv / 'bin'}:/usr/bin:/bin", "HOME": str(self.work), "LANG": "C.UTF-8",
               "WANDB_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "TMPDIR": str(self.work)}
        return subprocess.run([str(a) for a in argv], cwd=cwd or self.work, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)

    def cli(self, *argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(self.venv / "bin" / "compactsim", *argv, cwd=cwd)


def _copy_sources(dest: Path) -> Path:
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    assert not root.resolve().is_relative_to(REPO)
    src = _copy_sources(root / "src")
    dist = root / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(dist)], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("compactsim-*.whl")
    venv = root / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                          "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=TIMEOUT,
                         check=False)
    assert pip.returncode == 0, pip.stderr[-3000:]
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the dependencies, from this venv: a plain path line (its own .pth files, the editable install's
    # finder among them, are not processed)
    (site / "zz_compactsim_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    work = root / "work"
    work.mkdir()
    return Installed(wheel=wheel, venv=venv, work=work)


def test_the_wheel_holds_one_top_level_package_with_every_module_and_data_file(installed: Installed):
    with zipfile.ZipFile(installed.wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert {n.split("/")[0] for n in names} == {"compactsim", installed.wheel.name.split("-py3")[0] + ".dist-info"}
    expected = {f"compactsim/{p.relative_to(REPO)}" for top in TOPS for p in (REPO / top).rglob("*")
                if p.suffix in (".py", ".yaml", ".json") and "__pycache__" not in p.parts}
    expected |= {f"compactsim/examples/{p.name}" for p in (REPO / "examples").glob("*.json")}
    expected.add("compactsim/__init__.py")
    assert sorted(expected - names) == []
    assert len([n for n in expected if n.startswith("compactsim/examples/")]) == 2
    assert "compactsim = compactsim.harness.cli:app" in entry_points
    assert "compactsim = compactsim.harness.pytest_plugin" in entry_points
    requires = {line.split(":", 1)[1].strip().split(";")[0].split(">")[0].split("=")[0].strip()
                for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert {"hypothesis", "torch", "typer"} <= requires  # `shrink` and the strategies need hypothesis at run time


def test_the_installed_package_is_the_wheel_and_no_bare_folder_name_imports(installed: Installed):
    where = installed.run(installed.python, "-c", "import compactsim, compactsim.harness as h; "
                          "print(compactsim.__file__); print(h.__file__); print(compactsim.examples_dir())")
    assert where.returncode == 0, where.stderr[-3000:]
    package, harness, examples = (Path(line) for line in where.stdout.split())
    site = package.parent.parent
    assert package.parent.parent.is_relative_to(installed.venv) and not package.is_relative_to(REPO)
    assert harness == site / "compactsim" / "harness" / "__init__.py"
    assert examples == site / "compactsim" / "examples" and len(list(examples.glob("*.json"))) == 2
    for top in TOPS:
        bare = installed.run(installed.python, "-c", f"import {top}")
        assert bare.returncode != 0 and f"No module named '{top}'" in bare.stderr, (top, bare.stderr[-2000:])
    needs_hypothesis = installed.run(installed.python, "-c", "import compactsim.scenarios.strategies, compactsim.harness.shrink")
    assert needs_hypothesis.returncode == 0, needs_hypothesis.stderr[-3000:]


IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
import compactsim
names = [info.name for info in pkgutil.walk_packages(compactsim.__path__, "compactsim.")]
for name in names:
    importlib.import_module(name)
print(len(names), sorted(m for m in sys.modules if m.split(".")[0] in compactsim.SUBPACKAGES))
"""


def test_every_installed_module_imports(installed: Installed):
    out = installed.run(installed.python, "-c", IMPORT_EVERYTHING)
    assert out.returncode == 0, out.stderr[-3000:]
    count, bare = out.stdout.split(maxsplit=1)
    assert int(count) > 150 and bare.strip() == "[]"


def test_list_run_and_help_work_outside_the_repository(installed: Installed):
    listed = installed.cli("list")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "no-compaction" in listed.stdout and "image-compaction-k2-rolling" in listed.stdout
    out = installed.work / "o"
    ran = installed.cli("run", "no-compaction", "--out", out)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [(s["name"], s["passed"]) for s in summary["scenarios"]] == [("no-compaction", True)]
    helped = installed.cli("gym-check", "--help")
    assert helped.returncode == 0 and "--payloads" in helped.stdout, helped.stderr[-3000:]


def test_gym_check_finds_its_default_payloads_in_the_installed_package(installed: Installed):
    out = installed.work / "gym-check"
    checked = installed.cli("gym-check", "--gym", GYM_STANDIN, "--offline", "--cache-dir", installed.work / "gym-cache",
                            "--out", out)
    assert checked.returncode == 0, (checked.stdout[-3000:], checked.stderr[-3000:])
    report = json.loads((out / "gym-check.json").read_text(encoding="utf-8"))
    assert sorted(p["name"] for p in report["payloads"]) == sorted(p.name for p in (REPO / "examples").glob("*.json"))
    assert all(p["planner"].startswith("accepted") for p in report["payloads"])


TRAINER_TEST = '''
import agents
import scenarios


def test_the_trainers_own_packages_win():
    assert scenarios.MINE and agents.MINE


def test_compactsim_fixture(compactsim_run):
    result = compactsim_run("no-compaction", seed=1)
    assert result.passed, result.findings
'''


def test_pytest_plugin_beside_a_trainers_own_scenarios_and_agents_packages(installed: Installed):
    project = installed.work / "trainer"
    for name in ("scenarios", "agents"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text("MINE = True\n", encoding="utf-8")
    (project / "test_trainer.py").write_text(TRAINER_TEST, encoding="utf-8")
    (project / "pytest.ini").write_text("[pytest]\npythonpath = .\n", encoding="utf-8")
    ran = installed.run(installed.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--compactsim-out", project / "runs", cwd=project)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert "2 passed" in ran.stdout
