"""A source checkout's dynamic version is read from its files, never by importing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactsim.harness.gym_check.revision import fetch_revision, parse_spec
from compactsim.harness.gym_check.source_version import dynamic_version

PYPROJECT = """[project]
name = "nemo-gym"
dynamic = ["version", "readme"]
dependencies = ["pydantic", "openai==2.44.0"]

[tool.setuptools.dynamic]
version = {attr = "nemo_gym.__version__"}
"""

#: NeMo-Gym's (and every NVIDIA NeMo package's) package_info.py layout.
PACKAGE_INFO = """MAJOR = 0
MINOR = 7
PATCH = 1
PRE_RELEASE = "rc2"

VERSION = (MAJOR, MINOR, PATCH, PRE_RELEASE)

__shortversion__ = ".".join(map(str, VERSION[:3]))
__version__ = ".".join(map(str, VERSION[:3])) + "".join(VERSION[3:])
"""


def _checkout(tmp_path: Path, init: str, info: str = PACKAGE_INFO) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    pkg = tmp_path / "nemo_gym"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(init)
    (pkg / "package_info.py").write_text(info)
    return tmp_path


def test_nemo_gyms_layout_gives_its_version(tmp_path: Path):
    root = _checkout(tmp_path, "import os\nimport not_installed_anywhere\nfrom nemo_gym.package_info import (\n"
                               "    __shortversion__,\n    __version__,\n)\n")
    revision = fetch_revision(parse_spec(str(root)), tmp_path / "downloads")
    assert (revision.spec.kind, revision.version) == ("source", "0.7.1rc2")


def test_a_literal_in_the_package_itself(tmp_path: Path):
    root = _checkout(tmp_path, '__version__ = "1.2.3"\n', info="")
    assert dynamic_version(root, {"tool": {"setuptools": {"dynamic": {"version": {"attr": "nemo_gym.__version__"}}}}}) == "1.2.3"


@pytest.mark.parametrize("info", [
    "__version__ = compute()\n",                      # a call it does not evaluate
    "import subprocess\n__version__ = subprocess.check_output(['git', 'describe']).decode()\n",
    "__version__ = 7\n",                               # not a string
    "def f(:\n",                                       # not Python
])
def test_anything_else_is_unknown_and_nothing_runs(tmp_path: Path, info: str):
    root = _checkout(tmp_path, "from nemo_gym.package_info import __version__\n", info=info)
    revision = fetch_revision(parse_spec(str(root)), tmp_path / "downloads")
    assert revision.version is None


def test_no_dynamic_version_or_a_module_outside_the_checkout_is_unknown(tmp_path: Path):
    assert dynamic_version(tmp_path, {}) is None
    assert dynamic_version(tmp_path, {"tool": {"setuptools": {"dynamic": {"version": {"attr": "os.sep"}}}}}) is None


@pytest.mark.parametrize("make", ["dangling", "loop"])
def test_a_source_file_that_cannot_be_read_is_a_setup_error_naming_it(tmp_path: Path, make: str):
    """`gym-check --gym DIR` digests DIR's sources: a dangling or self-referencing symlink was an OSError traceback."""
    from compactsim.harness.gym_check.errors import GymSetupError
    from compactsim.harness.gym_check.revision import source_tree_digest

    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "x.py").symlink_to("nowhere" if make == "dangling" else "x.py")
    with pytest.raises(GymSetupError, match="x.py is not a readable regular file"):
        source_tree_digest(tmp_path)


def test_an_empty_spec_is_refused_rather_than_read_as_the_current_directory():
    from compactsim.harness.gym_check.errors import GymSetupError

    with pytest.raises(GymSetupError, match="the spec is empty"):
        parse_spec("  ")
